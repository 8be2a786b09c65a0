"""Tree all-reduce, for every algorithm that has one: each tree sums its part of the buffer up to its root and
copies it back down, pipelined in chunks that cross each link in order.

An algorithm lays out its trees (a parent for every rank: ``dbtree`` as
NCCL lays its two, ``multicolor`` as colored trees mapped onto nodes) and
this module does the rest, so there is one tree builder:

* :func:`up_and_down` gives one part's stages on one rank. A tree of
  height H takes 2H stages, the same step on every rank: in stage
  H - d - 1 a rank at depth d receives its children's sums and adds them
  (they are one level deeper, and send in that stage), in stage H - d it
  sends its sum to its parent; in stage H + d - 1 it receives the total
  from its parent, and in stage H + d copies it to its children. A rank
  sits out the other stages. Each part is summed along one fixed tree and
  then copied, so every rank ends with the same bits.
* :func:`schedule` cuts each tree's part into pipeline chunks, one lane
  each, and orders the lanes of one tree (``Schedule.follows``): chunk
  j + 1 enters a stage on a rank only once chunk j has left it. So chunk
  j + 1 crosses a link after chunk j, and while one level of the tree
  works on chunk j the level above works on chunk j - 1: a tree of height
  H moves c chunks in about 2H + c - 1 chunk times instead of c x 2H.

How many chunks (:func:`chunk_count`): each at most ``chunk_bytes``, and
at least ``FILL`` per level of the tree, so that filling and draining the
pipeline (2H chunk times) costs at most about 2/FILL of the whole, but
none under ``MIN_CHUNK_BYTES``, where a message's latency outweighs its
bytes. Where ``chunk_bytes`` is :data:`~scalerepro.comm.schedule.UNCUT`
(the cost model's closed form, the torch executor's default) a part is one
chunk. This rule is the project's: of the held sources, IBM's
multi-color broadcasts widen their pipeline chunks in steps as the bytes
per color grow (``pami-multicolor#pipeline-width``), which says chunks
follow the bytes but not how a tree's height should set their number.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from scalerepro.comm.schedule import UNCUT, Lane, Recv, Schedule, Send, Spec, Stage, pieces

FILL = 4  # pipeline chunks per level of the tree, at least
MIN_CHUNK_BYTES = 64 * 1024  # no pipeline chunk below this: its latency would outweigh its bytes


@dataclass(frozen=True)
class Tree:
    """A spanning tree of ranks 0..p-1: the parent of every rank, -1 for the root."""

    parent: tuple[int, ...]

    @functools.cached_property
    def children(self) -> tuple[tuple[int, ...], ...]:
        """The children of every rank, in rank order."""
        kids: list[list[int]] = [[] for _ in self.parent]
        for rank, up in enumerate(self.parent):
            if up >= 0:
                kids[up].append(rank)
        return tuple(tuple(k) for k in kids)

    @functools.cached_property
    def depth(self) -> tuple[int, ...]:
        """How many edges lie between every rank and the root; a ValueError unless it spans every rank."""
        out = [-1] * len(self.parent)
        reached = [r for r, up in enumerate(self.parent) if up < 0]
        if len(reached) != 1:
            raise ValueError(f"a tree has one root, not {len(reached)}")
        out[reached[0]] = 0
        for rank in reached:
            for child in self.children[rank]:
                out[child] = out[rank] + 1
                reached.append(child)
        if len(reached) != len(self.parent):
            raise ValueError(f"the tree reaches {len(reached)} of {len(self.parent)} ranks")
        return tuple(out)

    @property
    def height(self) -> int:
        """The depth of its deepest rank."""
        return max(self.depth)

    def inner(self) -> frozenset[int]:
        """The ranks with children."""
        return frozenset(r for r, kids in enumerate(self.children) if kids)


def up_and_down(tree: Tree, rank: int, lo: int, hi: int) -> Lane:
    """``[lo, hi)`` summed up ``tree`` and copied down it: this rank's 2H stages (see the module docstring)."""
    top, level = tree.height, tree.depth[rank]
    parent, children = tree.parent[rank], tree.children[rank]
    stages: list[Stage] = [() for _ in range(2 * top)]
    if children:
        stages[top - level - 1] = tuple(Recv(c, lo, hi, True) for c in children)
        stages[top + level] = tuple(Send(c, lo, hi) for c in children)
    if parent >= 0:
        stages[top - level] += (Send(parent, lo, hi, True),)
        stages[top + level - 1] += (Recv(parent, lo, hi),)
    return tuple(stages)


def chunk_count(nbytes: int, chunk_bytes: int, height: int) -> int:
    """Pipeline chunks for a part of ``nbytes`` on a tree of ``height`` (see the module docstring)."""
    if chunk_bytes >= UNCUT or nbytes <= 0:
        return 1
    return max(1, math.ceil(nbytes / chunk_bytes), min(FILL * height, nbytes // MIN_CHUNK_BYTES))


def schedule(forest: Sequence[Tree], spec: Spec, **info: Any) -> Schedule:
    """Rank ``spec.rank``'s all-reduce over the trees of ``forest``: the buffer cut into one part per tree, each
    part cut into pipeline chunks, one lane per chunk, each tree's lanes in order."""
    lanes: list[Lane] = []
    follows: list[int] = []
    height = max(t.height for t in forest)
    chunks = []
    for tree, (lo, hi) in zip(forest, pieces(0, spec.count, len(forest)), strict=True):
        count = chunk_count((hi - lo) * spec.itemsize, spec.chunk_bytes, height)
        chunks.append(count)
        leader = -1
        for clo, chi in pieces(lo, hi, count):
            if chi > clo:
                follows.append(leader)
                leader = len(lanes)
                lanes.append(up_and_down(tree, spec.rank, clo, chi))
    return Schedule(tuple(lanes), info={**info, "height": height, "chunks": chunks}, follows=tuple(follows))
