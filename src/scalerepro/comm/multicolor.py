"""``multicolor``: the buffer split into k colors, each reduced around its own ring, all at once.

After Kumar et al. 2017 (arXiv 1711.00705), as implemented here: color c
all-reduces its 1/k of the buffer around a ring whose rank order differs
from the other colors' (color 0 runs 0,1,2,..., color 1 the reverse
direction, further colors stride through the ranks by numbers coprime to
p), so the colors load different links and directions. Each color's part
is cut into pipeline chunks of at most ``comm.chunk_bytes``; every chunk is
its own ring machine, and all machines of all colors progress concurrently
over non-blocking point-to-point (:func:`scalerepro.comm.rings.drive`).

Colors and chunks only pay when there is data to spread: a color gets at
least ``MIN_COLOR_BYTES`` (so an 8 KiB all-reduce runs as one ring), and the
colors and chunks actually used are reported by :func:`plan`. On 2 ranks
every color's ring is the same exchange with the one peer (forward and
backward coincide, and one ring already uses both directions of the link),
so colors there are pure overhead and the all-reduce runs as one ring.
"""

from __future__ import annotations

import math

import numpy as np

from scalerepro.comm.context import Context
from scalerepro.comm.registry import register
from scalerepro.comm.ring import ring_allreduce
from scalerepro.comm.rings import Ring, pipeline, slices

MIN_COLOR_BYTES = 64 * 1024  # below this per color, extra colors cost more latency than they win
TAG = 9200


def orders(p: int, colors: int) -> list[tuple[int, ...]]:
    """A distinct ring order per color: forward, backward, then coprime strides (cycled if p is small)."""
    strides = [s for s in range(1, p) if math.gcd(s, p) == 1]
    out = []
    for c in range(colors):
        stride = strides[(c // 2) % len(strides)] if strides else 1
        ring = tuple((i * stride) % p for i in range(p))
        out.append(ring if c % 2 == 0 else tuple(reversed(ring)))
    return out


def plan(nbytes: int, colors: int, chunk_bytes: int, p: int) -> tuple[int, int]:
    """(colors used, chunks per color) for an all-reduce of ``nbytes`` over p ranks."""
    if p <= 2:  # one peer: every color would be the same exchange
        return 1, 1
    used = max(1, min(colors, nbytes // MIN_COLOR_BYTES))
    per_color = math.ceil(nbytes / used)
    return used, max(1, math.ceil(per_color / chunk_bytes))


@register("multicolor")
def multicolor_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place multi-color ring all-reduce."""
    p = ctx.size
    if p == 1 or buf.size == 0:
        return
    colors, chunks = plan(buf.nbytes, ctx.params.colors, ctx.params.chunk_bytes, p)
    if colors == chunks == 1:  # one color, one chunk: exactly the ring, with the least overhead
        ring_allreduce(buf, ctx)
        return
    parts = [(part, [Ring(ctx.comm, order)]) for part, order in zip(slices(buf, colors), orders(p, colors))]
    pipeline(parts, ctx.params.chunk_bytes, TAG)
