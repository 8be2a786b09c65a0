"""Published figures against simulated ones: the claims in config/platforms.yaml, each set against a projection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scalerepro.errors import UserError

METRICS = ("efficiency", "images_per_s", "time_90_epochs_s", "speedup_over")
KEYS = ("paper", "claim", "cite", "platform", "algorithm", "ranks", "dtype", "metric", "published", "if_off")
TOLERANCE = 0.20  # beyond this, the table names the assumption that would have to change


def load_claims(path: Path) -> list[dict[str, Any]]:
    """The ``claims:`` list of ``path``; errors name the claim and the key."""
    doc = yaml.safe_load(path.read_text()) or {}
    claims = doc.get("claims") or []
    for i, c in enumerate(claims):
        missing = [k for k in KEYS if k not in c]
        if missing:
            raise UserError(f"{path}: claims[{i}] lacks key {missing[0]!r}")
        if c["metric"] not in METRICS:
            raise UserError(f"{path}: claims[{i}].metric {c['metric']!r}; choose from {', '.join(METRICS)}")
        if c["metric"] == "speedup_over" and not c.get("over"):
            raise UserError(f"{path}: claims[{i}] (speedup_over) needs 'over': the algorithm to compare against")
    return claims


def compare(claims: list[dict[str, Any]], steps: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per claim: published, simulated (None where not simulated), their ratio, and what to revisit."""
    index = {(s["platform"], s["algorithm"], s["ranks"], s["dtype"]): s for s in steps}
    rows = []
    for c in claims:
        key = (c["platform"], c["algorithm"], c["ranks"], c["dtype"])
        simulated = _value(c, index.get(key), index.get((c["platform"], c.get("over"), c["ranks"], c["dtype"])))
        ratio = simulated / c["published"] if simulated is not None and c["published"] else None
        off = ratio is not None and abs(ratio - 1) > TOLERANCE
        rows.append(
            {
                "paper": c["paper"],
                "claim": c["claim"],
                "platform": c["platform"],
                "algorithm": c["algorithm"] + (f" vs {c['over']}" if c.get("over") else ""),
                "ranks": c["ranks"],
                "dtype": c["dtype"],
                "metric": c["metric"],
                "published": c["published"],
                "simulated": simulated,
                "simulated_over_published": ratio,
                "within_20pct": None if ratio is None else not off,
                "assumption_to_revisit": c["if_off"] if off else "",
                "cite": c["cite"],
            }
        )
    return rows


def _value(claim: dict[str, Any], step: dict[str, Any] | None, other: dict[str, Any] | None) -> float | None:
    """The simulated value of the claim's metric, None if its points were not simulated."""
    if step is None:
        return None
    if claim["metric"] == "speedup_over":
        return other["allreduce_s"] / step["allreduce_s"] if other is not None else None
    return float(step[claim["metric"]])
