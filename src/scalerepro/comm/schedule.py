"""All-reduce schedules: each algorithm written once, as data, for every executor and the cost model.

A :class:`Schedule` is what one rank does in one all-reduce of ``count``
elements, as *lanes* of *stages* of *steps*:

* a step sends a slice ``[lo, hi)`` of the buffer to a peer (:class:`Send`),
  receives a slice from a peer (:class:`Recv`: copied over the slice, or,
  for a ``reduce`` message, added into it), or sums a slice over this
  rank's group of a named partition of the ranks (:class:`AllReduce`, a
  collective the executor hands to its library);
* a stage's steps run concurrently, and the stage ends when all of them
  have; the data of reduce messages is added only then, so a stage may send
  a slice and reduce into it;
* a lane's stages run in order; lanes are independent (the colors of
  multicolor, the halves of torus2d, the pipeline chunks), and lane ``i``
  of one rank talks only to lane ``i`` of another, so executors may run
  lanes in lockstep (torch.distributed, the cost model) or let each run
  ahead (the MPI executor);
* except where a schedule orders them (``Schedule.follows``): a lane that
  follows another enters its stage k only once that one has left its
  stage k, on the same rank. That is a pipeline: the chunks of a tree's
  part cross each link one after another, so one level of the tree works
  on chunk j while the next works on chunk j - 1, instead of every chunk
  crossing every level at once and sharing its links. Every executor and
  the simulator keep this order; lanes without it may run in any order.

A message appears twice, as a ``Send`` on one rank and a ``Recv`` on its
peer, with the same length and ``reduce`` flag (the MPI executor cuts
reduce messages into cache-sized blocks, and both ends must cut alike);
messages between two ranks in one lane match in order. Zero-length
messages are left out. :func:`interpret` runs the schedules of every rank
in one process, which is how the tests check an algorithm at rank counts
and node layouts no machine here has.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from scalerepro.errors import UserError

WORLD = "world"


class Send(NamedTuple):
    """Send ``buf[lo:hi]`` to ``peer``; ``reduce``: the peer adds it into its slice."""

    peer: int
    lo: int
    hi: int
    reduce: bool = False


class Recv(NamedTuple):
    """Receive into ``buf[lo:hi]`` from ``peer``: copied over it, or added into it when ``reduce``."""

    peer: int
    lo: int
    hi: int
    reduce: bool = False


class AllReduce(NamedTuple):
    """Sum ``buf[lo:hi]`` over this rank's group of the partition called ``group`` (the library's collective)."""

    group: str
    lo: int
    hi: int


Step = Send | Recv | AllReduce
Stage = tuple[Step, ...]
Lane = tuple[Stage, ...]


@dataclass(frozen=True)
class Spec:
    """What a schedule is for: rank ``rank`` of ``p``, ``count`` elements of ``itemsize`` bytes, and the parameters.

    ``nodes`` gives the node of every rank (``()``: all on one node);
    ``rails`` the network adapters per node, which only a library's model
    reads (NCCL opens one ring per adapter, :func:`scalerepro.comm.nccl.model`).
    """

    p: int
    rank: int
    count: int
    itemsize: int = 4
    colors: int = 2
    chunk_bytes: int = 4 << 20
    grid: tuple[int, ...] = ()
    nodes: tuple[int, ...] = ()
    dim_algorithms: tuple[str, ...] = ()  # multiring: per grid dimension, "ring" or "library" (default ring)
    rails: int = 1
    tree_arity: int = 2  # multicolor: children per tree node

    @property
    def nbytes(self) -> int:
        """Bytes per rank."""
        return self.count * self.itemsize

    def node_of(self, rank: int) -> int:
        """The node of ``rank``."""
        return self.nodes[rank] if self.nodes else 0

    def node_ranks(self) -> list[tuple[int, ...]]:
        """The ranks of every node, nodes ordered by their first rank."""
        members: dict[int, list[int]] = {}
        for r in range(self.p):
            members.setdefault(self.node_of(r), []).append(r)
        return [tuple(m) for m in sorted(members.values())]


@dataclass(frozen=True)
class Schedule:
    """One rank's all-reduce: lanes of stages of steps, the partitions its collectives use, and what it is.

    ``info`` records the shape actually used (``as`` when the algorithm
    reduces to another at this size or rank count, colors, orders, grid,
    chunks); bench rows and run records carry it. ``follows`` orders lanes
    into pipelines: per lane, the lane whose stage k must end before its
    own stage k starts, or -1 (empty: no lane follows another).
    """

    lanes: tuple[Lane, ...]
    groups: tuple[tuple[str, tuple[tuple[int, ...], ...]], ...] = ()
    info: dict[str, Any] = field(default_factory=dict, compare=False)
    follows: tuple[int, ...] = ()

    def after(self, lane: int) -> int:
        """The lane ``lane`` follows in a pipeline (-1: none)."""
        return self.follows[lane] if self.follows else -1

    def lags(self) -> tuple[int, ...]:
        """Per lane, how many lanes it follows in turn: where its pipeline runs lanes stage by stage together, lane i
        runs its stage k in round k + lag (the torch executor's order)."""
        out: list[int] = []
        for i in range(len(self.lanes)):
            leader = self.after(i)
            if leader >= i:
                raise ValueError(f"lane {i} follows lane {leader}: a lane may follow only an earlier one")
            out.append(0 if leader < 0 else out[leader] + 1)
        return tuple(out)

    def partition(self, name: str) -> tuple[tuple[int, ...], ...]:
        """The partition of the ranks called ``name``."""
        for key, groups in self.groups:
            if key == name:
                return groups
        raise KeyError(f"schedule has no partition {name!r}")

    def steps(self) -> Iterable[Step]:
        """Every step, lane by lane."""
        return (step for lane in self.lanes for stage in lane for step in stage)


EMPTY = Schedule(())
UNCUT = 1 << 62  # chunk_bytes that cuts no buffer into pipeline chunks (the cost model's closed form; torch's default)

# Pipeline chunk per executor when comm.chunk_bytes is 0. mpi: 4 MiB, measured best on one shared-memory node.
# torch: none; NCCL pipelines inside its kernels, and gloo sends all messages to a peer down one TCP connection in
# order, so extra lanes only queue (multicolor's rings at 4 ranks, 32 MiB: 85-95 ms with 4 MiB chunks, 65 ms
# without, gloo's all_reduce 55-69 ms, medians of 7).
EXECUTOR_CHUNK_BYTES = {"mpi": 4 << 20, "torch": UNCUT}


def executor_chunk(executor: str, chunk_bytes: int = 0) -> int:
    """The pipeline chunk an executor runs with: ``comm.chunk_bytes``, or (0) the executor's own."""
    return chunk_bytes or EXECUTOR_CHUNK_BYTES[executor]


def chunk_bounds(lo: int, hi: int, parts: int) -> list[int]:
    """Boundaries of ``parts`` near-equal contiguous pieces of ``[lo, hi)`` (some may be empty)."""
    n = hi - lo
    return [lo + i * n // parts for i in range(parts + 1)]


def pieces(lo: int, hi: int, parts: int) -> list[tuple[int, int]]:
    """``[lo, hi)`` cut into ``parts`` contiguous near-equal (lo, hi) pieces."""
    b = chunk_bounds(lo, hi, parts)
    return [(b[i], b[i + 1]) for i in range(parts)]


def chunks_for(nbytes: int, chunk_bytes: int) -> int:
    """Pipeline chunks for ``nbytes``: each at most ``chunk_bytes``."""
    return max(1, -(-nbytes // chunk_bytes))


def exchange(send: Send, recv: Recv) -> Stage:
    """A stage of one send and one receive, zero-length messages left out."""
    if send.hi > send.lo:
        return (send, recv) if recv.hi > recv.lo else (send,)
    return (recv,) if recv.hi > recv.lo else ()


# one ring's (reduce-scatter stages, all-gather stages, the chunk owned between them) for (rank, order, lo, hi)
_Phases = Callable[[int, tuple[int, ...], int, int], tuple[list[Stage], list[Stage], tuple[int, int]]]


def ring_path(rank: int, rings: Sequence[tuple[int, ...]], lo: int, hi: int) -> list[Stage]:
    """Stages that all-reduce ``[lo, hi)`` along ``rings`` (each an order of ranks holding ``rank``).

    Reduce-scatter around the first ring, then around the second on the
    chunk the first left this rank, and so on; then all-gather back in
    reverse. Each chunk is reduced along one fixed path and then copied, so
    every rank ends with the same bits. A ring of one rank is skipped.
    """
    return _along(rank, rings, lo, hi, ring_phases)


def _along(rank: int, rings: Sequence[tuple[int, ...]], lo: int, hi: int, phases: _Phases) -> list[Stage]:
    """Reduce-scatters along ``rings`` in turn, each on the chunk the last left, then the all-gathers in reverse;
    ``phases`` gives one ring's (reduce-scatter, all-gather, chunk owned)."""
    reduce: list[Stage] = []
    gathers: list[list[Stage]] = []
    for order in rings:
        if len(order) == 1:
            continue
        scatter, gather, (lo, hi) = phases(rank, order, lo, hi)
        reduce += scatter
        gathers.append(gather)
    return reduce + [stage for gather in reversed(gathers) for stage in gather]


def ring_phases(
    rank: int, order: tuple[int, ...], lo: int, hi: int
) -> tuple[list[Stage], list[Stage], tuple[int, int]]:
    """Around one ring ``order`` (holding ``rank``) on ``[lo, hi)``: the reduce-scatter's stages, the
    all-gather's, and the (lo, hi) this rank owns between them."""
    q = len(order)
    pos = order.index(rank)
    right, left = order[(pos + 1) % q], order[(pos - 1) % q]
    b = chunk_bounds(lo, hi, q)
    c = [(b[(pos - s) % q], b[(pos - s) % q + 1]) for s in range(q)]  # c[s]: chunk pos - s
    # tuple.__new__ directly: NamedTuple's own constructor is several times slower, and the cost model builds
    # every rank's schedule (4 M steps for a ring of 1,024)
    new = tuple.__new__
    scatter = [exchange(new(Send, (right, *c[s], True)), new(Recv, (left, *c[s + 1], True))) for s in range(q - 1)]
    gather = [
        exchange(new(Send, (right, *c[(s - 1) % q], False)), new(Recv, (left, *c[s], False))) for s in range(q - 1)
    ]
    return scatter, gather, c[q - 1]  # chunk pos + 1: what this rank owns after the reduce-scatter


def bidir_path(rank: int, rings: Sequence[tuple[int, ...]], lo: int, hi: int) -> list[Stage]:
    """:func:`ring_path` with every ring run both ways at once (:func:`bidir_phases`): half the stages."""
    return _along(rank, rings, lo, hi, bidir_phases)


def bidir_phases(
    rank: int, order: tuple[int, ...], lo: int, hi: int
) -> tuple[list[Stage], list[Stage], tuple[int, int]]:
    """Around one ring ``order`` both ways at once, on ``[lo, hi)``: the reduce-scatter's stages, the
    all-gather's, and the (lo, hi) this rank owns between them.

    Chunk k (of q, one per position) is summed at position k from both
    sides: the ``ceil(q/2)`` positions before it pass a running sum forward
    and the rest pass one backward, one hop a stage, so every stage sends
    one chunk each way and the reduce-scatter takes ``ceil(q/2)`` stages
    instead of q - 1; the all-gather copies chunk k forward to the
    ``ceil(q/2)`` positions after it and backward to the rest. The two sums
    of a chunk reach its owner in different stages (the backward one a
    stage or more before the forward one), so each stage adds at most
    one message into a slice, and every rank ends with the owner's bits.
    """
    q = len(order)
    pos = order.index(rank)
    right, left = order[(pos + 1) % q], order[(pos - 1) % q]
    b = chunk_bounds(lo, hi, q)

    def c(k: int) -> tuple[int, int]:
        k %= q
        return b[k], b[k + 1]

    fwd = (q + 1) // 2  # positions summing forward into a chunk (its last sum arrives in stage fwd)
    back = q - 1 - fwd
    new = tuple.__new__
    scatter: list[Stage] = []
    for s in range(1, fwd + 1):
        steps: list[Send | Recv] = [
            new(Send, (right, *c(pos + fwd - s + 1), True)),
            new(Recv, (left, *c(pos + fwd - s), True)),
        ]
        if s <= back:
            steps += [new(Send, (left, *c(pos - back + s - 1), True)), new(Recv, (right, *c(pos - back + s), True))]
        scatter.append(tuple(x for x in steps if x.hi > x.lo))
    gather: list[Stage] = []
    for s in range(1, fwd + 1):
        steps = [new(Send, (right, *c(pos - s + 1), False)), new(Recv, (left, *c(pos - s), False))]
        if s <= back:
            steps += [new(Send, (left, *c(pos + s - 1), False)), new(Recv, (right, *c(pos + s), False))]
        gather.append(tuple(x for x in steps if x.hi > x.lo))
    return scatter, gather, c(pos)


def pipelined(
    rank: int,
    parts: Sequence[tuple[tuple[int, int], Sequence[tuple[int, ...]]]],
    itemsize: int,
    chunk_bytes: int,
    path: Callable[[int, Sequence[tuple[int, ...]], int, int], list[Stage]] = ring_path,
) -> tuple[Lane, ...]:
    """One lane per pipeline chunk of each ((lo, hi), rings) part, along ``path``: the multi-ring algorithms'
    shape."""
    lanes = []
    for (lo, hi), rings in parts:
        for clo, chi in pieces(lo, hi, chunks_for((hi - lo) * itemsize, chunk_bytes)):
            lanes.append(tuple(path(rank, rings, clo, chi)))
    return tuple(lanes)


def world_collective(spec: Spec, **info: Any) -> Schedule:
    """One library all-reduce of the whole buffer over every rank."""
    if spec.p == 1 or spec.count == 0:
        return Schedule((), info=info)
    return Schedule((((AllReduce(WORLD, 0, spec.count),),),), ((WORLD, (tuple(range(spec.p)),)),), info)


def reduced_to(schedule: Schedule, name: str) -> Schedule:
    """``schedule`` labelled as being algorithm ``name``'s (an algorithm that reduces to another says so)."""
    info = dict(schedule.info)
    info.setdefault("as", name)
    return Schedule(schedule.lanes, schedule.groups, info, schedule.follows)


def check_uniform_nodes(spec: Spec, algo: str) -> tuple[int, int]:
    """(ranks per node, nodes), or a UserError unless every node holds the same number of consecutive ranks."""
    members = spec.node_ranks()
    g = len(members[0])
    if any(m != tuple(range(i * g, (i + 1) * g)) for i, m in enumerate(members)):
        sizes = sorted({len(m) for m in members})
        raise UserError(
            f"{algo}: ranks are not placed {g} consecutive ranks per node (node sizes {sizes}); launch "
            "with a block layout (e.g. srun --distribution=block) or set comm.grid explicitly"
        )
    return g, len(members)


# --- running every rank's schedule in one process: the reference the tests hold executors and algorithms to ---


class Deadlock(RuntimeError):
    """No rank can make progress: a schedule waits for a message nobody sends."""


@dataclass
class _Cursor:
    """Where one lane of one rank is: its stage index."""

    stages: Lane
    at: int = 0


def interpret(schedules: Sequence[Schedule], buffers: Sequence[np.ndarray], lockstep: bool = False) -> int:
    """Run every rank's schedule on its buffer, in place; return the number of stage rounds it took.

    Messages are matched per (sender, receiver, lane) in order, with equal
    lengths and reduce flags; a stage completes when every one of its
    messages is matched by the peer's current stage (rendezvous), and a
    collective when every member's current stage holds it; a lane that
    follows another (``Schedule.follows``) waits until that one has left
    the stage. ``lockstep`` runs each rank's lanes stage by stage together,
    as the torch executor does. Raises :class:`Deadlock` (naming the stuck
    ranks) instead of hanging, and ValueError on a message whose two ends
    disagree.
    """
    p = len(schedules)
    lanes = [[_Cursor(lane) for lane in s.lanes] for s in schedules]
    lags = [s.lags() for s in schedules]
    rounds = 0
    while True:
        current = {
            (r, i): c.stages[c.at]
            for r in range(p)
            for i, c in enumerate(lanes[r])
            if c.at < len(c.stages) and not _waits_for_leader(lanes[r], schedules[r].after(i), c.at)
        }
        if lockstep:
            current = _lockstep_only(current, lanes, lags)
        if not current:
            if any(c.at < len(c.stages) for cs in lanes for c in cs):
                raise Deadlock("lanes wait for the lanes they follow, which never leave their stage")
            return rounds
        ready = [key for key, stage in current.items() if _can_complete(key, stage, current, schedules)]
        if not ready:
            stuck = sorted({r for r, _ in current})
            raise Deadlock(
                f"no stage can complete; ranks {stuck} wait (first: rank {stuck[0]} lane "
                f"{next(i for r, i in current if r == stuck[0])})"
            )
        _complete(ready, current, schedules, buffers)
        for r, i in ready:
            lanes[r][i].at += 1
        rounds += 1


def _waits_for_leader(cursors: list[_Cursor], leader: int, stage: int) -> bool:
    """Whether a lane at ``stage`` must wait for the lane it follows (``leader``; -1 none) to leave that stage."""
    if leader < 0:
        return False
    lead = cursors[leader]
    return lead.at <= stage and lead.at < len(lead.stages)


def _lockstep_only(
    current: dict[tuple[int, int], Stage], lanes: list[list[_Cursor]], lags: list[tuple[int, ...]]
) -> dict[tuple[int, int], Stage]:
    """Keep only lanes in their rank's earliest round: stage index plus lag (:meth:`Schedule.lags`) lowest."""
    low = {
        r: min(c.at + lags[r][i] for i, c in enumerate(cs) if c.at < len(c.stages))
        for r, cs in enumerate(lanes)
        if any(c.at < len(c.stages) for c in cs)
    }
    return {(r, i): s for (r, i), s in current.items() if lanes[r][i].at + lags[r][i] == low[r]}


def _can_complete(
    key: tuple[int, int], stage: Stage, current: dict[tuple[int, int], Stage], schedules: Sequence[Schedule]
) -> bool:
    """Whether every step of ``stage`` (rank, lane = key) finds its partner in the peers' current stages."""
    r, lane = key
    for step in stage:
        if isinstance(step, (Send, Recv)):
            partner = Recv if isinstance(step, Send) else Send
            theirs = [s for s in current.get((step.peer, lane), ()) if isinstance(s, partner) and s.peer == r]
            mine = [s for s in stage if type(s) is type(step) and s.peer == step.peer]
            if len(theirs) < len(mine):
                return False
        else:
            members = _group_of(schedules[r], step.group, r)
            if not all(
                any(isinstance(s, AllReduce) and s.group == step.group for s in current.get((m, lane), ()))
                for m in members
            ):
                return False
    return True


def _group_of(schedule: Schedule, name: str, rank: int) -> tuple[int, ...]:
    """The group of partition ``name`` holding ``rank``."""
    return next(g for g in schedule.partition(name) if rank in g)


def _complete(
    ready: list[tuple[int, int]],
    current: dict[tuple[int, int], Stage],
    schedules: Sequence[Schedule],
    buffers: Sequence[np.ndarray],
) -> None:
    """Carry out the ready stages: messages first (from the buffers as they were), then reductions and copies."""
    ready_set = set(ready)
    writes: list[tuple[int, Recv, np.ndarray]] = []
    sums: dict[tuple[str, tuple[int, ...], int, int], np.ndarray] = {}
    for r, lane in ready:
        for step in current[(r, lane)]:
            if isinstance(step, Recv):
                if (step.peer, lane) not in ready_set:
                    raise Deadlock(f"rank {r} lane {lane} receives from rank {step.peer}, whose stage is not ready")
                sends = [s for s in current[(step.peer, lane)] if isinstance(s, Send) and s.peer == r]
                recvs = [s for s in current[(r, lane)] if isinstance(s, Recv) and s.peer == step.peer]
                send = sends[recvs.index(step)]
                if send.hi - send.lo != step.hi - step.lo or send.reduce != step.reduce:
                    raise ValueError(f"rank {step.peer} sends {send} but rank {r} expects {step} (lane {lane})")
                writes.append((r, step, buffers[step.peer][send.lo : send.hi].copy()))
            elif isinstance(step, AllReduce):
                group = _group_of(schedules[r], step.group, r)
                key = (step.group, group, step.lo, step.hi)
                if key not in sums:
                    sums[key] = _ordered_sum([buffers[m][step.lo : step.hi] for m in group])
    for r, step, data in writes:
        target = buffers[r][step.lo : step.hi]
        if step.reduce:
            np.add(target, data, out=target)
        else:
            target[...] = data
    for (_name, group, lo, hi), total in sums.items():
        for m in group:
            buffers[m][lo:hi] = total


def _ordered_sum(parts: list[np.ndarray]) -> np.ndarray:
    """Sum in rank order (a stand-in for the library's collective)."""
    total = parts[0].copy()
    for part in parts[1:]:
        total += part
    return total


def every_rank(make: Callable[[Spec], Schedule], spec: Spec) -> list[Schedule]:
    """``make``'s schedule for every rank of ``spec``."""
    from dataclasses import replace

    return [make(replace(spec, rank=r)) for r in range(spec.p)]


def check_aligned(schedules: Sequence[Schedule]) -> None:
    """A ValueError unless stage k of lane i is the same step everywhere: each message's two ends sit in it.

    The cost model adds up stages across ranks by index, so it needs this;
    every built-in algorithm keeps it (empty stages where a rank sits out).
    """
    shapes = {tuple(len(lane) for lane in s.lanes) for s in schedules if s.lanes}
    if len(shapes) > 1:
        raise ValueError(f"ranks have different lane/stage counts: {sorted(shapes)[:4]}")
    for r, s in enumerate(schedules):
        for i, lane in enumerate(s.lanes):
            for k, stage in enumerate(lane):
                for step in stage:
                    if isinstance(step, (Send, Recv)):
                        kind = Recv if isinstance(step, Send) else Send
                        peer = schedules[step.peer].lanes[i][k]
                        if not any(
                            isinstance(x, kind) and x.peer == r and x.hi - x.lo == step.hi - step.lo for x in peer
                        ):
                            raise ValueError(f"rank {r} lane {i} stage {k}: {step} has no partner in that stage")
