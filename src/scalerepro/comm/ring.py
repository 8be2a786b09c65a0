"""``ring``: reduce-scatter then all-gather around one ring of p ranks.

Cost: 2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma. This is the plain
blocking version (one MPI_Sendrecv per step, the least Python per step);
its two halves also serve ``hierarchical``. The non-blocking ring engine
in :mod:`scalerepro.comm.rings` builds the multi-ring algorithms. Each
chunk is reduced along one fixed path and then copied around, so every
rank ends with the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI

from scalerepro.comm.context import Context
from scalerepro.comm.registry import register
from scalerepro.comm.rings import chunk_bounds

TAG = 9000


@dataclass(frozen=True)
class RingPlan:
    """Precomputed steps of a ring on one communicator for one element count (cached per context)."""

    right: int
    left: int
    width: int
    reduce_steps: tuple[tuple[int, int, int, int, int], ...]  # (send lo, hi, recv lo, hi, tag)
    gather_steps: tuple[tuple[int, int, int, int, int], ...]
    owned: tuple[int, int]

    @classmethod
    def make(cls, p: int, r: int, n: int) -> "RingPlan":
        """The plan for rank r of p over n elements."""
        b = chunk_bounds(n, p)
        span = lambda i: (b[i % p], b[i % p + 1])  # noqa: E731
        rs = tuple((*span(r - s), *span(r - s - 1), TAG + s) for s in range(p - 1))
        ag = tuple((*span(r - s + 1), *span(r - s), TAG + p + s) for s in range(p - 1))
        width = max(b[i + 1] - b[i] for i in range(p))
        return cls((r + 1) % p, (r - 1) % p, width, rs, ag, span(r + 1))


def plan_for(ctx: Context, comm: MPI.Intracomm, key: str, n: int) -> RingPlan:
    """The cached plan for ``comm`` (named ``key`` in the context) and n elements."""
    return ctx.cached(("ring-plan", key, n), lambda: RingPlan.make(comm.size, comm.rank, n))


def reduce_scatter(buf: np.ndarray, comm: MPI.Intracomm, plan: RingPlan, tmp: np.ndarray) -> np.ndarray:
    """Ring reduce-scatter in place (``tmp`` holds >= plan.width elements); return the chunk this rank owns."""
    for slo, shi, rlo, rhi, tag in plan.reduce_steps:
        incoming = tmp[: rhi - rlo]
        comm.Sendrecv(buf[slo:shi], dest=plan.right, sendtag=tag, recvbuf=incoming, source=plan.left, recvtag=tag)
        recv = buf[rlo:rhi]
        recv += incoming
    lo, hi = plan.owned
    return buf[lo:hi]


def all_gather(buf: np.ndarray, comm: MPI.Intracomm, plan: RingPlan) -> None:
    """Ring all-gather in place, after :func:`reduce_scatter` left each rank's owned chunk complete."""
    for slo, shi, rlo, rhi, tag in plan.gather_steps:
        comm.Sendrecv(buf[slo:shi], dest=plan.right, sendtag=tag, recvbuf=buf[rlo:rhi], source=plan.left, recvtag=tag)


@register("ring")
def ring_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place ring all-reduce over blocking Sendrecv."""
    if ctx.size == 1:
        return
    plan = plan_for(ctx, ctx.comm, "world", buf.size)
    reduce_scatter(buf, ctx.comm, plan, ctx.scratch(buf.dtype, plan.width))
    all_gather(buf, ctx.comm, plan)
