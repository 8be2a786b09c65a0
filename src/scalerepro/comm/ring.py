"""``ring``: reduce-scatter then all-gather around one ring of p ranks (rank order 0, 1, ..., p-1).

Cost: 2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma. Each chunk is
reduced along one fixed path and then copied around, so every rank ends
with the same bits. On 2 ranks a message of at most ``DIRECT_BYTES`` is
one whole-buffer exchange and add: the same bytes on the link as the
ring's two half-size steps, one latency instead of two, and a + b == b + a
bit for bit.
"""

from __future__ import annotations

from scalerepro.comm.schedule import EMPTY, Recv, Schedule, Send, Spec, ring_path

NAME = "ring"
DIRECT_BYTES = 64 * 1024


def schedule(spec: Spec) -> Schedule:
    """The ring's stages for ``spec.rank``."""
    p, n = spec.p, spec.count
    if p == 1 or n == 0:
        return EMPTY
    if p == 2 and spec.nbytes <= DIRECT_BYTES:
        peer = 1 - spec.rank
        return Schedule((((Send(peer, 0, n, True), Recv(peer, 0, n, True)),),), info={"direct": True})
    return Schedule((tuple(ring_path(spec.rank, [tuple(range(p))], 0, n)),))
