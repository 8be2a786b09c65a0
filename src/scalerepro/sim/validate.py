"""The simulator against this machine: its bench fitted as a platform, every measured point simulated beside it.

``this-machine`` is one node whose ranks each have a port of bandwidth
1/beta and latency alpha, and reduce at gamma s/byte: alpha and beta fitted
once over every algorithm's bench points (:func:`costmodel.fit_machine`,
one pair for the machine, not one per algorithm), gamma as the bench
measured it. Oversubscribed runs (more ranks than cores) are a different
machine, and each executor's transport, and each library's own collective,
a different path: each gets its own fit (see :func:`machines`). Each measured (algorithm, ranks, size) is
then simulated with the schedule it ran (its colors and grid), and the
table sets simulated against measured.
"""

from __future__ import annotations

import statistics
from typing import Any

from scalerepro.comm.algorithms import ALGORITHMS
from scalerepro.comm.costmodel import fit_machine, regime, row_algorithm
from scalerepro.errors import UserError
from scalerepro.sim.engine import Point
from scalerepro.sim.platforms import Platform, fitted

MACHINE = "this-machine"
BAR_BYTES = 64 << 10  # the validation bar holds from this size up


def machines(rows: list[dict[str, Any]], gamma: float) -> dict[tuple[str, str], Platform]:
    """(regime, path) -> this machine as a platform, fitted from the bench rows that took that path.

    The executors reach the other ranks differently (MPI: shared memory;
    torch's gloo: TCP through the loopback), and a library's collective
    (``native``: MPI_Allreduce, ``gloo``, ``nccl``) is a black box the
    simulation can only stand in for by the schedule its library is known
    to use, so its copies and waits are its own: each path is its own
    network, fitted on its own points.
    """
    out = {}
    for where, path in sorted({_kind(r) for r in rows if r["world_size"] > 1}):
        mine = [r for r in rows if _kind(r) == (where, path)]
        f = fit_machine(mine, gamma, where)
        name = (
            MACHINE + ("-oversubscribed" if where == "oversubscribed" else "") + (f"-{path}" if path != "mpi" else "")
        )
        source = (
            f"fitted: bench, {f.points} points on the {path} path in the {where} regime, median |residual| "
            f"{f.median_rel_residual:.1%}"
        )
        out[where, path] = fitted(name, f.alpha_s, f.beta_s_per_byte, gamma, max(r["world_size"] for r in mine), source)
    if not out:
        raise UserError("the bench JSONs hold no run at 2 or more ranks to fit this machine from")
    return out


def _kind(row: dict[str, Any]) -> tuple[str, str]:
    """(regime, path) of a bench row: a library collective's own name, else the executor that ran the schedule."""
    algo = row_algorithm(row)
    entry = ALGORITHMS.get(algo)
    return regime(row), algo if entry is not None and entry.executor else row.get("executor") or "mpi"


def measured(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The bench rows a simulation can stand beside: modelled algorithms (auto's choice), >= 2 ranks, a time."""
    keep = []
    for r in rows:
        algo = row_algorithm(r)
        if algo in ALGORITHMS and r["world_size"] > 1 and r["time_us"] > 0 and r["bytes"] >= 4:
            keep.append(r | {"modelled": algo})
    return keep


def points(rows: list[dict[str, Any]], platforms: dict[tuple[str, str], Platform]) -> list[Point]:
    """One simulation per measured row, on the platform of its regime, with the schedule it ran."""
    out = []
    for r in rows:
        comm = r.get("comm") or {}
        itemsize = 8 if r.get("dtype") == "float64" else 4
        out.append(
            Point(
                r["modelled"],
                int(r["world_size"]),
                int(r["bytes"]),
                platforms[_kind(r)],
                int(comm.get("colors", 2)),
                itemsize,
                r.get("executor") or "mpi",
                tuple(comm.get("grid") or ()),
                tuple(comm.get("dim_algorithms") or ()),
            )
        )
    return out


def table(rows: list[dict[str, Any]], simulated: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Measured beside simulated, one row per bench point."""
    return [
        {
            "algorithm": r["algorithm"],
            "modelled_as": r["modelled"],
            "ranks": r["world_size"],
            "bytes": r["bytes"],
            "regime": regime(r),
            "platform": s["platform"],
            "measured_s": r["time_us"] * 1e-6,
            "simulated_s": s["simulated_s"],
            "ratio": s["simulated_s"] / (r["time_us"] * 1e-6),
        }
        for r, s in zip(rows, simulated, strict=True)
    ]


def summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per rank count and regime: median |simulated / measured - 1| over sizes >= 64 KiB, and over all."""
    out = []
    for ranks, where in sorted({(r["ranks"], r["regime"]) for r in rows}):
        mine = [r for r in rows if (r["ranks"], r["regime"]) == (ranks, where)]
        big = [abs(r["ratio"] - 1) for r in mine if r["bytes"] >= BAR_BYTES]
        out.append(
            {
                "ranks": ranks,
                "regime": where,
                "points": len(mine),
                "points_64KiB_up": len(big),
                "median_abs_error_64KiB_up": statistics.median(big) if big else None,
                "median_abs_error_all": statistics.median(abs(r["ratio"] - 1) for r in mine),
            }
        )
    return out
