"""Where the cost model's ranks sit, and which links a message between two of them loads.

A :class:`Placement` puts ranks on nodes (consecutive ranks per node, each
node with one or more network adapters, "rails") or one per chip of a 2-D
torus. A message on a node loads its sender's own port (shared memory or
NVLink); between nodes it loads the sending and receiving nodes' adapters
(rank i of a node on rail i mod rails); on a torus it loads every link of
its dimension-order route. The functions here take the messages of a
schedule as columns (stage, source, destination, bytes) and give the links
they load, for :func:`scalerepro.comm.costterms.profile` to find each
stage's busiest one.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

Routes = tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]  # (stage, link, bytes) per link loaded; hops per message


@dataclass(frozen=True)
class Placement:
    """Where the ranks sit: ``ranks_per_node`` consecutive ranks per node (0: all on one), network rails per
    node, or a 2-D ``torus`` (X, Y) with one rank per chip at (r mod X, r div X)."""

    ranks_per_node: int = 0
    rails: int = 1
    torus: tuple[int, int] | None = None


ONE_NODE = Placement()


def on_node(src: np.ndarray, dst: np.ndarray, p: int, placement: Placement) -> np.ndarray:
    """Which messages stay on their node (none on a torus, where every hop is a network link)."""
    if placement.torus is not None:
        return np.zeros(src.size, dtype=bool)
    g = placement.ranks_per_node or p
    return np.asarray(src // g == dst // g)


def rail_routes(
    k: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, p: int, placement: Placement
) -> Routes:
    """Inter-node messages on the sender's outgoing and the receiver's incoming rail (local rank mod rails)."""
    g, rails = placement.ranks_per_node or p, placement.rails
    nodes = -(-p // g)
    out_rail = (src // g) * rails + (src % g) % rails
    in_rail = (nodes + dst // g) * rails + (dst % g) % rails
    return (
        np.concatenate([k, k]),
        np.concatenate([out_rail, in_rail]),
        np.concatenate([nbytes, nbytes]),
        np.ones(k.size),
    )


def torus_routes(k: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, dims: tuple[int, int]) -> Routes:
    """Dimension-order routes (X first, the shorter way round): every hop's directed link, and each message's hops."""
    at = [src % dims[0], src // dims[0]]
    to = [dst % dims[0], dst // dims[0]]
    hops = np.zeros(k.size)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for d in (0, 1):
        n = dims[d]
        ahead = (to[d] - at[d]) % n
        step = np.where(ahead <= n // 2, 1, -1)
        left = np.where(step > 0, ahead, n - ahead)
        hops += left
        for h in range(int(left.max(initial=0))):
            moving = left > h
            here = at[0][moving] + dims[0] * at[1][moving]
            parts.append((k[moving], 4 * here + 2 * d + (step[moving] < 0), nbytes[moving]))
            at[d] = np.where(moving, (at[d] + step) % n, at[d])
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, hops
    return (
        np.concatenate([x[0] for x in parts]),
        np.concatenate([x[1] for x in parts]),
        np.concatenate([x[2] for x in parts]),
        hops,
    )
