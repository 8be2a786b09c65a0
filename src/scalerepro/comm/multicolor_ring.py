"""``multicolor-ring``: the buffer split into k colors, each all-reduced around its own ring (a reconstruction).

A reconstruction of Kumar et al.'s multi-color all-reduce from its name
alone (``kumar2017#optimizations`` names it and no more), kept beside
``multicolor``, the colored trees that the same company's MPI work
publishes for fat trees (``ibm-fattree2016#multicolor-trees``), so that the
two readings of "multi-color" can be set against each other. Nothing of
its construction comes from a source.

Color c all-reduces its 1/k of the buffer around a ring whose rank order
differs from the other colors', so the colors load different links and
directions. On one node: color 0 runs 0, 1, 2, ..., color 1 the reverse,
further colors stride through the ranks by numbers coprime to p. On
several nodes the rings visit the nodes in turn (odd colors backwards) and
color pair c//2 rotates the order inside each node by c//2, so each color
pair leaves and enters a node through different ranks (on a multi-rail
node, different network adapters) and the colors' inter-node hops are
spread over the nodes' ranks instead of all crossing at the same one.
Each color's part is cut into pipeline chunks of at most
``comm.chunk_bytes``, one lane each; all lanes progress concurrently.

Colors and chunks only pay when there is data to spread: a color gets at
least ``multicolor.MIN_COLOR_BYTES``, as the trees' colors do (so an 8 KiB
all-reduce runs as one ring). On 2
ranks every color's ring is the same exchange with the one peer (forward
and backward coincide, and one ring already uses both directions of the
link), so there the all-reduce is the ring (recorded as ``as: ring``).
"""

from __future__ import annotations

import math
from dataclasses import replace

from scalerepro.comm import multicolor, ring
from scalerepro.comm.schedule import EMPTY, Schedule, Spec, pieces, pipelined, reduced_to

NAME = "multicolor-ring"


def orders(p: int, colors: int, nodes: list[tuple[int, ...]] | None = None) -> list[tuple[int, ...]]:
    """A ring order per color (see the module docstring); ``nodes``: the ranks of each node."""
    if nodes and len(nodes) > 1 and len(nodes[0]) > 1:
        return [_node_order(nodes, c) for c in range(colors)]
    strides = [s for s in range(1, p) if math.gcd(s, p) == 1]
    out = []
    for c in range(colors):
        stride = strides[(c // 2) % len(strides)] if strides else 1
        order = tuple((i * stride) % p for i in range(p))
        out.append(order if c % 2 == 0 else tuple(reversed(order)))
    return out


def _node_order(nodes: list[tuple[int, ...]], c: int) -> tuple[int, ...]:
    """Color c on several nodes: the nodes in turn, each node's ranks rotated by c//2; odd colors reversed."""
    shift = c // 2
    order = tuple(r for members in nodes for r in members[shift % len(members) :] + members[: shift % len(members)])
    return order if c % 2 == 0 else tuple(reversed(order))


def plan(nbytes: int, colors: int, chunk_bytes: int, p: int) -> tuple[int, int]:
    """(colors used, chunks per color) for an all-reduce of ``nbytes`` over p ranks."""
    if p <= 2:  # one peer: every color would be the same exchange
        return 1, 1
    used = multicolor.colors_for(nbytes, colors)
    per_color = math.ceil(nbytes / used)
    return used, max(1, math.ceil(per_color / chunk_bytes))


def schedule(spec: Spec) -> Schedule:
    """One lane per (color, pipeline chunk); the ring where colors cannot pay."""
    if spec.p == 1 or spec.count == 0:
        return EMPTY
    colors, chunks = plan(spec.nbytes, spec.colors, spec.chunk_bytes, spec.p)
    if colors == chunks == 1:  # one color, one chunk: exactly the ring
        return reduced_to(ring.schedule(spec), ring.NAME)
    rings = orders(spec.p, colors, spec.node_ranks())
    parts = [(part, [order]) for part, order in zip(pieces(0, spec.count, colors), rings, strict=True)]
    return Schedule(
        pipelined(spec.rank, parts, spec.itemsize, spec.chunk_bytes),
        info={"colors": colors, "chunks": chunks, "orders": [list(o) for o in rings]},
    )


def two_directions(spec: Spec) -> Schedule:
    """Two colors, one ring each way: what the 2-D tori are on a grid with one dimension."""
    return schedule(replace(spec, colors=2))
