"""``rabenseifner``: recursive-halving reduce-scatter, then recursive-doubling all-gather.

Cost: 2 lg p alpha + 2n(p-1)/p beta + n(p-1)/p gamma (Rabenseifner 2004;
Thakur, Rabenseifner and Gropp 2005). For p not a power of two, as
implemented here (the MPICH scheme): with r = p - 2^floor(lg p), the first
2r ranks pair up, each even rank hands its buffer to its odd partner and
sits out; the remaining 2^k ranks run the power-of-two algorithm; the odd
partners hand the result back. Each block is reduced by one rank and then
copied, so every rank ends with the same bits.
"""

from __future__ import annotations

import numpy as np

from scalerepro.comm.context import Context
from scalerepro.comm.registry import register
from scalerepro.comm.rings import chunk_bounds

TAG = 9100


def _active_rank(rank: int, extra: int) -> int | None:
    """Rank among the power-of-two participants, or None for a rank that sits out."""
    if rank < 2 * extra:
        return rank // 2 if rank % 2 else None
    return rank - extra


def _real_rank(vrank: int, extra: int) -> int:
    """Communicator rank of power-of-two participant ``vrank``."""
    return 2 * vrank + 1 if vrank < extra else vrank + extra


@register("rabenseifner")
def rabenseifner_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place all-reduce by recursive halving and doubling."""
    comm, p, rank = ctx.comm, ctx.size, ctx.rank
    if p == 1:
        return
    pof2 = 1 << (p.bit_length() - 1)
    extra = p - pof2
    tmp = np.empty_like(buf)
    if rank < 2 * extra:  # fold the extra ranks in
        if rank % 2 == 0:
            comm.Send(buf, dest=rank + 1, tag=TAG)
        else:
            comm.Recv(tmp, source=rank - 1, tag=TAG)
            np.add(buf, tmp, out=buf)
    vrank = _active_rank(rank, extra)
    if vrank is not None:
        _power_of_two(buf, tmp, ctx, vrank, pof2, extra)
    if rank < 2 * extra:  # hand the result back
        if rank % 2:
            comm.Send(buf, dest=rank - 1, tag=TAG + 1)
        else:
            comm.Recv(buf, source=rank + 1, tag=TAG + 1)


def _power_of_two(buf: np.ndarray, tmp: np.ndarray, ctx: Context, vrank: int, pof2: int, extra: int) -> None:
    """Recursive halving then doubling among ``pof2`` participants."""
    comm = ctx.comm
    b = chunk_bounds(buf.size, pof2)
    lo, hi = 0, pof2  # the block range [lo, hi) this rank is still responsible for
    history = []
    mask = pof2 >> 1
    while mask:  # reduce-scatter by recursive halving
        partner = _real_rank(vrank ^ mask, extra)
        mid = (lo + hi) // 2
        keep, give = ((lo, mid), (mid, hi)) if vrank & mask == 0 else ((mid, hi), (lo, mid))
        k0, k1, g0, g1 = b[keep[0]], b[keep[1]], b[give[0]], b[give[1]]
        comm.Sendrecv(buf[g0:g1], dest=partner, sendtag=TAG + 2, recvbuf=tmp[k0:k1], source=partner, recvtag=TAG + 2)
        np.add(buf[k0:k1], tmp[k0:k1], out=buf[k0:k1])
        history.append((partner, keep, give))
        lo, hi = keep
        mask >>= 1
    for partner, keep, give in reversed(history):  # all-gather by recursive doubling
        k0, k1, g0, g1 = b[keep[0]], b[keep[1]], b[give[0]], b[give[1]]
        comm.Sendrecv(buf[k0:k1], dest=partner, sendtag=TAG + 3, recvbuf=buf[g0:g1], source=partner, recvtag=TAG + 3)
