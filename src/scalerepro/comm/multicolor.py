"""``multicolor``: colored k-ary trees, one part of the buffer each, summed up and copied down all at once.

What the held sources establish (config/sources.yaml):

* Kumar et al. 2017 name a "multi-color" MPI Allreduce among three
  optimizations that cut communication overhead
  (``kumar2017#optimizations``; abstract only, nothing of its
  construction).
* IBM Research's MPI work for InfiniBand fat trees, on POWER8 clusters,
  builds its MPI_Allreduce (and Bcast, Reduce) from multi-color k-ary
  trees, with a scheme that maps the colors onto the fat tree's nodes, for
  better use of the links than the usual algorithms
  (``ibm-fattree2016#multicolor-trees``, ``ibm-fattree2016#machines``;
  abstract only: no k, no number of colors, no mapping rule).
* In IBM's own collective library a multi-color operation cuts the buffer
  into one equal part per color and runs one schedule per color, all at
  once (``pami-multicolor#composite``), with fewer colors when the buffer
  is too small to fill them (``pami-multicolor#pipeline-width``).
* Two binary trees whose inner ranks are each other's leaves carry half the
  data each at the full bandwidth of one tree alone (Sanders, Speck and
  Träff: ``sanders2009#two-trees``); NCCL's double binary tree is that
  pair, every rank an inner node of at most one tree
  (``nccl-dbtree-blog#two-trees``), laid over the nodes with a chain of
  ranks inside each node (``nccl-connect#trees-over-nodes``).

What this module reconstructs from them (nothing below is stated by a
held source for Kumar et al.'s runs):

* **Colors.** ``comm.colors`` parts, part c summed up tree c to its root
  and copied back down it; all colors at once. A color gets at least
  ``MIN_COLOR_BYTES``, so small buffers use fewer colors (one below
  128 KiB).
* **Trees.** Each color's tree has arity ``comm.tree_arity`` (default 2:
  the two-tree pair and NCCL's are binary; the IPDPS abstract gives no k).
  The tree is a heap: the units in the color's order, unit i the parent of
  units a*i + 1 to a*i + a. A unit is a node, or a rank when all ranks
  share one node. Color c's order starts c x I units on, where I is the
  number of inner units of one tree (ceil((U - 1) / a) of U), so the colors'
  inner units are disjoint wherever colors x I <= U, always for two
  binary trees: a unit sums for at most one color and is a leaf of the
  others, as in the two-tree algorithm. Where they cannot be disjoint
  (three binary trees, for one) they overlap as little as a rotation
  allows.
* **Mapping onto nodes.** On several nodes a color enters and leaves every
  node through one rank, the node's (c mod g)-th of g: the tree edges
  between nodes are edges between those ranks, so different colors cross
  the network through different ranks' ports and adapters (adapter
  (c mod g) mod rails). Inside a node the color runs down a chain from
  that rank through the node's others in turn (NCCL's intra-node chain).
  The abstract's mapping of colors to fat-tree nodes may be something
  else; this is one reading of it.
* **Pipelining**, as every tree here (:mod:`scalerepro.comm.trees`):
  each color's part in chunks of at most ``comm.chunk_bytes``, at least
  ``trees.FILL`` per level, crossing each link in order.

Cost: a tree of height H takes 2H stages (ring: 2(p-1)); with a = k
colors each rank sends and receives 2n bytes in all, the ring's volume,
and with the colors on different adapters each adapter carries its share.
Unpipelined (the cost model's closed form) a stage moves a whole part, so
the closed form's byte terms are larger than the ring's; pipelined, the
levels overlap, which the executors and the simulator run and the closed
form does not.
"""

from __future__ import annotations

import functools
import itertools

from scalerepro.comm import trees
from scalerepro.comm.schedule import EMPTY, Schedule, Spec

NAME = "multicolor"
MIN_COLOR_BYTES = 64 * 1024  # below this per color, extra colors cost more latency than they win


def colors_for(nbytes: int, colors: int) -> int:
    """Colors used for ``nbytes``: at most ``colors``, each with at least ``MIN_COLOR_BYTES``."""
    return max(1, min(colors, nbytes // MIN_COLOR_BYTES))


def units(spec: Spec) -> tuple[tuple[int, ...], ...]:
    """The units the trees are laid over: the nodes' ranks, or every rank alone when all share one node."""
    nodes = spec.node_ranks()
    return tuple(nodes) if len(nodes) > 1 else tuple((r,) for r in range(spec.p))


@functools.cache
def colored(units: tuple[tuple[int, ...], ...], colors: int, arity: int) -> tuple[trees.Tree, ...]:
    """One tree per color over ``units`` (see the module docstring: a heap of ``arity`` in the color's rotated
    order; inside a unit, a chain from its (c mod size)-th rank)."""
    count = len(units)
    p = sum(len(u) for u in units)
    inner = -(-(count - 1) // arity)
    out = []
    for c in range(colors):
        parent = [-1] * p
        ports: list[int] = []
        for i in range(count):
            members = units[(c * inner + i) % count]
            shift = c % len(members)
            chain = members[shift:] + members[:shift]
            ports.append(chain[0])
            if i:
                parent[chain[0]] = ports[(i - 1) // arity]
            for up, down in itertools.pairwise(chain):
                parent[down] = up
        out.append(trees.Tree(tuple(parent)))
    return tuple(out)


def schedule(spec: Spec) -> Schedule:
    """The colored trees' lanes for ``spec.rank``: part c of the buffer up and down tree c, pipelined."""
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    if spec.tree_arity < 1:
        raise ValueError(f"multicolor: tree arity {spec.tree_arity} (comm.tree_arity must be >= 1)")
    used = colors_for(spec.nbytes, spec.colors)
    forest = colored(units(spec), used, spec.tree_arity)
    return trees.schedule(forest, spec, colors=used, arity=spec.tree_arity, roots=[t.parent.index(-1) for t in forest])
