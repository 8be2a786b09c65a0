"""``torus2d-3phase``: reduce-scatter along rows, all-reduce along columns, all-gather along rows.

What the held sources establish (config/sources.yaml): Mikami et al. 2018
train on ABCI with a 2-D torus all-reduce (``mikami2018#resnet50``,
abstract); the three phases are how secondary accounts of the paper's
body describe it (not held). Google's patent claim 1
(``us10055692#torus-reduction``) has the same structure on a TPU torus:
rows without broadcast, columns with broadcast, then rows. It is also
DDL's multi-ring on a 2-D grid of rings (``multiring``: the same schedule,
tested).

As implemented here, on an
X x Y grid (as ``torus2d`` chooses it): the column all-reduce runs on the
1/X shard as a ring (reduce-scatter then all-gather), so the whole is
2(X+Y-2) alpha + 2n(p-1)/p beta, one dimension busy at a time. Pipelined in
chunks of ``comm.chunk_bytes``. On a grid with a dimension of 1 it is the
ring (``as: ring``).
"""

from __future__ import annotations

from scalerepro.comm import ring
from scalerepro.comm.schedule import Schedule, Spec
from scalerepro.comm.torus2d import Parts, grid_schedule

NAME = "torus2d-3phase"
GRID_DIMS = 2  # lays the ranks on comm.grid, X x Y


def schedule(spec: Spec) -> Schedule:
    """Rows, then columns on the row shard, then rows back; one lane per pipeline chunk."""

    def rows_then_columns(x: tuple[int, ...], y: tuple[int, ...]) -> Parts:
        return [((0, spec.count), [x, y])]

    return grid_schedule(spec, NAME, rows_then_columns, (ring.NAME, ring.schedule))
