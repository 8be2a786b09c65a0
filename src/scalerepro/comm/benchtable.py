"""The bench's table for people, in nccl-tests' ``all_reduce_perf`` layout: header, one line per row, footer,
and the ratio tables. Analysis reads the JSON (:mod:`scalerepro.comm.benchfile`), never this text.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from scalerepro.comm.benchfile import Row, averages

_GROUP = 35  # width of one column group: time, algbw, busbw, #wrong
HEADER = "\n".join(
    line.rstrip()
    for line in (
        f"#{'':>13} {'':>11} {'':>12} {'out-of-place':^{_GROUP}} {'in-place':^{_GROUP}}",
        f"#{'algorithm':>13} {'size':>11} {'count':>12}"
        + f" {'time':>10} {'algbw':>8} {'busbw':>8} {'#wrong':>6}" * 2
        + "  schedule",
        f"#{'':>13} {'(B)':>11} {'(elements)':>12}" + f" {'(us)':>10} {'(GB/s)':>8} {'(GB/s)':>8} {'':>6}" * 2,
    )
)  # nccl-tests' all_reduce_perf header, with the harness's columns (algorithm first, the schedule last)


def format_row(row: Mapping[str, Any]) -> str:
    """One table line for people (analysis reads the JSON, never this): out-of-place group, then in-place."""
    groups = "".join(
        f" {row[p + 'time_us']:>10.1f} {row[p + 'algbw_GBps']:>8.3f} {row[p + 'busbw_GBps']:>8.3f} "
        f"{'N/A' if row[p + 'wrong'] is None else row[p + 'wrong']:>6}"
        for p in ("oop_", "")
    )
    return f"{row['algorithm']:>14} {row['bytes']:>11} {row['count']:>12}{groups}  {schedule_text(row)}"


def schedule_text(row: Mapping[str, Any]) -> str:
    """The schedule that ran, briefly: executor, what it ran as, colors, grid."""
    s = row["schedule"]
    parts = [row["executor"] + (" (host-staged)" if s.get("host_staged") else "")]
    if s["algorithm"] != row["algorithm"]:
        parts.append(f"chose {s['algorithm']}")
    parts += [f"as {s['as']}"] if "as" in s else []
    parts += [f"{s['colors']} colors"] if "colors" in s else []
    parts += ["grid " + "x".join(map(str, s["grid"]))] if "grid" in s else []
    return ", ".join(parts)


def format_footer(rows: list[Row]) -> str:
    """nccl-tests' footer: ``# Out of bounds values``, and ``# Avg bus bandwidth`` per algorithm (see
    :func:`averages`: the mean busbw over all sizes, out of place and in place)."""
    s = averages(rows)
    bad = s["out_of_bounds"]
    verdict = "N/A (not checked)" if bad is None else f"{bad} {'FAILED' if bad else 'OK'}"
    lines = [f"# Out of bounds values : {verdict}"]
    lines += [f"# Avg bus bandwidth    : {bw:.6g} GB/s  {a}" for a, bw in s["avg_busbw_GBps"].items()]
    lines.append("#   (per algorithm: mean busbw over all sizes, out-of-place and in-place, as nccl-tests)")
    return "\n".join(lines)


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The ratio table for people: busbw / peer's (higher is better), time / peer's (lower is better)."""
    lines = [f"{'algorithm':>12} {'vs':>8} {'size(B)':>11} {'busbw ratio':>12} {'time ratio':>11}"]
    for r in rows:
        bw = "N/A" if r["busbw_ratio"] is None else f"{r['busbw_ratio']:.2f}x"
        tr = "N/A" if r["time_ratio"] is None else f"{r['time_ratio']:.2f}x"
        lines.append(f"{r['algorithm']:>12} {r['peer']:>8} {r['bytes']:>11} {bw:>12} {tr:>11}")
    return "\n".join(lines)
