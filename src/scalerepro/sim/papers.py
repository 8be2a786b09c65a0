"""Published figures against simulated ones: the claims in config/platforms.yaml, each set against a projection."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from scalerepro import sources
from scalerepro.errors import UserError
from scalerepro.sim.platforms import Platform

METRICS = ("efficiency", "images_per_s", "time_90_epochs_s", "speedup_over")
KEYS = ("id", "paper", "claim", "source", "platform", "algorithm", "ranks", "dtype", "metric", "published", "if_off")
TOLERANCE = 0.20  # beyond this, the table names the assumption that would have to change


def load_claims(path: Path) -> list[dict[str, Any]]:
    """The ``claims:`` list of ``path``, each with its source's citation as ``cite``; errors name the claim and
    the key (an unknown source id among them)."""
    doc = yaml.safe_load(path.read_text()) or {}
    claims = doc.get("claims") or []
    registry = sources.load_beside(path, doc)
    ids = [c.get("id") for c in claims]
    for i, c in enumerate(claims):
        missing = [k for k in KEYS if k not in c]
        if missing:
            raise UserError(f"{path}: claims[{i}] lacks key {missing[0]!r}")
        if ids.count(c["id"]) > 1:
            raise UserError(f"{path}: claims[{i}]: id {c['id']!r} is used twice; each claim needs its own")
        c["cite"] = registry.fact(c["source"], f"{path}: claims[{i}] ({c['id']})").cite()
        if c["metric"] not in METRICS:
            raise UserError(f"{path}: claims[{i}].metric {c['metric']!r}; choose from {', '.join(METRICS)}")
        if c["metric"] == "speedup_over" and not c.get("over"):
            raise UserError(f"{path}: claims[{i}] (speedup_over) needs 'over': the algorithm to compare against")
    return claims


def compare(
    claims: list[dict[str, Any]], steps: list[dict[str, Any]], platforms: dict[str, Platform] | None = None
) -> list[dict[str, Any]]:
    """One row per claim: published, simulated (None where not simulated), their ratio, what to revisit, and
    whether the simulated figure is independent of the papers (not where it rests on a compute rate taken
    from a reproduced paper's own results)."""
    index = {(s["platform"], s["algorithm"], s["ranks"], s["dtype"]): s for s in steps}
    rows = []
    for c in claims:
        key = (c["platform"], c["algorithm"], c["ranks"], c["dtype"])
        simulated = _value(c, index.get(key), index.get((c["platform"], c.get("over"), c["ranks"], c["dtype"])))
        ratio = simulated / c["published"] if simulated is not None and c["published"] else None
        off = ratio is not None and abs(ratio - 1) > TOLERANCE
        rows.append(
            {
                "id": c["id"],
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
                "independent": _independent(c, (platforms or {}).get(c["platform"])),
            }
        )
    return rows


def _independent(claim: dict[str, Any], platform: Platform | None) -> bool | None:
    """False where the claim's metric rests on a compute rate taken from a reproduced paper; None if unknown."""
    if platform is None:
        return None
    return claim["metric"] == "speedup_over" or not platform.rate_from_papers()


def _value(claim: dict[str, Any], step: dict[str, Any] | None, other: dict[str, Any] | None) -> float | None:
    """The simulated value of the claim's metric, None if its points were not simulated."""
    if step is None:
        return None
    if claim["metric"] == "speedup_over":
        return other["allreduce_s"] / step["allreduce_s"] if other is not None else None
    return float(step[claim["metric"]])
