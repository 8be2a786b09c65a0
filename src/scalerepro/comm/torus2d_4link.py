"""``torus2d-4link``: a 2-D torus all-reduce that keeps all four of a rank's outgoing torus links busy.

Beyond the papers (``torus2d`` keeps 2 of each chip's 4 outgoing links
busy per stage; see that module). The ranks form the same X x Y grid as
``torus2d`` (``comm.grid``; the squarest on one node, ranks per node x
nodes on several). The buffer is cut in halves, each a 2-D reduce-scatter
then all-gather along two rings, every ring run both ways at once
(:func:`~scalerepro.comm.schedule.bidir_phases`: each chunk summed from
both sides, one chunk each way per stage):

    half  first ring     then
    A     Y, both ways   X, both ways
    B     X, both ways   Y, both ways

so in the first phase A leaves each rank on Y+ and Y- and B on X+ and X-,
in the second the other way round: every stage, all four outgoing links
(and all four incoming) carry a chunk. A ring of q ranks run both ways
takes ceil(q/2) stages instead of q - 1 and puts half the bytes on each
link, so about (X + Y) alpha + n(p-1)/(2p) beta on links of bandwidth
1/beta each way: about half ``torus2d``'s latency and bandwidth terms. On
a square grid the halves stay in step; on X != Y their phases differ in
length and the lanes run on independently, as every lane does. Each half
is pipelined in chunks of ``comm.chunk_bytes`` (one lane each). On a grid
with a dimension of 1 it is ``torus2d``'s case too: two directions of one
ring, multicolor-ring with two colors (``as: multicolor-ring``).
"""

from __future__ import annotations

from scalerepro.comm.schedule import Schedule, Spec, bidir_path, pieces
from scalerepro.comm.torus2d import Parts, grid_schedule

NAME = "torus2d-4link"
GRID_DIMS = 2  # lays the ranks on comm.grid, X x Y


def schedule(spec: Spec) -> Schedule:
    """Halves A (Y then X) and B (X then Y), every ring both ways at once, pipelined."""

    def halves(x: tuple[int, ...], y: tuple[int, ...]) -> Parts:
        a, b = pieces(0, spec.count, 2)
        return [(a, [y, x]), (b, [x, y])]

    return grid_schedule(spec, NAME, halves, path=bidir_path)
