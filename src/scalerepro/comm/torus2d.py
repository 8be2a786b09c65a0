"""``torus2d``: a 2-D torus all-reduce with both dimensions busy in every stage (a reconstruction).

What the held sources establish (config/sources.yaml): Ying et al. 2018
use a 2-D torus all-reduce to speed up the gradient summation on a TPU v3
pod (``ying2018#optimizations``, abstract); its construction is in the
paper's body, which the project does not hold. Google's patent on the
reduction (``us10055692#torus-reduction``, claim 1) sums along every row
first (an "improved rotated pincer" ring, no broadcast), then along every
column with a broadcast, then replicates along the rows: the structure of
``torus2d-3phase``, whose rings this project runs one way (the pincer's
steps are in the patent's description, not held).

This module's version, a reconstruction that keeps both dimensions busy
at once: the ranks
form an X x Y grid (``comm.grid``; default X = ranks per node and Y = nodes
on several nodes, the squarest X x Y on one). The buffer is cut in halves
A and B. Phase 1: A reduce-scatters around its Y ring while B
reduce-scatters around its X ring; phase 2: each half reduce-scatters its
shard around the other dimension; then both all-gather back in reverse.
A runs its rings forward (coordinate order), B backward, so in every
stage both dimensions carry data, each in one direction: X links carry B
one way while Y links carry A the other, then they swap, so each rank
keeps 2 of its 4 outgoing torus links busy per stage. About
2(X+Y-2) alpha + n(p-1)/p beta on links of bandwidth 1/beta each way (each
half moves 2(n/2)(p-1)/p bytes over its own link). Each half is pipelined in chunks of
``comm.chunk_bytes`` (one lane each). On a grid with a dimension of 1 the
two halves go round one ring in opposite directions: that is multicolor-ring
with two colors, and it runs as such (``as: multicolor-ring``, or ``ring``
where that reduces further).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from scalerepro.comm import multicolor_ring
from scalerepro.comm.schedule import (
    EMPTY,
    Schedule,
    Spec,
    Stage,
    check_uniform_nodes,
    pieces,
    pipelined,
    reduced_to,
    ring_path,
)
from scalerepro.comm.shapes import line, resolve_grid, squarest

NAME = "torus2d"
GRID_DIMS = 2  # lays the ranks on comm.grid, X x Y (the 2-D algorithms built on this module say so too)


def default_grid(spec: Spec) -> tuple[int, int]:
    """X = ranks per node, Y = nodes on several nodes; the squarest X x Y on one."""
    if spec.grid or len(spec.node_ranks()) == 1:
        return squarest(spec.p)
    g, m = check_uniform_nodes(spec, NAME)
    return g, m


def grid_of(spec: Spec, name: str) -> tuple[int, ...]:
    """The X x Y grid of a 2-D torus algorithm for ``spec``."""
    return resolve_grid(spec.grid, spec.p, name, GRID_DIMS, default_grid(spec))


Parts = list[tuple[tuple[int, int], list[tuple[int, ...]]]]  # ((lo, hi), the rings it goes round, in order)


def grid_schedule(
    spec: Spec,
    name: str,
    parts: Callable[[tuple[int, ...], tuple[int, ...]], Parts],
    flat: tuple[str, Callable[[Spec], Schedule]] = (multicolor_ring.NAME, multicolor_ring.two_directions),
    path: Callable[[int, Sequence[tuple[int, ...]], int, int], list[Stage]] = ring_path,
) -> Schedule:
    """The frame of the 2-D torus algorithms: ``name``'s X x Y grid, ``parts(x_ring, y_ring)`` pipelined,
    each part along ``path`` (default: each ring one way).

    On a grid with a dimension of 1 the schedule is ``flat`` (the name of
    what it then is, and its schedule; default: two rings, one each way),
    labelled as such (``as``).
    """
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    dims = grid_of(spec, name)
    if min(dims) == 1:
        return reduced_to(flat[1](spec), flat[0])
    found = parts(line(spec.rank, dims, 0), line(spec.rank, dims, 1))
    return Schedule(pipelined(spec.rank, found, spec.itemsize, spec.chunk_bytes, path), info={"grid": list(dims)})


def schedule(spec: Spec) -> Schedule:
    """Halves A (Y then X, forward) and B (X then Y, backward), pipelined."""

    def halves(x: tuple[int, ...], y: tuple[int, ...]) -> Parts:
        a, b = pieces(0, spec.count, 2)
        return [(a, [y, x]), (b, [x[::-1], y[::-1]])]

    return grid_schedule(spec, NAME, halves)
