"""The simulator against measurements: this machine's bench, and all-reduce times others published at scale.

**This machine.**
``this-machine`` is one node whose ranks each have a port of bandwidth
1/beta and latency alpha, and reduce at gamma s/byte: alpha and beta fitted
once over every algorithm's bench points (:func:`~scalerepro.comm.costfit.fit_machine`,
one pair for the machine, not one per algorithm), gamma as the bench
measured it. Oversubscribed runs (more ranks than cores) are a different
machine, and each executor's transport, and each library's own collective,
a different path: each gets its own fit (see :func:`machines`). Each measured (algorithm, ranks, size) is
then simulated with the schedule it ran (its colors and grid), and the
table sets simulated against measured.

**Others' clusters** (:func:`load_measurements`, the ``measurements:`` of
config/platforms.yaml): all-reduce times published for named clusters,
each cluster a platform of that file described from its own sources, never
from the times it is checked against. Each published point is simulated as
described and at the platform's slow and fast network corners; the bar
(:data:`PUBLISHED_TOLERANCE`) applies at the sizes ResNet-50's gradient
buckets take (:func:`bar_sizes`).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from scalerepro import sources
from scalerepro.comm.algorithms import ALGORITHMS, check_named
from scalerepro.comm.benchfile import ran
from scalerepro.comm.costfit import fit_machine, regime
from scalerepro.errors import UserError
from scalerepro.io import read_yaml
from scalerepro.sim.engine import Point, shape_of
from scalerepro.sim.platforms import Platform, fitted
from scalerepro.sim.scale import ITEMSIZE, bucket_list, variants

MACHINE = "this-machine"
BAR_BYTES = 64 << 10  # the validation bar holds from this size up
PUBLISHED_TOLERANCE = 0.25  # simulated within this of a published time (as |simulated / published - 1|) agrees
MEASUREMENT_KEYS = ("id", "source", "platform", "algorithm", "ranks", "dtype", "time_us")


def machines(rows: Sequence[Mapping[str, Any]], gamma: float) -> dict[tuple[str, str], Platform]:
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


def _kind(row: Mapping[str, Any]) -> tuple[str, str]:
    """(regime, path) of a bench row: a library collective's own name, else the executor that ran the schedule."""
    algo = ran(row)
    entry = ALGORITHMS.get(algo)
    return regime(row), algo if entry is not None and entry.executor else row.get("executor") or "mpi"


