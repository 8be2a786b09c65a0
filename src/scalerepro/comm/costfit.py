"""Alpha and beta per algorithm, fitted from a bench sweep's rows, with gamma as the bench measured it.

On the measured machine every message is on one node, so t = A alpha +
B beta + G gamma with A the stages, B the per-stage maximum bytes a rank
sends, G the per-stage maximum it reduces, all from the schedules
(:func:`scalerepro.comm.costterms.terms`). For the ring family B = 2G, so
beta and gamma cannot be told apart from all-reduce timings alone: gamma
is measured directly (the bench times the in-place add,
``reduction_s_per_byte``), and alpha, beta >= 0 are fitted by least
squares on relative error, so small and large messages weigh alike.

Regimes: a node running more ranks than cores is a different machine:
every step waits on the scheduler and the copies share cores, so its
alpha and beta are several times the one-rank-per-core values, and one
fit across both explains neither. Points are fitted per regime
(``dedicated`` / ``oversubscribed``, from the bench JSON's ranks and cores
per node; ``unknown`` where the file does not record them), and
:func:`for_projection` picks the dedicated fit when there is one, as on a
cluster.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from scalerepro.comm.algorithms import ALGORITHMS
from scalerepro.comm.benchfile import ran
from scalerepro.comm.costterms import terms
from scalerepro.comm.schedule import UNCUT, Spec
from scalerepro.errors import UserError

REGIMES = ("dedicated", "unknown", "oversubscribed")  # the projection's order of preference


def regime(row: Mapping[str, Any]) -> str:
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

    def seconds(self, abg: tuple[float, float, float]) -> float:
        """Modelled seconds for (A, B, G) terms."""
        return abg[0] * self.alpha_s + abg[1] * self.beta_s_per_byte + abg[2] * self.gamma_s_per_byte


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


def row_spec(row: Mapping[str, Any]) -> Spec:
    """The schedule spec of a bench row: ranks, elements, item size, and the comm parameters it ran with."""
    itemsize = 8 if row.get("dtype") == "float64" else 4
    comm = row.get("comm") or {}
    return Spec(
        int(row["world_size"]),
        0,
        int(row["bytes"]) // itemsize,
        itemsize,
        int(comm.get("colors", 2)),
        UNCUT,
        tuple(comm.get("grid") or ()),
        tuple(row.get("nodes") or ()),
        tuple(comm.get("dim_algorithms") or ()),
        tree_arity=int(comm.get("tree_arity", 2)),
    )


def row_terms(row: Mapping[str, Any]) -> tuple[float, float, float]:
    """(A, B, G) of the schedule a bench row measured (:func:`scalerepro.comm.benchfile.ran`) at its size and ranks."""
    return terms(ran(row), row_spec(row), row.get("executor") or "mpi")


def fit(algorithm: str, rows: Sequence[Mapping[str, Any]], gamma: float, where: str | None = None) -> Fit:
    """Fit alpha and beta of ``algorithm`` to its rows (world_size, bytes, time_us) in regime ``where`` (None: any)."""
    if algorithm not in ALGORITHMS:
        raise UserError(f"no cost model for {algorithm!r}; modelled: {', '.join(sorted(ALGORITHMS))}")
    return _fit(algorithm, _points(rows, algorithm, where), gamma, where)


def fit_machine(rows: Sequence[Mapping[str, Any]], gamma: float, where: str | None = None) -> Fit:
    """One alpha and beta for the machine: every modelled algorithm's points in regime ``where`` together."""
    pts = [r for algo in sorted({r["algorithm"] for r in rows} & set(ALGORITHMS)) for r in _points(rows, algo, where)]
    return _fit("machine", pts, gamma, where)


def _fit(name: str, pts: Sequence[Mapping[str, Any]], gamma: float, where: str | None) -> Fit:
    """Least squares on relative error for alpha, beta >= 0 over ``pts``, gamma given."""
    if len(pts) < 2:
        raise UserError(f"{name}: need at least 2 benchmark points at >= 2 ranks to fit, got {len(pts)}")
    abg = np.array([row_terms(r) for r in pts])
    t = np.array([r["time_us"] * 1e-6 for r in pts])
    y = (t - abg[:, 2] * gamma) / t  # relative: divide each row by its measured time
    alpha, beta = _nnls2(abg[:, :2] / t[:, None], y)
    model = abg @ np.array([alpha, beta, gamma])
    rel = np.abs(model - t) / t
    return Fit(
        name,
        where or "any",
        float(alpha),
        float(beta),
        gamma,
        len(pts),
        float(np.median(rel)),
        float(np.max(rel)),
        tuple(
            (int(r["world_size"]), int(r["bytes"]), float(ti), float(mi))
            for r, ti, mi in zip(pts, t, model, strict=True)
        ),
    )


def _points(rows: Sequence[Mapping[str, Any]], algorithm: str, where: str | None) -> list[Mapping[str, Any]]:
    """The fittable points of ``algorithm`` (>= 2 ranks, a positive time) in regime ``where`` (None: any)."""
    return [
        r
        for r in rows
        if r["algorithm"] == algorithm and r["world_size"] > 1 and r["time_us"] > 0 and where in (None, regime(r))
    ]


def fit_regimes(algorithms: Iterable[str], rows: Sequence[Mapping[str, Any]], gamma: float) -> list[Fit]:
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
