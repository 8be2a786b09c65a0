"""The ``torch`` executor: runs any schedule with torch.distributed on tensors in place, on their own device.

NCCL for CUDA tensors, gloo for CPU tensors (one process group with the
``cpu:gloo,cuda:nccl`` backend where CUDA is present), so every path runs
on a CPU-only machine too. Each stage of a lane goes out as one
``batch_isend_irecv`` (grouped NCCL point-to-point, any ring order, driven
from the host, as Horovod's NCCL torus all-reduce does); lanes are served
in a fixed round, so every rank posts in the same order (a lane that
follows another, ``Schedule.follows``, a round behind it: a tree's
pipeline chunks enter each stage one after another); received
reduce messages land in a scratch tensor on the buffer's device and are
added with a torch op there. On gloo (CPU) the transfers of a batch
complete one by one, so reduce messages go in blocks of ``BLOCK_BYTES``
and each block is added as soon as it is in, while the later ones still
move (both ends cut a message alike, since both see its length).
Collectives run on the process groups of
:class:`scalerepro.distributed.ProcessGroups`, made once per group and
cached (members only, so disjoint groups need no common order). No byte
goes through host memory that the device holds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from scalerepro.comm.schedule import AllReduce, Recv, Schedule, Send
from scalerepro.distributed import ProcessGroups

NAME = "torch"
BLOCK_BYTES = 4 << 20


@dataclass(frozen=True)
class Stage:
    """One stage of one lane: its messages (send?, global peer, lo, hi, tag, scratch offset or -1), in order,
    or a collective (global ranks, lo, hi)."""

    messages: tuple[tuple[bool, int, int, int, int, int], ...]
    collective: tuple[tuple[int, ...], int, int] | None = None


@dataclass(frozen=True)
class TorchPlan:
    """A schedule compiled for the torch executor: each lane's stages, and the scratch elements they need."""

    lanes: tuple[tuple[Stage, ...], ...]
    scratch: int
    lags: tuple[int, ...] = ()  # the round each lane starts in (Schedule.lags)


def compile_plan(schedule: Schedule, rank: int, to_global: tuple[int, ...], block: int = 0) -> TorchPlan:
    """Compile ``schedule`` (ranks of the context's communicator, mapped to global ranks by ``to_global``).

    ``block`` > 0 cuts reduce messages into blocks of that many elements.
    Each lane gets its own stretch of scratch, since lanes run at once.
    A stage with nothing for this rank stays, empty: lanes are served in
    rounds, and dropping it would put this rank's lane a round ahead of its
    peers' (a wait cycle between two lanes, seen on tiny buffers).
    """
    lanes, at = [], 0
    for tag, lane in enumerate(schedule.lanes):
        stages, need = [], 0
        for stage in lane:
            if len(stage) == 1 and isinstance(stage[0], AllReduce):
                whole = stage[0]
                mine = next(g for g in schedule.partition(whole.group) if rank in g)
                stages.append(Stage((), (tuple(to_global[r] for r in mine), whole.lo, whole.hi)))
                continue
            messages, used = [], 0
            for step in stage:
                if isinstance(step, AllReduce):
                    raise ValueError("a library collective must be alone in its stage (schedules keep it so)")
                size = block if block and step.reduce else step.hi - step.lo
                for lo in range(step.lo, step.hi, size):
                    hi = min(lo + size, step.hi)
                    into = at + used if isinstance(step, Recv) and step.reduce else -1
                    messages.append((isinstance(step, Send), to_global[step.peer], lo, hi, tag, into))
                    used += hi - lo if into >= 0 else 0
            stages.append(Stage(tuple(messages)))  # an empty stage too: it keeps the lanes' rounds aligned
            need = max(need, used)
        lanes.append(tuple(stages))
        at += need
    return TorchPlan(tuple(lanes), at, schedule.lags())


def allreduce_tensor(plan: TorchPlan, t: Any, groups: ProcessGroups, scratch: Any) -> None:
    """All-reduce tensor ``t`` (1-D, contiguous) in place by ``plan``.

    In rounds: in each, lane after lane in a fixed order waits for the
    stage it posted in the round before, adds what it received and posts
    its next; a lane starts in the round of its lag, so a lane that follows
    another runs each stage a round after it. The posting order is the same
    on every rank (as NCCL needs), and one lane's transfers overlap
    another's reductions.
    """
    count = len(plan.lanes)
    lags = plan.lags or (0,) * count
    at = [0] * count  # each lane's next stage to post
    works: list[list[Any] | None] = [None] * count
    round_ = 0
    while any(at[i] < len(plan.lanes[i]) or works[i] is not None for i in range(count)):
        for i in range(count):
            done = works[i]
            if done is not None:
                _finish(plan.lanes[i][at[i] - 1], done, t, scratch)
                works[i] = None
            if round_ >= lags[i] and at[i] < len(plan.lanes[i]):
                works[i] = _post(plan.lanes[i][at[i]], t, groups, scratch)
                at[i] += 1
        round_ += 1


def _post(stage: Stage, t: Any, groups: ProcessGroups, scratch: Any) -> list[Any]:
    """Start a stage: its messages as one batch (or run its collective); the handles to wait for."""
    import torch.distributed as dist

    if stage.collective is not None:
        ranks, lo, hi = stage.collective
        if len(ranks) > 1:
            dist.all_reduce(t[lo:hi], op=dist.ReduceOp.SUM, group=groups.group(ranks))
        return []
    if not stage.messages:  # nothing for this rank this round (a piece too small to split)
        return []
    ops = [
        dist.P2POp(
            dist.isend if send else dist.irecv, t[lo:hi] if off < 0 else scratch[off : off + hi - lo], peer, tag=tag
        )
        for send, peer, lo, hi, tag, off in stage.messages
    ]
    return list(dist.batch_isend_irecv(ops))


def _finish(stage: Stage, works: list[Any], t: Any, scratch: Any) -> None:
    """Wait for a stage and add its reduce messages: block by block as each arrives (gloo), or all at once."""
    if len(works) == len(stage.messages):
        for w, message in zip(works, stage.messages, strict=True):
            w.wait()
            _reduce(t, scratch, message)
        return
    for w in works:  # coalesced (NCCL): one handle for the whole stage
        w.wait()
    for message in stage.messages:
        _reduce(t, scratch, message)


def _reduce(t: Any, scratch: Any, message: tuple[bool, int, int, int, int, int]) -> None:
    """Add a received reduce message into its slice (nothing for sends and copies)."""
    _, _, lo, hi, _, off = message
    if off >= 0:
        t[lo:hi].add_(scratch[off : off + hi - lo])
