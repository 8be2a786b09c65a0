"""``multiring``: PowerAI DDL's multi-dimensional ring all-reduce.

After Cho et al. 2017 (arXiv 1708.02188), as implemented here: the ranks
form a d1 x d2 x ... grid mapped to the topology (default: ranks per node x
nodes; or ``comm.grid``). Reduce-scatter around the dimension-1 rings, then
around the dimension-2 rings on the 1/d1 shard, and so on; then all-gather
back in reverse. Steps: 2 sum(d_k - 1); bytes in dimension k:
2n/(d1...d_{k-1}) (d_k - 1)/d_k. Pipelined in chunks of ``comm.chunk_bytes``.
With one dimension longer than 1 it is the ring (``as: ring``).
"""

from __future__ import annotations

from scalerepro.comm import ring
from scalerepro.comm.schedule import EMPTY, Schedule, Spec, check_uniform_nodes, pipelined, reduced_to
from scalerepro.comm.shapes import GRID_DIMS, line, resolve_grid

NAME = "multiring"


def default_grid(spec: Spec) -> tuple[int, ...]:
    """Ranks per node x nodes, without size-1 dimensions."""
    g, m = check_uniform_nodes(spec, NAME) if not spec.grid else (spec.p, 1)
    return tuple(d for d in (g, m) if d > 1) or (1,)


def schedule(spec: Spec) -> Schedule:
    """Reduce-scatter along each dimension in turn, all-gather back; one lane per pipeline chunk."""
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    dims = resolve_grid(spec.grid, spec.p, NAME, GRID_DIMS[NAME], default_grid(spec))
    if sum(d > 1 for d in dims) <= 1:
        return reduced_to(ring.schedule(spec), ring.NAME)
    rings = [line(spec.rank, dims, k) for k in range(len(dims))]
    return Schedule(
        pipelined(spec.rank, [((0, spec.count), rings)], spec.itemsize, spec.chunk_bytes), info={"grid": list(dims)}
    )