def measured(rows: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The bench rows a simulation can stand beside: modelled algorithms (auto's choice), >= 2 ranks, a time."""
    keep = []
    for r in rows:
        algo = ran(r)
        if algo in ALGORITHMS and r["world_size"] > 1 and r["time_us"] > 0 and r["bytes"] >= 4:
            keep.append({**r, "modelled": algo})
    return keep


def validation_points(rows: Sequence[Mapping[str, Any]], platforms: dict[tuple[str, str], Platform]) -> list[Point]:
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
                itemsize=itemsize,
                executor=r.get("executor") or "mpi",
                grid=tuple(comm.get("grid") or ()),
                dim_algorithms=tuple(comm.get("dim_algorithms") or ()),
                **shape_of(comm),
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


def error_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
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


# --- others' clusters ---


def load_measurements(path: Path, platforms: dict[str, Platform]) -> list[dict[str, Any]]:
    """The ``measurements:`` of ``path``, each with its source's citation as ``cite``; errors name the entry
    and the key (an unknown source, platform or algorithm among them)."""
    doc = read_yaml(path, "platforms")
    entries = (doc.get("measurements") if isinstance(doc, dict) else None) or []
    if not entries:
        raise UserError(f"{path} lists no measurements: (published all-reduce times to simulate)")
    registry = sources.load_beside(path, doc)
    seen: set[str] = set()
    for i, m in enumerate(entries):
        where = f"{path}: measurements[{i}]"
        missing = [k for k in MEASUREMENT_KEYS if not isinstance(m, dict) or k not in m]
        if missing:
            raise UserError(f"{where} lacks key {missing[0]!r} (each needs {', '.join(MEASUREMENT_KEYS)})")
        if m["id"] in seen:
            raise UserError(f"{where}: id {m['id']!r} is used twice; each measurement needs its own")
        seen.add(m["id"])
        m["cite"] = registry.fact(m["source"], f"{where} ({m['id']})").cite()
        if m["platform"] not in platforms:
            raise UserError(f"{where}: platform {m['platform']!r} is not in {path}; known: {', '.join(platforms)}")
        check_named(m, f"{where}: ", ("algorithm",))
        if m["dtype"] not in ITEMSIZE:
            raise UserError(f"{where}: dtype {m['dtype']!r}; choose from {', '.join(ITEMSIZE)}")
        times = m["time_us"]
        if not isinstance(times, dict) or not times:
            raise UserError(f"{where}: time_us must map sizes in bytes to microseconds")
        for size, t in times.items():
            if not isinstance(size, int) or size < ITEMSIZE[m["dtype"]] or not isinstance(t, int | float) or t <= 0:
                raise UserError(f"{where}: time_us {size}: {t}: give a size in bytes and a time > 0 in microseconds")
        try:
            platforms[m["platform"]].ranks(int(m["ranks"]))
        except UserError as exc:
            raise UserError(f"{where} ({m['id']}): ranks: {exc}") from None
    return entries


def published_points(measurements: list[dict[str, Any]], platforms: dict[str, Platform]) -> list[Point]:
    """Every published (ranks, size), on its platform as described and at its slow and fast network corners."""
    return [
        Point(m["algorithm"], int(m["ranks"]), int(size), plat, itemsize=ITEMSIZE[m["dtype"]], executor="torch")
        for m in measurements
        for plat in variants(platforms[m["platform"]], corners=True)
        for size in m["time_us"]
    ]


def bar_sizes(dtype: str, bucket_mib: float) -> tuple[int, int]:
    """The sizes the bar holds at: ResNet-50's smallest to largest gradient bucket, widened to powers of two."""
    sizes = [b.nbytes for b in bucket_list(dtype, bucket_mib)]
    return 1 << math.floor(math.log2(min(sizes))), 1 << math.ceil(math.log2(max(sizes)))


def published_table(
    measurements: list[dict[str, Any]], simulated: list[dict[str, Any]], bucket_mib: float
) -> list[dict[str, Any]]:
    """Published beside simulated (as described, and the band over the network corners), one row per point."""
    times = {(r["platform"], r["variant"], r["ranks"], r["bytes"]): r["simulated_s"] for r in simulated}
    rows = []
    for m in measurements:
        lo, hi = bar_sizes(m["dtype"], bucket_mib)
        for size, t in sorted(m["time_us"].items()):
            key = (m["platform"], m["ranks"], size)
            nominal = times[(key[0], "", *key[1:])]
            ends = [times.get((key[0], v, *key[1:]), nominal) for v in ("fast network", "slow network")]
            published = t * 1e-6
            rows.append(
                {
                    "id": m["id"],
                    "platform": m["platform"],
                    "algorithm": m["algorithm"],
                    "ranks": m["ranks"],
                    "bytes": size,
                    "published_s": published,
                    "simulated_s": nominal,
                    "simulated_low_s": min(ends),
                    "simulated_high_s": max(ends),
                    "ratio": nominal / published,
                    "in_band": min(ends) <= published <= max(ends),
                    "bar_size": lo <= size <= hi,
                    "within": abs(nominal / published - 1) <= PUBLISHED_TOLERANCE,
                    "cite": m["cite"],
                }
            )
    return rows


def published_summary(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per measurement: the largest and the median |simulated / published - 1| at the bar's sizes, and whether
    every one of them is within the tolerance."""
    out = []
    for ident in dict.fromkeys(r["id"] for r in rows):
        mine = [r for r in rows if r["id"] == ident]
        errors = [abs(r["ratio"] - 1) for r in mine if r["bar_size"]]
        out.append(
            {
                "id": ident,
                "platform": mine[0]["platform"],
                "ranks": mine[0]["ranks"],
                "bar_points": len(errors),
                "median_abs_error": statistics.median(errors) if errors else None,
                "max_abs_error": max(errors) if errors else None,
                "within": bool(errors) and max(errors) <= PUBLISHED_TOLERANCE,
                "in_band": sum(r["in_band"] for r in mine if r["bar_size"]),
                "cite": mine[0]["cite"],
            }
        )
    return out
