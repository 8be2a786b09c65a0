"""``multiring``: PowerAI DDL's all-reduce over a grid of learners laid on the network hierarchy.

What the held sources establish (config/sources.yaml): Cho et al. 2017
(``cho2017#multiring``, abstract) call DDL's core algorithm a multi-ring
communication pattern that trades latency against bandwidth and adapts to
the system; its construction is in the paper's body, which the project
does not hold. DDL's own documentation (``ddl-readme#learners-grid``,
``#modes``) describes the learners as a grid of up to 3 dimensions, X
within a host, Y between nearby hosts, Z between distant ones (256 GPUs
e.g. as 4x16x4), with an algorithm chosen per dimension (ring only; NCCL
or "enhanced NCCL" where possible, else ring; or the best of them per
dimension); without a grid it runs one ring over all learners
(``#default-ring``). BlueConnect, its successor (``blueconnect2019#decomposition``,
abstract), decomposes the all-reduce into reduce-scatters and all-gathers
per network level.

This module's version (a reconstruction from those descriptions): the
ranks form a grid of at most 3 dimensions (``comm.grid``; default ranks
per node x nodes). Each dimension is a ring or the library
(``comm.dim_algorithms``, default ring everywhere, DDL's ``r`` mode):
along ring dimensions the buffer is reduce-scattered in turn, dimension 1
first, each on the shard the previous one left; a library dimension
all-reduces its current shard with the executor's collective (MPI's,
NCCL's or gloo's) over its line of ranks, and the next dimension works on
that same shard; then all-gathers back in reverse. With ring dimensions
only, steps 2 sum(d_k - 1), bytes in dimension k 2n/(d1...d_{k-1})
(d_k - 1)/d_k, pipelined in chunks of ``comm.chunk_bytes``; a library
dimension makes it one lane (the executors run collectives only in
one-lane schedules). Identities (tested): on a 2-D grid of rings it is
exactly ``torus2d-3phase``; on ranks per node x nodes with the library
across nodes, in one chunk, it is ``hierarchical``; with one dimension
longer than 1 and a ring there, it is the ring (``as: ring``).
"""

from __future__ import annotations

import math
from functools import lru_cache

from scalerepro.comm import ring
from scalerepro.comm.schedule import (
    EMPTY,
    AllReduce,
    Schedule,
    Spec,
    Stage,
    check_uniform_nodes,
    chunks_for,
    pieces,
    reduced_to,
    ring_phases,
)
from scalerepro.comm.shapes import line, resolve_grid
from scalerepro.errors import UserError

NAME = "multiring"
GRID_DIMS = None  # lays the ranks on comm.grid, of any number of dimensions
MAX_DIMS = 3  # DDL's X x Y x Z (ddl-readme#learners-grid)
KINDS = ("ring", "library")


def default_grid(spec: Spec) -> tuple[int, ...]:
    """Ranks per node x nodes (DDL's X within a host, Y between hosts)."""
    g, m = check_uniform_nodes(spec, NAME) if not spec.grid else (spec.p, 1)
    return (g, m)


def kinds_of(spec: Spec, dims: tuple[int, ...]) -> tuple[str, ...]:
    """The algorithm of each dimension: ``spec.dim_algorithms``, ring where it says nothing; errors name the key."""
    given = tuple(spec.dim_algorithms)
    bad = [k for k in given if k not in KINDS]
    if bad:
        raise UserError(f"comm.dim_algorithms: {bad[0]!r} is not one of {', '.join(KINDS)}")
    if len(given) > len(dims):
        raise UserError(
            f"comm.dim_algorithms {list(given)} names {len(given)} dimensions but the grid {list(dims)} has "
            f"{len(dims)}; give one per dimension of comm.grid"
        )
    return given + ("ring",) * (len(dims) - len(given))


def dims_path(rank: int, dims: tuple[int, ...], kinds: tuple[str, ...], lo: int, hi: int) -> list[Stage]:
    """The stages that all-reduce ``[lo, hi)`` over the grid ``dims``, dimension by dimension (see the module)."""
    down: list[Stage] = []
    ups: list[list[Stage]] = []
    for k, (size, kind) in enumerate(zip(dims, kinds, strict=True)):
        if size == 1:
            continue
        if kind == "library":
            down.append((AllReduce(f"dim{k}", lo, hi),) if hi > lo else ())
            continue
        scatter, gather, (lo, hi) = ring_phases(rank, line(rank, dims, k), lo, hi)
        down += scatter
        ups.append(gather)
    return down + [stage for up in reversed(ups) for stage in up]


def schedule(spec: Spec) -> Schedule:
    """The grid's dimensions in turn, one lane per pipeline chunk (one lane if a dimension is the library)."""
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    dims = resolve_grid(spec.grid, spec.p, NAME, GRID_DIMS, default_grid(spec))
    if len(dims) > MAX_DIMS:
        raise UserError(
            f"{NAME}: comm.grid {list(dims)} has {len(dims)} dimensions; DDL's grid has at most 3 (X x Y x Z)"
        )
    kinds = kinds_of(spec, dims)
    used = [kind for d, kind in zip(dims, kinds, strict=True) if d > 1]
    if used == ["ring"]:
        return reduced_to(ring.schedule(spec), ring.NAME)
    library = [k for k, (d, kind) in enumerate(zip(dims, kinds, strict=True)) if d > 1 and kind == "library"]
    chunks = 1 if library else chunks_for(spec.nbytes, spec.chunk_bytes)
    lanes = tuple(tuple(dims_path(spec.rank, dims, kinds, a, b)) for a, b in pieces(0, spec.count, chunks))
    groups = tuple((f"dim{k}", lines(spec.p, dims, k)) for k in library)
    return Schedule(lanes, groups, info={"grid": list(dims), "dim_algorithms": list(kinds)})


@lru_cache(maxsize=8)
def lines(p: int, dims: tuple[int, ...], k: int) -> tuple[tuple[int, ...], ...]:
    """Every line of ranks along dimension k, in order of their first rank: the partition a library dimension's
    collective runs over. One line per rank at coordinate 0 of dimension k, so O(p) (every rank's schedule asks
    for the same partition: cached)."""
    stride = math.prod(dims[:k])
    return tuple(line(r, dims, k) for r in range(p) if (r // stride) % dims[k] == 0)
