"""``multiring``: PowerAI DDL's multi-dimensional ring all-reduce.

After Cho et al. 2017 (arXiv 1708.02188), as implemented here: the ranks
form a d1 x d2 x ... grid mapped to the topology (default: ranks per node x
nodes; or ``comm.grid``). Reduce-scatter around the dimension-1 rings, then
around the dimension-2 rings on the 1/d1 shard, and so on; then all-gather
back in reverse. Steps: 2 sum(d_k - 1); bytes in dimension k:
2n/(d1...d_{k-1}) (d_k - 1)/d_k. Pipelined in chunks of ``comm.chunk_bytes``.
"""

from __future__ import annotations

import numpy as np

from scalerepro.comm.context import Context
from scalerepro.comm.shapes import GRID_DIMS
from scalerepro.comm.grid import grid_for, node_layout, rings
from scalerepro.comm.registry import register
from scalerepro.comm.rings import pipeline

TAG = 9300


def default_grid(ctx: Context) -> tuple[int, ...]:
    """Ranks per node x nodes, without size-1 dimensions."""
    g, m = node_layout(ctx)
    return tuple(d for d in (g, m) if d > 1) or (1,)


@register("multiring")
def multiring_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place multi-dimensional ring all-reduce."""
    if ctx.size == 1 or buf.size == 0:
        return
    dims = grid_for(ctx, "multiring", GRID_DIMS["multiring"], ctx.cached("multiring-grid", lambda: default_grid(ctx)))
    pipeline([(buf, rings(ctx, dims, list(range(len(dims)))))], ctx.params.chunk_bytes, TAG)
