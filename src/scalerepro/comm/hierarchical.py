"""``hierarchical``: intra-node reduce-scatter, inter-node all-reduce on the shard, intra-node all-gather.

Goyal et al. 2017 sum within each server, all-reduce across servers and
broadcast back (``goyal2017#allreduce``, sec. 4.1); this version
reduce-scatters and all-gathers inside the node instead, so each rank
carries 1/g of the buffer across nodes. It is built as multiring's path on
ranks per node x nodes with the library across nodes
(``comm.dim_algorithms: [ring, library]``), in one lane.

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

from scalerepro.comm import multiring, ring
from scalerepro.comm.schedule import EMPTY, Schedule, Spec, check_uniform_nodes, reduced_to

NAME = "hierarchical"
COLLECTIVES = True  # its steps within a node are library all-reduces, not point-to-point messages
LAYOUT = ("ring", "library")  # multiring's per-dimension algorithms on ranks per node x nodes


def schedule(spec: Spec) -> Schedule:
    """Ring inside the node, the library across nodes on the owned shard, ring back: multiring's path on ranks
    per node x nodes with the library across, unpipelined."""
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    g, m = check_uniform_nodes(spec, NAME)
    if m == 1:
        return reduced_to(ring.schedule(spec), ring.NAME)
    lane = tuple(multiring.dims_path(spec.rank, (g, m), LAYOUT, 0, spec.count))
    groups = (("dim1", multiring.lines(spec.p, (g, m), 1)),)
    return Schedule((lane,), groups, info={"ranks_per_node": g, "nodes": m})
