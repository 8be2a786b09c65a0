"""The cost model's fits and projections as text tables, for people (the JSON carries the numbers)."""

from __future__ import annotations

from typing import Any

from scalerepro.comm.costfit import Fit
from scalerepro.comm.costprojection import Topology


def format_fits(fits: list[Fit]) -> str:
    """The fits as a table: alpha, beta and gamma as bandwidths, and the relative residuals."""
    lines = [
        (
            f"{'algorithm':>15} {'regime':>14} {'alpha(us)':>10} {'beta(GB/s)':>11} {'gamma(GB/s)':>12} {'points':>7} "
            f"{'median|res|':>11} {'max|res|':>9}"
        )
    ]
    for f in fits:
        bw = 1 / f.beta_s_per_byte / 1e9 if f.beta_s_per_byte else float("inf")
        lines.append(
            f"{f.algorithm:>15} {f.regime:>14} {f.alpha_s * 1e6:>10.2f} {bw:>11.2f} "
            f"{1 / f.gamma_s_per_byte / 1e9:>12.2f} "
            f"{f.points:>7} {f.median_rel_residual:>10.1%} {f.max_rel_residual:>9.1%}"
        )
    return "\n".join(lines)


def format_projection(
    chosen: list[Fit], topos: list[Topology], ranks: list[int], proj: list[dict[str, Any]], nbytes: float
) -> str:
    """The projection as a table: ms per all-reduce of ``nbytes`` per algorithm and topology, one column per rank
    count."""
    lines = [
        (
            f"\n# projected ms per all-reduce of {nbytes / 1e6:.1f} MB (ResNet-50 gradients, float32), "
            "from each algorithm's most cluster-like fit"
        ),
        f"{'algorithm':>15} {'from regime':>14} {'platform':>13} " + " ".join(f"{p:>9}" for p in ranks),
    ]
    for f in chosen:
        for t in topos:
            name = t.name or t.kind
            ms = {r["ranks"]: r["ms"] for r in proj if r["algorithm"] == f.algorithm and r["topology"] == name}
            cells = " ".join(f"{ms[p]:>9.2f}" if p in ms else f"{'-':>9}" for p in ranks)
            lines.append(f"{f.algorithm:>15} {f.regime:>14} {name:>13} " + cells)
    return "\n".join(lines)
