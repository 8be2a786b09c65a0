"""Alpha-beta-gamma cost model: fit per algorithm from a sweep, project to the papers' scales.

Each algorithm's time for n bytes on p ranks is t = A alpha + B beta + G gamma
with (A, B, G) from the table in ../shared/design/ALGORITHMS.md. For the
ring family B = 2G, so beta and gamma cannot be told apart from all-reduce
timings alone: gamma is measured directly (the bench times the in-place add,
``reduction_s_per_byte``), and alpha, beta >= 0 are fitted by least squares
on relative error, so small and large messages weigh alike. ``native`` and
``gloo`` are "library's choice": they are modelled as Rabenseifner and ring,
the algorithms MPICH and gloo use for large messages.

Projection (as modelled here): the measured node gives the intra-node alpha,
beta and gamma; the topology description gives the links between nodes.
On a fat tree with g ranks per node, a flat ring's slowest step crosses a
node boundary, so its alpha and beta are the inter-node ones; multiring and
hierarchical pay intra-node costs in dimension 1 and inter-node costs on the
1/g shard; multicolor divides the inter-node bytes among min(colors, rails)
network rails. On a 2-D torus every neighbour link has the torus link's
alpha and beta.

Regimes: a node running more ranks than cores (the laptop's 4 ranks on 2
cores) is a different machine: every step waits on the scheduler and the
copies share cores, so its alpha is ~10x and its beta ~2x the one-rank-
per-core values, and one fit across both explains neither. Points are
fitted per regime (``dedicated`` / ``oversubscribed``, from the bench
JSON's ranks and cores per node; ``unknown`` for older files), and the
projection uses the dedicated fit when there is one, as on a cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable

import numpy as np

from scalerepro.comm.shapes import squarest
from scalerepro.errors import UserError

RESNET50_GRADIENT_BYTES = 25_557_032 * 4  # torchvision ResNet-50 parameters, float32


def _ring(n: float, p: int) -> tuple[float, float, float]:
    """(A, B, G) of a ring all-reduce."""
    return 2 * (p - 1), 2 * n * (p - 1) / p, n * (p - 1) / p


def _rabenseifner(n: float, p: int) -> tuple[float, float, float]:
    """(A, B, G) of recursive halving/doubling (+ the fold for non-powers of two)."""
    pof2 = 1 << (p.bit_length() - 1)
    fold = p != pof2
    return 2 * math.log2(pof2) + 2 * fold, 2 * n * (pof2 - 1) / pof2 + 2 * n * fold, n * (pof2 - 1) / pof2 + n * fold


def _grid(n: float, dims: Iterable[int]) -> tuple[float, float, float]:
    """(A, B, G) of a multi-dimensional ring over ``dims`` (DDL's formula)."""
    a = b = g = 0.0
    shard = n
    for d in dims:
        a += 2 * (d - 1)
        b += 2 * shard * (d - 1) / d
        g += shard * (d - 1) / d
        shard /= d
    return a, b, g


TERMS: dict[str, Callable[[float, int], tuple[float, float, float]]] = {
    "native": _rabenseifner,
    "gloo": _ring,
    "ring": _ring,
    "multicolor": _ring,
    "rabenseifner": _rabenseifner,
    "multiring": lambda n, p: _ring(n, p),  # one node measured: one dimension
    "hierarchical": lambda n, p: _ring(n, p),
    "torus2d": lambda n, p: _grid(n, squarest(p)),
    "torus2d-3phase": lambda n, p: _grid(n, squarest(p)),
}


REGIMES = ("dedicated", "unknown", "oversubscribed")  # the projection's order of preference


def regime(row: dict[str, Any]) -> str:
    """``dedicated`` (a core per rank), ``oversubscribed`` or ``unknown`` (no ranks_per_core recorded)."""
    load = row.get("ranks_per_core")
    if load is None:
        return "unknown"
    return "oversubscribed" if load > 1 else "dedicated"


@dataclass(frozen=True)
class Fit:
    """Fitted parameters of one algorithm in one regime and how well they explain the measurements."""

    algorithm: str
    regime: str
    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    points: int
    median_rel_residual: float
    max_rel_residual: float
    residuals: tuple[tuple[int, int, float, float], ...]  # (ranks, bytes, measured s, modelled s)


def _nnls2(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares for two non-negative unknowns (tries every active set)."""
    best, best_err = np.zeros(2), float(np.sum(y**2))
    for cols in ([0, 1], [0], [1]):
        x, *_ = np.linalg.lstsq(m[:, cols], y, rcond=None)
        if np.all(x >= 0):
            full = np.zeros(2)
            full[cols] = x
            err = float(np.sum((m @ full - y) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


def fit(algorithm: str, rows: list[dict[str, Any]], gamma: float, where: str | None = None) -> Fit:
    """Fit alpha and beta of ``algorithm`` to its rows (world_size, bytes, time_us) in regime ``where`` (None: any)."""
    if algorithm not in TERMS:
        raise UserError(f"no cost model for {algorithm!r}; modelled: {', '.join(sorted(TERMS))}")
    pts = _points(rows, algorithm, where)
    if len(pts) < 2:
        raise UserError(f"{algorithm}: need at least 2 benchmark points at >= 2 ranks to fit, got {len(pts)}")
    terms = np.array([TERMS[algorithm](r["bytes"], r["world_size"]) for r in pts])
    t = np.array([r["time_us"] * 1e-6 for r in pts])
    y = (t - terms[:, 2] * gamma) / t  # relative: divide each row by its measured time
    alpha, beta = _nnls2(terms[:, :2] / t[:, None], y)
    model = terms @ np.array([alpha, beta, gamma])
    rel = np.abs(model - t) / t
    return Fit(
        algorithm, where or "any", float(alpha), float(beta), gamma, len(pts), float(np.median(rel)), float(np.max(rel)),
        tuple((int(r["world_size"]), int(r["bytes"]), float(ti), float(mi)) for r, ti, mi in zip(pts, t, model)),
    )


def _points(rows: list[dict[str, Any]], algorithm: str, where: str | None) -> list[dict[str, Any]]:
    """The fittable points of ``algorithm`` (>= 2 ranks, a positive time) in regime ``where`` (None: any)."""
    return [r for r in rows if r["algorithm"] == algorithm and r["world_size"] > 1 and r["time_us"] > 0
            and where in (None, regime(r))]


def fit_regimes(algorithms: Iterable[str], rows: list[dict[str, Any]], gamma: float) -> list[Fit]:
    """One fit per algorithm and regime that has at least 2 points."""
    fits = []
    for algo in algorithms:
        found = [fit(algo, rows, gamma, where) for where in REGIMES if len(_points(rows, algo, where)) >= 2]
        fits += found or [fit(algo, rows, gamma)]  # too few per regime: fit them together (or raise)
    return fits


def for_projection(fits: list[Fit]) -> list[Fit]:
    """Per algorithm, the fit of the most cluster-like regime (dedicated, then unknown, then oversubscribed)."""
    rank = {name: i for i, name in enumerate(REGIMES)}
    best: dict[str, Fit] = {}
    for f in fits:
        if f.algorithm not in best or rank.get(f.regime, len(rank)) < rank.get(best[f.algorithm].regime, len(rank)):
            best[f.algorithm] = f
    return list(best.values())


@dataclass(frozen=True)
class Topology:
    """A described machine to project onto."""

    kind: str  # "fattree" or "torus2d"
    ranks_per_node: int = 8
    link_GBps: float = 12.5  # per direction: 100 Gbit/s InfiniBand EDR
    latency_us: float = 2.0
    rails: int = 1
    intra_GBps: float | None = None  # None: the measured node's fitted beta
    intra_latency_us: float | None = None  # None: the measured node's fitted alpha

    def __post_init__(self) -> None:
        """Check the description; errors name the field."""
        if self.kind not in ("fattree", "torus2d"):
            raise UserError(f"topology kind {self.kind!r}: choose fattree or torus2d")
        if self.ranks_per_node < 1 or self.link_GBps <= 0 or self.latency_us < 0 or self.rails < 1:
            raise UserError("topology: ranks_per_node >= 1, link_GBps > 0, latency_us >= 0 and rails >= 1 are required")

    @property
    def alpha(self) -> float:
        """Inter-node (or torus link) latency in seconds."""
        return self.latency_us * 1e-6

    @property
    def beta(self) -> float:
        """Inter-node (or torus link) seconds per byte."""
        return 1.0 / (self.link_GBps * 1e9)


def project_time(f: Fit, topo: Topology, n: float, p: int, colors: int = 2) -> float:
    """Modelled seconds for one all-reduce of n bytes on p ranks of ``topo``."""
    gamma = f.gamma_s_per_byte
    if topo.kind == "torus2d":  # every step crosses one torus link
        grid_algos = ("torus2d", "torus2d-3phase", "multiring")
        a, b, g = _grid(n, squarest(p)) if f.algorithm in grid_algos else TERMS[f.algorithm](n, p)
        return a * topo.alpha + b * topo.beta + g * gamma
    gpn = min(topo.ranks_per_node, p)
    nodes = max(1, p // gpn)
    intra_alpha = f.alpha_s if topo.intra_latency_us is None else topo.intra_latency_us * 1e-6
    intra_beta = f.beta_s_per_byte if topo.intra_GBps is None else 1.0 / (topo.intra_GBps * 1e9)
    if f.algorithm in ("multiring", "hierarchical"):  # dimension 1 inside the node, then across nodes
        a1, b1, g1 = _ring(n, gpn)
        a2, b2, g2 = (_ring if f.algorithm == "multiring" else _rabenseifner)(n / gpn, nodes)
        return a1 * intra_alpha + b1 * intra_beta + a2 * topo.alpha + b2 * topo.beta + (g1 + g2) * gamma
    a, b, g = TERMS[f.algorithm](n, p)
    alpha, beta = (topo.alpha, topo.beta) if nodes > 1 else (intra_alpha, intra_beta)
    if f.algorithm == "multicolor" and nodes > 1:
        beta /= min(colors, topo.rails)
    return a * alpha + b * beta + g * gamma


def projection(fits: list[Fit], topos: list[Topology], ranks: Iterable[int], n: float, colors: int) -> list[dict[str, Any]]:
    """Rows: algorithm x topology x ranks -> modelled ms per all-reduce of n bytes."""
    return [
        {"algorithm": f.algorithm, "fit_regime": f.regime, "topology": t.kind, "ranks": p, "bytes": n,
         "ms": project_time(f, t, n, p, colors) * 1e3, "source": "projected"}
        for f in fits for t in topos for p in ranks
    ]
