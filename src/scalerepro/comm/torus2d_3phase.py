"""``torus2d-3phase``: reduce-scatter along rows, all-reduce along columns, all-gather along rows.

After Mikami et al. 2018 (arXiv 1811.05233), as implemented here, on an
X x Y grid (``comm.grid``, default the squarest): the column all-reduce
runs on the 1/X shard as a ring (reduce-scatter then all-gather), so the
whole is 2(X+Y-2) alpha + 2n(p-1)/p beta. Pipelined in chunks of
``comm.chunk_bytes``.
"""

from __future__ import annotations

import numpy as np

from scalerepro.comm.context import Context
from scalerepro.comm.grid import grid_for, rings
from scalerepro.comm.shapes import GRID_DIMS, squarest
from scalerepro.comm.registry import register
from scalerepro.comm.rings import pipeline

TAG = 9500


@register("torus2d-3phase")
def torus2d_3phase_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place three-phase 2-D torus all-reduce."""
    if ctx.size == 1 or buf.size == 0:
        return
    dims = grid_for(ctx, "torus2d-3phase", GRID_DIMS["torus2d-3phase"], squarest(ctx.size))
    pipeline([(buf, rings(ctx, dims, [0, 1]))], ctx.params.chunk_bytes, TAG)
