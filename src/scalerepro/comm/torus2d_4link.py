"""``torus2d-4link``: a 2-D torus all-reduce that keeps all four of a rank's outgoing torus links busy.

Beyond the papers (``torus2d`` keeps 2 of each chip's 4 outgoing links
busy per stage; see that module). The ranks form the same X x Y grid as
``torus2d`` (``comm.grid``; the squarest on one node, ranks per node x
nodes on several). The buffer is cut in quarters, each a 2-D
reduce-scatter then all-gather along two rings, each starting on a
different direction of a different dimension:

    quarter  first ring  then
    A        Y forward   X forward
    B        X backward  Y backward
    C        X forward   Y forward
    D        Y backward  X backward

so in the first phase A, B, C and D leave each rank on Y+, X-, X+ and
Y-, and in the second on X+, Y-, Y+ and X-: every stage, all four outgoing
links (and all four incoming) carry a quarter. On a square grid the
quarters stay in step; on X != Y the two phases of a quarter differ in
length and the lanes run on independently, as every lane does. About
2(X+Y-2) alpha + n(p-1)/(2p) beta on links of bandwidth 1/beta each way,
half of ``torus2d``'s bandwidth term. Each quarter is pipelined in chunks
of ``comm.chunk_bytes`` (one lane each). On a grid with a dimension of 1
it is ``torus2d``'s case too: two directions of one ring, multicolor with
two colors (``as: multicolor``).
"""

from __future__ import annotations

from scalerepro.comm.schedule import Schedule, Spec, pieces
from scalerepro.comm.torus2d import Parts, on_grid

NAME = "torus2d-4link"


def schedule(spec: Spec) -> Schedule:
    """Quarters A (Y+ then X+), B (X- then Y-), C (X+ then Y+) and D (Y- then X-), pipelined."""

    def quarters(x: tuple[int, ...], y: tuple[int, ...]) -> Parts:
        a, b, c, d = pieces(0, spec.count, 4)
        return [(a, [y, x]), (b, [x[::-1], y[::-1]]), (c, [x, y]), (d, [y[::-1], x[::-1]])]

    return on_grid(spec, NAME, quarters)
