"""The ``mpi`` executor: runs any schedule over mpi4py on NumPy arrays (and CPU tensors, as NumPy views).

A schedule is compiled once per (algorithm, size, parameters) into a
:class:`MpiPlan` of plain tuples, so a call is a tight loop. How it runs:

* **one lane** (ring, rabenseifner, hierarchical): stage by stage with
  blocking calls. A stage of one send and one receive is MPI_Sendrecv; a
  reduce message is moved in blocks of at most ``REDUCE_BLOCK_BYTES``, each
  added while it is still in cache (one block of scratch instead of a
  chunk, so the sum reads what the receive just wrote rather than a chunk
  evicted by then). Both ends cut a message alike, since both see its
  length.
* **one exchange with one peer** (the ring's 2-rank small-message path):
  persistent requests kept per buffer (the training buckets and bench
  buffers are reused), which skips the request set-up MPI_Sendrecv pays
  on every call: the latency-bound small messages are where that shows.
* **several lanes** (multicolor, multiring, the tori): every lane posts its
  next stage non-blocking as soon as its previous one completed and was
  reduced, so pipeline chunks overlap and independent rings progress
  concurrently; a lane that follows another (``Schedule.follows``: a
  tree's pipeline chunks) posts its stage k only once that one has
  completed its stage k. Lane i uses tag ``TAG + i``.
* **collectives** (native, hierarchical's inter-node phase): MPI_Allreduce
  on a sub-communicator per group, made once and cached in the context.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from mpi4py import MPI

from scalerepro.comm.schedule import AllReduce, Recv, Schedule, Send, Stage

NAME = "mpi"
TAG = 9000
REDUCE_BLOCK_BYTES = 1 << 20

# Compiled stage kinds
EXCHANGE, SEND, RECV, MANY, COLLECTIVE = range(5)


@dataclass(frozen=True)
class MpiPlan:
    """A schedule compiled for the MPI executor: per lane a tuple of compiled stages, and the scratch it needs."""

    lanes: tuple[tuple[tuple[Any, ...], ...], ...]
    scratch: int  # elements of scratch
    offsets: tuple[int, ...]  # each lane's scratch offset (several lanes)
    direct: tuple[int, int] | None  # (peer, count) when the schedule is one whole-buffer exchange
    stage_index: tuple[tuple[int, ...], ...] = ()  # each compiled stage's index in its lane (empty ones are dropped)
    follows: tuple[int, ...] = ()  # the schedule's pipeline order (Schedule.follows)


def compile_plan(schedule: Schedule, count: int, itemsize: int) -> MpiPlan:
    """Compile ``schedule`` for a buffer of ``count`` elements of ``itemsize`` bytes."""
    block = max(1, REDUCE_BLOCK_BYTES // itemsize)
    single = len(schedule.lanes) == 1
    lanes, needs, indices = [], [], []
    for lane in schedule.lanes:
        compiled = [_compile_stage(stage, block if single else 0) for stage in lane if stage]
        lanes.append(tuple(compiled))
        indices.append(tuple(k for k, stage in enumerate(lane) if stage))
        needs.append(max((_scratch_of(c) for c in compiled), default=0))
    offsets = tuple(sum(needs[:i]) for i in range(len(needs)))
    scratch = max(needs, default=0) if single else sum(needs)
    return MpiPlan(tuple(lanes), scratch, offsets, _direct(schedule, count), tuple(indices), schedule.follows)


def _direct(schedule: Schedule, count: int) -> tuple[int, int] | None:
    """(peer, count) when the schedule is a single whole-buffer reduce exchange with one peer."""
    if len(schedule.lanes) != 1 or len(schedule.lanes[0]) != 1:
        return None
    stage = schedule.lanes[0][0]
    if len(stage) != 2:
        return None
    send, recv = stage
    if not (isinstance(send, Send) and isinstance(recv, Recv)):
        return None
    whole = (send.lo, send.hi) == (recv.lo, recv.hi) == (0, count)
    return (send.peer, count) if whole and send.peer == recv.peer and send.reduce and recv.reduce else None


def _compile_stage(stage: Stage, block: int) -> tuple[Any, ...]:
    """One stage as a tuple the run loop dispatches on (kind first)."""
    if len(stage) == 1 and isinstance(stage[0], AllReduce):
        return (COLLECTIVE, stage[0].group, stage[0].lo, stage[0].hi)
    sends = [s for s in stage if isinstance(s, Send)]
    recvs = [s for s in stage if isinstance(s, Recv)]
    if len(sends) + len(recvs) != len(stage):
        raise ValueError(f"a stage mixes a collective with messages: {stage}")
    if len(sends) == len(recvs) == 1 and block:
        return (EXCHANGE, sends[0], recvs[0], _blocks(sends[0], recvs[0], block))
    if len(stage) == 1 and block:
        return (SEND, sends[0]) if sends else (RECV, recvs[0])
    offsets, at = [], 0
    for r in recvs:
        offsets.append(at if r.reduce else -1)
        at += (r.hi - r.lo) if r.reduce else 0
    return (MANY, tuple(sends), tuple(recvs), tuple(offsets), at)


def _blocks(send: Send, recv: Recv, block: int) -> tuple[tuple[tuple[int, int] | None, tuple[int, int] | None], ...]:
    """The exchange cut into paired blocks: reduce messages in blocks of ``block`` elements, copies whole."""

    def cut(s: Send | Recv) -> list[tuple[int, int]]:
        size = block if s.reduce else max(1, s.hi - s.lo)
        return [(lo, min(lo + size, s.hi)) for lo in range(s.lo, s.hi, size)]

    out, ins = cut(send), cut(recv)
    return tuple(
        (out[i] if i < len(out) else None, ins[i] if i < len(ins) else None) for i in range(max(len(out), len(ins)))
    )


def _scratch_of(stage: tuple[Any, ...]) -> int:
    """Scratch elements a compiled stage needs."""
    if stage[0] == EXCHANGE and stage[2].reduce:
        return int(max(inc[1] - inc[0] for _, inc in stage[3] if inc is not None))
    if stage[0] == RECV and stage[1].reduce:
        return int(stage[1].hi - stage[1].lo)
    return int(stage[4]) if stage[0] == MANY else 0


def allreduce_array(plan: MpiPlan, buf: np.ndarray, ctx: Any, schedule: Schedule) -> None:
    """All-reduce ``buf`` in place by ``plan`` over ``ctx.comm``."""
    if plan.direct is not None:
        ctx.cached("mpi-direct", DirectExchanges).get(ctx.comm, buf, plan.direct[0])(buf)
        return
    scratch = ctx.scratch(buf.dtype, plan.scratch)
    if len(plan.lanes) == 1:
        _run_lane(plan.lanes[0], buf, scratch, ctx, schedule)
    elif plan.lanes:
        _drive(plan, buf, scratch, ctx.comm)


def _run_lane(
    stages: tuple[tuple[Any, ...], ...], buf: np.ndarray, tmp: np.ndarray, ctx: Any, schedule: Schedule
) -> None:
    """One lane, stage by stage, with blocking calls."""
    comm = ctx.comm
    for stage in stages:
        kind = stage[0]
        if kind == EXCHANGE:
            _exchange(comm, buf, tmp, stage)
        elif kind == SEND:
            s = stage[1]
            comm.Send(buf[s.lo : s.hi], dest=s.peer, tag=TAG)
        elif kind == RECV:
            r = stage[1]
            if r.reduce:
                incoming = tmp[: r.hi - r.lo]
                comm.Recv(incoming, source=r.peer, tag=TAG)
                np.add(buf[r.lo : r.hi], incoming, out=buf[r.lo : r.hi])
            else:
                comm.Recv(buf[r.lo : r.hi], source=r.peer, tag=TAG)
        elif kind == COLLECTIVE:
            _, group, lo, hi = stage
            sub = group_comm(ctx, schedule, group)
            if sub is not None:
                sub.Allreduce(MPI.IN_PLACE, buf[lo:hi], op=MPI.SUM)
        else:
            MPI.Request.Waitall(_post(comm, buf, tmp, stage, TAG))
            _reduce(buf, tmp, stage)


def _exchange(comm: MPI.Intracomm, buf: np.ndarray, tmp: np.ndarray, stage: tuple[Any, ...]) -> None:
    """One send and one receive, block by block: MPI_Sendrecv while both have a block left, then the longer's tail."""
    _, send, recv, blocks = stage
    tail: list[MPI.Request] = []
    for out, inc in blocks:
        if inc is None:
            tail.append(comm.Isend(buf[out[0] : out[1]], dest=send.peer, tag=TAG))
            continue
        lo, hi = inc
        target = tmp[: hi - lo] if recv.reduce else buf[lo:hi]
        if out is None:
            comm.Recv(target, source=recv.peer, tag=TAG)
        else:
            comm.Sendrecv(
                buf[out[0] : out[1]], dest=send.peer, sendtag=TAG, recvbuf=target, source=recv.peer, recvtag=TAG
            )
        if recv.reduce:
            np.add(buf[lo:hi], target, out=buf[lo:hi])
    MPI.Request.Waitall(tail)


