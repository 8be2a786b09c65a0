"""The bench file: the JSON ``scalerepro bench`` writes, and the one reader of it.

A record holds provenance, placement (``world_size``, ``hosts``,
``nodes``, ``ranks_per_node``, ``cores_per_node``), the comm parameters
it ran with (``params``), the measured reduction cost
(``reduction_s_per_byte``, gamma), the footer's numbers (:func:`averages`),
the ratio tables (``comparisons``) and ``rows``: one :class:`Row` per
algorithm and message size. ``format`` says which layout it is
(:data:`FORMAT`); a file without it is format 1, from before out-of-place
was measured, and :func:`read` gives its rows the ``oop_*`` fields as
None, so no reader downstream tells the formats apart.

Everything that reads benches (the cost model, ``auto``'s tuner,
validation, collect and analysis) reads them through :func:`read`,
:func:`flatten` and :func:`ran`. This module imports neither MPI nor the
algorithm registry: reading a bench starts nothing.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, TypedDict

from scalerepro.errors import UserError

FORMAT = 2  # 2: out-of-place results beside in-place ones (oop_*), and this field
RESULTS = ("time_us", "min_us", "median_us", "round_us", "algbw_GBps", "busbw_GBps", "wrong")
REQUIRED = ("world_size", "rows")


class Row(TypedDict):
    """One algorithm at one size. In-place results under plain names, out-of-place ones prefixed ``oop_``;
    times in microseconds (t: the maximum over ranks of a rank's mean), bandwidths in GB/s, ``wrong`` the
    elements off the exact sum (None: not checked), ``round_us`` each round's time."""

    algorithm: str  # what was asked for (``auto`` included)
    bytes: int
    count: int
    dtype: str
    iters: int
    rounds: int
    time_us: float
    min_us: float
    median_us: float
    round_us: list[float]
    algbw_GBps: float
    busbw_GBps: float
    wrong: int | None
    oop_time_us: float | None
    oop_min_us: float | None
    oop_median_us: float | None
    oop_round_us: list[float] | None
    oop_algbw_GBps: float | None
    oop_busbw_GBps: float | None
    oop_wrong: int | None
    oop_via: str | None  # how out-of-place ran: the library's own, or a copy then in place
    executor: str
    schedule: dict[str, Any]  # what ran: ``algorithm`` (auto's choice), ``as`` (what it reduced to), grid...


class FlatRow(Row):
    """A row with its record's placement and parameters, so it stands alone (the cost model rebuilds the
    schedule it measured from it)."""

    world_size: int
    hosts: int
    ranks_per_core: float | None  # None where the record does not say
    comm: dict[str, Any]
    nodes: list[str]


def read(path: Path | str) -> dict[str, Any]:
    """The bench record at ``path``, its rows in the current format; a UserError naming the file and the fix
    where it is not a bench file this version reads."""
    try:
        record = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise UserError(
            f"{path}: not a readable `scalerepro bench` JSON ({exc}); run `scalerepro bench --out FILE`"
        ) from None
    missing = [k for k in REQUIRED if k not in record] if isinstance(record, dict) else list(REQUIRED)
    if missing:
        raise UserError(f"{path}: not a `scalerepro bench` JSON (missing {', '.join(missing)})")
    version = record.get("format", 1)
    if not isinstance(version, int):
        raise UserError(f"{path}: format {version!r} is no bench format number (this scalerepro writes {FORMAT})")
    if version > FORMAT:
        raise UserError(f"{path}: bench format {version}, newer than this scalerepro reads ({FORMAT}); upgrade it")
    if version == 1:
        record["rows"] = [_upgraded(row) for row in record["rows"]]
    return dict(record)


def _upgraded(row: dict[str, Any]) -> dict[str, Any]:
    """A format-1 row with the fields format 2 added: nothing measured out of place."""
    return {f"oop_{k}": None for k in RESULTS} | {"oop_via": None, "schedule": {}} | row


def flatten(record: Mapping[str, Any]) -> list[FlatRow]:
    """One stand-alone row per benchmark point of a record (see :class:`FlatRow`)."""
    ranks, cores = record.get("ranks_per_node"), record.get("cores_per_node")
    extra = {
        "world_size": record["world_size"],
        "hosts": len(set(record.get("hosts") or record.get("nodes") or [""])),  # the nodes ranks ran on
        "ranks_per_core": ranks / cores if ranks and cores else None,
        "comm": record.get("params") or {},
        "nodes": record.get("nodes") or [],
    }
    return [FlatRow(**(row | extra)) for row in record["rows"]]  # type: ignore[typeddict-item]


def read_rows(paths: Iterable[Path]) -> tuple[list[FlatRow], float]:
    """Every row of the bench files at ``paths`` and their median measured reduction cost gamma (s/byte)."""
    paths = list(paths)
    if not paths:
        raise UserError("no bench JSON given; run `scalerepro bench` first")
    records = [read(p) for p in paths]
    gammas = [rec["reduction_s_per_byte"] for rec in records if rec.get("reduction_s_per_byte")]
    if not gammas:
        raise UserError("the bench JSONs carry no reduction_s_per_byte (gamma); re-run `scalerepro bench`")
    return [row for rec in records for row in flatten(rec)], statistics.median(gammas)


def ran(row: Mapping[str, Any]) -> str:
    """The algorithm whose schedule a row measured: what it reduced to (``as``: multicolor on 2 ranks is the
    ring), else the one ``auto`` chose, else the one asked for. ``schedule`` may be the JSON text a CSV holds."""
    schedule = row.get("schedule")
    if isinstance(schedule, str):
        schedule = json.loads(schedule) if schedule.startswith("{") else None
    schedule = schedule if isinstance(schedule, dict) else {}
    return str(schedule.get("as") or schedule.get("algorithm") or row["algorithm"])


def total_wrong(rows: Iterable[Mapping[str, Any]]) -> int:
    """Wrong elements over rows, out of place and in place (unchecked rows count 0)."""
    return sum((r["wrong"] or 0) + (r["oop_wrong"] or 0) for r in rows)


def averages(rows: list[Row]) -> dict[str, Any]:
    """The footer's numbers, for the record: per algorithm the average busbw, and the out-of-bounds count.

    ``avg_busbw_GBps`` (GB/s, per algorithm): as nccl-tests' "Avg bus
    bandwidth", the mean over every size *and both placements*: the sum of
    out-of-place and in-place busbw over the sizes, divided by 2 x the
    number of sizes. ``out_of_bounds``: the wrong elements over every row and
    both placements (nccl-tests' "Out of bounds values"), None when checking
    was off.
    """
    by_algo: dict[str, list[float]] = {}
    for r in rows:
        oop = r["oop_busbw_GBps"]
        by_algo.setdefault(r["algorithm"], []).extend([r["busbw_GBps"]] if oop is None else [oop, r["busbw_GBps"]])
    checked = any(r["wrong"] is not None for r in rows)
    return {
        "avg_busbw_GBps": {a: statistics.fmean(v) for a, v in by_algo.items()},
        "out_of_bounds": total_wrong(rows) if checked else None,
    }


def compare(rows: list[Row], peer: str) -> list[dict[str, Any]]:
    """Per algorithm and size: in-place busbw and time as ratios to ``peer``'s measured in the same sweep."""
    ref = {r["bytes"]: r for r in rows if r["algorithm"] == peer}
    out = []
    for r in rows:
        base = ref.get(r["bytes"])
        if r["algorithm"] == peer or base is None:
            continue
        out.append(
            {
                "algorithm": r["algorithm"],
                "peer": peer,
                "bytes": r["bytes"],
                "busbw_ratio": r["busbw_GBps"] / base["busbw_GBps"] if base["busbw_GBps"] else None,
                "time_ratio": r["time_us"] / base["time_us"] if base["time_us"] else None,
            }
        )
    return out
