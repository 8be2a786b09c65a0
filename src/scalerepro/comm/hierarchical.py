"""``hierarchical``: intra-node reduce-scatter, inter-node all-reduce on the shard, intra-node all-gather.

Goyal et al. 2017 sum within each server, all-reduce across servers and
broadcast back (``goyal2017#allreduce``, sec. 4.1); this version
reduce-scatters and all-gathers inside the node instead, so each rank
carries 1/g of the buffer across nodes. It is multiring on ranks per node
x nodes with the library across nodes (``comm.dim_algorithms: [ring,
library]``; the same schedule in one pipeline chunk, tested).

As implemented here: the node comes from the rank layout (MPI's
shared-memory split, or SLURM's node names); the intra-node phases are a
ring over the node's ranks; the inter-node phase is the library's
all-reduce (MPI_Allreduce, or NCCL/gloo under the torch executor) among the
ranks with the same local rank, on the 1/g shard. Cost 2(g-1)/g n b_intra
+ the library's all-reduce of n/g bytes over m nodes, for g ranks per node.
Needs the same rank count on every node. On one node it is the ring
(``as: ring``).
"""

from __future__ import annotations

from scalerepro.comm import ring
from scalerepro.comm.schedule import (
    EMPTY,
    AllReduce,
    Schedule,
    Spec,
    Stage,
    check_uniform_nodes,
    chunk_bounds,
    reduced_to,
    ring_path,
)

NAME = "hierarchical"
ACROSS = "across"


def schedule(spec: Spec) -> Schedule:
    """Ring inside the node, the library across nodes on the owned shard, ring back."""
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    g, m = check_uniform_nodes(spec, NAME)
    if m == 1:
        return reduced_to(ring.schedule(spec), ring.NAME)
    node = spec.rank // g
    local = tuple(range(node * g, (node + 1) * g))
    pos = spec.rank - node * g
    path = ring_path(spec.rank, [local], 0, spec.count)
    b = chunk_bounds(0, spec.count, g)
    owned = (b[(pos + 1) % g], b[(pos + 1) % g + 1])
    across: Stage = (AllReduce(ACROSS, *owned),) if owned[1] > owned[0] else ()
    stages = [*path[: g - 1], across, *path[g - 1 :]]
    partition = tuple(tuple(range(i, spec.p, g)) for i in range(g))
    return Schedule((tuple(stages),), ((ACROSS, partition),), info={"ranks_per_node": g, "nodes": m})