def _post(comm: MPI.Intracomm, buf: np.ndarray, tmp: np.ndarray, stage: tuple[Any, ...], tag: int) -> list[MPI.Request]:
    """Post a MANY stage's receives and sends non-blocking; its requests."""
    _, sends, recvs, offsets, _ = stage
    reqs = [
        comm.Irecv(tmp[o : o + r.hi - r.lo] if o >= 0 else buf[r.lo : r.hi], source=r.peer, tag=tag)
        for r, o in zip(recvs, offsets, strict=True)
    ]
    reqs += [comm.Isend(buf[s.lo : s.hi], dest=s.peer, tag=tag) for s in sends]
    return reqs


def _reduce(buf: np.ndarray, tmp: np.ndarray, stage: tuple[Any, ...]) -> None:
    """Add a completed MANY stage's reduce messages into their slices."""
    _, _, recvs, offsets, _ = stage
    for r, o in zip(recvs, offsets, strict=True):
        if o >= 0:
            target = buf[r.lo : r.hi]
            np.add(target, tmp[o : o + r.hi - r.lo], out=target)


def _drive(plan: MpiPlan, buf: np.ndarray, scratch: np.ndarray, comm: MPI.Intracomm) -> None:
    """Run every lane to completion; each posts its next stage as soon as its last one is reduced and, if it
    follows another lane, that one has completed the same stage."""
    count = len(plan.lanes)
    at = [0] * count
    waiting = [0] * count
    pool: list[MPI.Request] = []
    owner: list[int] = []
    followers: list[list[int]] = [[] for _ in range(count)]
    for i, leader in enumerate(plan.follows):
        if leader >= 0:
            followers[leader].append(i)

    def done_below(i: int) -> int:
        """Lane i has completed every stage with a lower index than this (its next stage's index)."""
        return plan.stage_index[i][at[i]] if at[i] < len(plan.lanes[i]) else 1 << 62

    def advance(i: int) -> None:
        """Post lane i's next stage, if it has one and the lane it follows has completed that stage."""
        stages = plan.lanes[i]
        if at[i] >= len(stages) or waiting[i]:
            return
        leader = plan.follows[i] if plan.follows else -1
        if leader >= 0 and done_below(leader) <= plan.stage_index[i][at[i]]:
            return
        reqs = _post(comm, buf, scratch[plan.offsets[i] :], stages[at[i]], TAG + i)
        waiting[i] = len(reqs)
        pool.extend(reqs)
        owner.extend([i] * len(reqs))

    for i in range(count):
        advance(i)
    live = len(pool)
    while live:
        k = MPI.Request.Waitany(pool)
        i = owner[k]
        pool[k] = MPI.REQUEST_NULL
        live -= 1
        waiting[i] -= 1
        if waiting[i] == 0:
            _reduce(buf, scratch[plan.offsets[i] :], plan.lanes[i][at[i]])
            at[i] += 1
            before = len(pool)
            for j in (i, *followers[i]):
                advance(j)
            live += len(pool) - before
        if len(pool) > 64 and live < len(pool) // 4:  # compact finished entries
            keep = [j for j, r in enumerate(pool) if r != MPI.REQUEST_NULL]
            pool[:], owner[:] = [pool[j] for j in keep], [owner[j] for j in keep]


