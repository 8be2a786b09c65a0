"""``torus2d``: Ying et al. 2018's 2-D torus all-reduce with both dimensions busy.

After Ying et al. 2018 (arXiv 1811.06992), as implemented here: the ranks
form an X x Y grid (``comm.grid``, default the squarest). The buffer is cut
in halves A and B. Stage 1: A reduce-scatters along Y while B does along X;
stage 2: each half reduce-scatters its shard along the other dimension;
then both all-gather back in reverse. B runs its rings in the opposite
direction, so both dimensions and both directions carry data in every
stage. About 2(X+Y-2) alpha + 2n(p-1)/p beta. Pipelined in chunks of
``comm.chunk_bytes``; both halves progress concurrently (non-blocking).
"""

from __future__ import annotations

import numpy as np

from scalerepro.comm.context import Context
from scalerepro.comm.grid import grid_for, rings
from scalerepro.comm.shapes import GRID_DIMS, squarest
from scalerepro.comm.registry import register
from scalerepro.comm.rings import pipeline, slices

TAG = 9400


@register("torus2d")
def torus2d_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place two-halves 2-D torus all-reduce."""
    if ctx.size == 1 or buf.size == 0:
        return
    dims = grid_for(ctx, "torus2d", GRID_DIMS["torus2d"], squarest(ctx.size))
    half_a, half_b = slices(buf, 2)
    path_a = rings(ctx, dims, [1, 0])  # A: along Y, then X
    path_b = rings(ctx, dims, [0, 1], reverse=True)  # B: along X, then Y, the other way round
    pipeline([(half_a, path_a), (half_b, path_b)], ctx.params.chunk_bytes, TAG)
