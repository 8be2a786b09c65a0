"""``dbtree``: NCCL's double binary tree all-reduce, over point-to-point messages.

The trees are laid out as NCCL's ``src/graph/trees.cc`` lays them
(``ncclGetBtree``, ``ncclGetDtree``; ``nccl-trees#btree``,
``nccl-trees#dtree``), here over all p ranks (NCCL lays them over the
nodes, ``nccl-connect#trees-over-nodes``; ``multicolor`` does that). The
two-tree idea is Sanders, Speck and Träff's (``sanders2009#two-trees``):
two trees, each carrying half the data, every rank an inner node of at
most one (``nccl-dbtree-blog#two-trees``).

The buffer's two halves go each through its own binary tree of all p
ranks: summed up it to its root, then copied down it, pipelined in chunks
that cross each link in order (:mod:`scalerepro.comm.trees`, the one tree
builder). The second tree is the first mirrored (rank r as p-1-r) when p
is even and shifted by one rank when p is odd, so a rank that is a leaf of
one tree is inside the other (tested from 3 to 69 ranks). The first tree
lays the ranks out in order: a rank r > 0 whose lowest set bit is b has
the parent ``(r - b) | 2b`` (``r - b`` where that is past the last rank)
and the children ``r - b/2`` and ``r + b/2`` (the latter halved back
towards r until it is a rank); rank 0 is the root, and its one child is
the highest power of two below p.

Cost: 2 ceil(lg p) stages against the ring's 2(p-1). Unpipelined (the
cost model's closed form) a stage moves a whole half, so the byte terms
are larger than the ring's (at 8 ranks B = 4n, G = 2.5n against 1.75n and
0.875n: ``scalerepro algorithms``); pipelined, the levels overlap, which
the executors and the simulator run and the closed form does not.
"""

from __future__ import annotations

import functools

from scalerepro.comm import trees
from scalerepro.comm.schedule import EMPTY, Schedule, Spec

NAME = "dbtree"

Links = tuple[int | None, tuple[int, ...]]  # (parent, children) of one rank


def in_order(p: int, rank: int) -> Links:
    """(parent, children) of ``rank`` in the first tree: ranks in order, rank 0 the root."""
    if rank == 0:
        top = 1
        while top * 2 < p:
            top *= 2
        return None, ((top,) if p > 1 else ())
    low = rank & -rank  # the lowest set bit
    parent = (rank - low) | (2 * low)
    if parent >= p:
        parent = rank - low
    children = []
    if low > 1:
        children.append(rank - low // 2)
        step = low // 2
        while step and rank + step >= p:
            step //= 2
        if step:
            children.append(rank + step)
    return parent, tuple(children)


def tree(p: int, rank: int, which: int) -> Links:
    """(parent, children) of ``rank`` in tree ``which`` (0: in order; 1: mirrored for even p, shifted for odd)."""
    if which == 0:
        return in_order(p, rank)

    def back(r: int) -> int:
        """A rank of the first tree's layout as the second tree places it."""
        return p - 1 - r if p % 2 == 0 else (r + 1) % p

    parent, children = in_order(p, back(rank) if p % 2 == 0 else (rank - 1) % p)
    return (None if parent is None else back(parent)), tuple(back(c) for c in children)


@functools.cache
def pair(p: int) -> tuple[trees.Tree, trees.Tree]:
    """The two trees over p ranks, as :class:`~scalerepro.comm.trees.Tree` objects."""
    first, second = (
        trees.Tree(tuple(-1 if (up := tree(p, r, which)[0]) is None else up for r in range(p))) for which in (0, 1)
    )
    return first, second


def schedule(spec: Spec) -> Schedule:
    """The two trees' lanes for ``spec.rank``: the first half of the buffer up and down tree 0, the second tree 1."""
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    return trees.schedule(pair(spec.p), spec, trees=2)
