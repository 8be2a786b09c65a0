"""``dbtree``: NCCL's double binary tree all-reduce, over point-to-point messages.

The trees are laid out as NCCL's ``src/graph/trees.cc`` lays them
(``ncclGetBtree``, ``ncclGetDtree``). Two-tree all-reduce goes back to
Sanders, Speck and Träff 2009; the project holds no copy of that paper,
and nothing here rests on it.

The buffer's two halves go each through its own binary tree of all p
ranks: summed up it to its root, then copied down it. The second tree is
the first mirrored (rank r as p-1-r) when p is even and shifted by one
rank when p is odd, so a rank that is a leaf of one tree is inside the
other (tested from 3 to 69 ranks). The first tree lays the ranks out in
order: a rank r > 0 whose lowest set bit is b has the parent
``(r - b) | 2b`` (``r - b`` where that is past the last rank) and the
children ``r - b/2`` and ``r + b/2`` (the latter halved back towards r
until it is a rank); rank 0 is the root, and its one child is the highest
power of two below p. A tree of depth D
takes D stages up and D down, each a stage of every rank (a rank sits out
the stages that are not its level's), and each half is cut into pipeline
chunks of at most ``chunk_bytes``, one lane each.

Cost: 2 ceil(lg p) stages against the ring's 2(p-1). Unpipelined, a
stage moves a whole half, so the cost model's byte terms are larger than
the ring's (at 8 ranks B = 4n, G = 2.5n against 1.75n and 0.875n:
``scalerepro algorithms``); pipeline chunks let the levels overlap, which
the executors and the simulator see and the closed form does not. Each
chunk is summed along one fixed path and then copied, so every rank ends
with the same bits.
"""

from __future__ import annotations

import functools

from scalerepro.comm.schedule import EMPTY, Lane, Recv, Schedule, Send, Spec, Stage, chunks_for, pieces

NAME = "dbtree"

Tree = tuple[int | None, tuple[int, ...]]  # (parent, children) of one rank


def in_order(p: int, rank: int) -> Tree:
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


def tree(p: int, rank: int, which: int) -> Tree:
    """(parent, children) of ``rank`` in tree ``which`` (0: in order; 1: mirrored for even p, shifted for odd)."""
    if which == 0:
        return in_order(p, rank)

    def back(r: int) -> int:
        """A rank of the first tree's layout as the second tree places it."""
        return p - 1 - r if p % 2 == 0 else (r + 1) % p

    parent, children = in_order(p, back(rank) if p % 2 == 0 else (rank - 1) % p)
    return (None if parent is None else back(parent)), tuple(back(c) for c in children)


def depth(p: int, rank: int, which: int) -> int:
    """How many edges lie between ``rank`` and the root of tree ``which``."""
    d, parent = 0, tree(p, rank, which)[0]
    while parent is not None:
        d, parent = d + 1, tree(p, parent, which)[0]
    return d


@functools.cache
def height(p: int, which: int) -> int:
    """The depth of tree ``which`` over p ranks: its deepest rank's."""
    return max(depth(p, r, which) for r in range(p))


def up_and_down(p: int, rank: int, which: int, lo: int, hi: int) -> Lane:
    """``[lo, hi)`` summed up tree ``which`` and copied down it: stage k of the 2D the same step on every rank."""
    top = height(p, which)
    parent, children = tree(p, rank, which)
    level = depth(p, rank, which)
    stages: list[Stage] = [() for _ in range(2 * top)]
    if children:  # the children, one level deeper, send up at stage top - level - 1
        stages[top - level - 1] = tuple(Recv(c, lo, hi, True) for c in children)
        stages[top + level] = tuple(Send(c, lo, hi) for c in children)
    if parent is not None:
        stages[top - level] += (Send(parent, lo, hi, True),)
        stages[top + level - 1] += (Recv(parent, lo, hi),)
    return tuple(stages)


def schedule(spec: Spec) -> Schedule:
    """The two trees' lanes for ``spec.rank``: the first half of the buffer up and down tree 0, the second tree 1."""
    p, n = spec.p, spec.count
    if p == 1 or n == 0:
        return EMPTY
    lanes = []
    for which, (lo, hi) in enumerate(((0, n // 2), (n // 2, n))):
        if hi > lo:
            for clo, chi in pieces(lo, hi, chunks_for((hi - lo) * spec.itemsize, spec.chunk_bytes)):
                lanes.append(up_and_down(p, spec.rank, which, clo, chi))
    return Schedule(tuple(lanes), info={"trees": 2})
