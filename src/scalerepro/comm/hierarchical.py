"""``hierarchical``: intra-node reduce-scatter, inter-node all-reduce on the shard, intra-node all-gather.

As implemented here: the node is the MPI shared-memory split; the
intra-node phases are the blocking ring of :mod:`scalerepro.comm.ring`;
the inter-node phase is MPI_Allreduce among the ranks with the same local
rank, on the 1/g shard. Cost 2(g-1)/g n b_intra + 2(m-1)/m (n/g) b_inter
for g ranks per node and m nodes. Needs the same rank count on every node.
"""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from scalerepro.comm.context import Context
from scalerepro.comm.grid import node_layout
from scalerepro.comm.registry import register
from scalerepro.comm.ring import all_gather, plan_for, reduce_scatter


@register("hierarchical")
def hierarchical_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place two-level all-reduce."""
    if ctx.size == 1:
        return
    ctx.cached("hierarchical-layout", lambda: node_layout(ctx))
    node = ctx.node()
    across = ctx.split("hierarchical-across", node.rank, ctx.rank)
    plan = plan_for(ctx, node, "node", buf.size, buf.itemsize)
    shard = reduce_scatter(buf, node, plan, ctx.scratch(buf.dtype, plan.width))
    if across.size > 1:
        across.Allreduce(MPI.IN_PLACE, shard, op=MPI.SUM)
    all_gather(buf, node, plan)
