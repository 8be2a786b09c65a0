"""``ring``: reduce-scatter then all-gather around one ring of p ranks.

Cost: 2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma. Each chunk is reduced
along one fixed path and then copied around, so every rank ends with the
same bits.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from scalerepro.comm.registry import register


def chunk_bounds(n: int, p: int) -> list[int]:
    """Boundaries of p near-equal chunks of n elements (some may be empty)."""
    return [i * n // p for i in range(p + 1)]


@register("ring")
def ring_allreduce(buf: np.ndarray, comm: MPI.Intracomm) -> None:
    """In-place ring all-reduce over point-to-point Sendrecv."""
    p, r = comm.size, comm.rank
    if p == 1:
        return
    b = chunk_bounds(buf.size, p)
    chunks = [buf[b[i] : b[i + 1]] for i in range(p)]
    tmp = np.empty(max(len(c) for c in chunks), dtype=buf.dtype)
    right, left = (r + 1) % p, (r - 1) % p
    for s in range(p - 1):  # reduce-scatter: afterwards rank r owns chunk r+1
        send, recv = chunks[(r - s) % p], chunks[(r - s - 1) % p]
        incoming = tmp[: len(recv)]
        comm.Sendrecv(send, dest=right, sendtag=s, recvbuf=incoming, source=left, recvtag=s)
        np.add(recv, incoming, out=recv)
    for s in range(p - 1):  # all-gather
        send, recv = chunks[(r - s + 1) % p], chunks[(r - s) % p]
        comm.Sendrecv(send, dest=right, sendtag=p + s, recvbuf=recv, source=left, recvtag=p + s)