def group_comm(ctx: Any, schedule: Schedule, name: str) -> MPI.Intracomm | None:
    """This rank's communicator for partition ``name`` (the context's own for the whole world; None alone)."""
    partition = schedule.partition(name)
    mine = next(g for g in partition if ctx.rank in g)
    if len(mine) == 1:
        return None
    if len(mine) == ctx.size:
        return cast(MPI.Intracomm, ctx.comm)
    group = ctx.cached(("mpi-group", mine), lambda: ctx.comm.Create_group(ctx.comm.group.Incl(list(mine))))
    return cast(MPI.Intracomm, group)


class DirectExchange:
    """One buffer's persistent send to and receive from one peer, then the add."""

    def __init__(self, comm: MPI.Intracomm, buf: np.ndarray, peer: int) -> None:
        """Set up the persistent requests for ``buf`` and its own receive buffer."""
        self.incoming = np.empty_like(buf)
        self.requests = [comm.Send_init(buf, peer, TAG - 1), comm.Recv_init(self.incoming, peer, TAG - 1)]

    def __call__(self, buf: np.ndarray) -> None:
        """Exchange and add: both ranks end with a + b (== b + a bit for bit)."""
        MPI.Prequest.Startall(self.requests)
        MPI.Request.Waitall(self.requests)
        np.add(buf, self.incoming, out=buf)

    def free(self) -> None:
        """Free the requests."""
        for req in self.requests:
            req.Free()


class DirectExchanges:
    """The most recently used :class:`DirectExchange` per buffer (address, size, dtype, peer), at most ``CAP``."""

    CAP = 32

    def __init__(self) -> None:
        """Empty."""
        self._by_buffer: OrderedDict[tuple[int, int, str, int], DirectExchange] = OrderedDict()

    def get(self, comm: MPI.Intracomm, buf: np.ndarray, peer: int) -> DirectExchange:
        """The exchange for ``buf``, made on first use; the least recently used is freed past CAP."""
        key = (MPI.Get_address(buf), buf.size, buf.dtype.char, peer)
        found = self._by_buffer.get(key)
        if found is None:
            found = self._by_buffer[key] = DirectExchange(comm, buf, peer)
            if len(self._by_buffer) > self.CAP:
                self._by_buffer.popitem(last=False)[1].free()
        else:
            self._by_buffer.move_to_end(key)
        return found

    def free(self) -> None:
        """Free every exchange's requests."""
        while self._by_buffer:
            self._by_buffer.popitem()[1].free()
