"""Published figures against simulated ones: the papers' ``at_scale`` claims, each against a simulated band.

A claim's verdict comes from its band over the platform's ranges
(:mod:`scalerepro.sim.scale`), never from one guess, and the platforms'
compute rates are single-node measurements by others, so a published
figure is never an input of the number it is compared with.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from scalerepro import papers
from scalerepro.comm.algorithms import check_named
from scalerepro.errors import UserError
from scalerepro.sim.platforms import NETWORK
from scalerepro.sim.scale import Projection

RATIOS = ("speedup_over", "step_speedup_over")  # another algorithm's all-reduce (or step) time over this one's
METRICS = ("efficiency", "images_per_s", "time_90_epochs_s", *RATIOS)
KEYS = ("simulates", "platform", "algorithm", "ranks", "dtype", "metric", "published", "if_off")
TOLERANCE = 0.20  # a band within this of the published figure (as a ratio, either way) agrees with it
# Efficiency is a share of at most 1, so a ratio lets 79% stand for 95%; it is compared in percentage points.
# Five: the field's two headline efficiencies at 256 GPUs, Goyal et al.'s 90% (goyal2017#efficiency) and
# Cho et al.'s 95% (ibm-ddl-announcement#scaling-95), are five points apart, and a wider tolerance could not tell
# one from the other.
POINTS = 0.05
# How a published figure bounds the simulated one: ``point`` (it is the figure: within the tolerance either way),
# ``floor`` ("over 1.05 M images/s": every setting at or above it agrees) or ``ceiling`` (a whole run's wall
# time, start-up and evaluations included, which the simulated training steps alone must fit under).
BOUNDS = ("point", "floor", "ceiling")
VERDICTS = (
    "consistent: every setting of the band agrees with the published figure within the tolerance",
    "inconsistent: no setting comes within it",
    "undetermined: the assumptions allow a hit as well as a miss",
    "for reference: a simulated figure with no published one to meet",
    (
        "separated / not separated: a ratio of two algorithms with no published figure whose band (an outer bound) "
        "lies on one side of 1, or not"
    ),
)


def load_claims(folder: Path, platforms: Iterable[str]) -> list[dict[str, Any]]:
    """The ``at_scale`` claims of the papers in ``folder`` (:mod:`scalerepro.papers`), one record each with the
    claim's id, paper, cite and what it simulates as ``claim``; errors name the file, the claim and the key, and
    a platform that is not one of ``platforms``."""
    known = set(platforms)
    claims = papers.at_scale(papers.load_papers(folder))
    for c in claims:
        where = f"{c['where']}, at_scale"
        missing = [k for k in KEYS if k not in c]
        if missing:
            raise UserError(f"{where}: lacks key {missing[0]!r}")
        if c["platform"] not in known:
            raise UserError(f"{where}: platform {c['platform']!r} is not one of {', '.join(sorted(known))}")
        check_named(c, f"{where}: ")
        if c["metric"] not in METRICS:
            raise UserError(f"{where}: metric {c['metric']!r}; choose from {', '.join(METRICS)}")
        if c["metric"] in RATIOS and not c.get("over"):
            raise UserError(f"{where}: metric {c['metric']} needs 'over': the algorithm to compare against")
        c.setdefault("bound", "point")
        if c["bound"] not in BOUNDS:
            raise UserError(f"{where}: bound {c['bound']!r}; choose from {', '.join(BOUNDS)}")
        c["claim"] = c.pop("simulates")
    return claims


def check_left_out(claims: list[dict[str, Any]], left_out: Iterable[str]) -> None:
    """The ids of ``simulate.claims_left_out`` name claims; else an error naming the key, the id and the ids."""
    known = sorted(c["id"] for c in claims)
    for cid in left_out:
        if cid not in known:
            raise UserError(f"simulate.claims_left_out: {cid!r} is not the id of a claim at scale; they are: {known}")


def unsimulated(claim: dict[str, Any], max_ranks: int, left_out: Iterable[str], platform_simulated: bool) -> str:
    """Why this run does not simulate ``claim`` (empty: no reason known here)."""
    if claim["id"] in left_out:
        return "left out by simulate.claims_left_out"
    if claim["ranks"] > max_ranks:
        return f"{claim['ranks']} ranks is above simulate.claims_max_ranks"
    if not platform_simulated:
        return f"its platform {claim['platform']} is not one of simulate.platforms"
    return ""


def judged(
    claims: list[dict[str, Any]],
    projections: dict[str, Projection],
    max_ranks: int = 1 << 30,
    left_out: Iterable[str] = (),
    moved: list[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """One row per claim: published, simulated as described and its band over the platform's ranges, a verdict,
    what to revisit when the published figure lies outside the band, what the figure rests on most (from the
    :func:`sensitivity` table ``moved``, made here if not given), and why a claim was not simulated."""
    moved = sensitivity(claims, projections) if moved is None else moved
    rows = []
    left_out = set(left_out)
    for c in claims:
        proj = projections.get(c["platform"])
        nominal, low, high = _band(c, proj) if proj is not None else (None, None, None)
        verdict, off = judge(c["published"], nominal, low, high, c["metric"], c.get("bound", "point"))
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
                "bound": c.get("bound", "point"),
                "published": c["published"],
                "simulated": nominal,
                "simulated_low": low,
                "simulated_high": high,
                "simulated_over_published": nominal / c["published"]
                if nominal is not None and c["published"]
                else None,
                "verdict": verdict,
                "outside_by": off,
                "assumption_to_revisit": c["if_off"] if verdict == "inconsistent" else "",
                "cite": c["cite"],
                **independence(c, proj),
                **rests_on([r for r in moved if r["id"] == c["id"]]),
                "why_not": unsimulated(c, max_ranks, left_out, proj is not None) if nominal is None else "",
            }
        )
    return rows


def verdict_line(row: dict[str, Any]) -> str:
    """One line: published, simulated with its band, and the verdict (with what to revisit when inconsistent)."""
    if row["simulated"] is None:
        return "not simulated"
    pub = "not stated" if row["published"] is None else f"{row['published']:.4g}"
    text = (
        f"published {pub}, simulated {row['simulated']:.4g} "
        f"[{row['simulated_low']:.4g}, {row['simulated_high']:.4g}]: {row['verdict']}"
    )
    if row["outside_by"] is not None:
        text += f" ({beyond_text(row['metric'], row['outside_by'])}; revisit {row['assumption_to_revisit']})"
    return text


def tolerance_text(metric: str) -> str:
    """The tolerance a claim of ``metric`` is judged with, in words."""
    return f"{POINTS * 100:.0f} percentage points" if metric == "efficiency" else f"{TOLERANCE:.0%} either way"


def beyond_text(metric: str, beyond: float) -> str:
    """How far the published figure lies beyond the band's edge (:func:`judge`'s second value), in words."""
    if metric == "efficiency":
        return f"the published figure lies {beyond * 100:+.1f} points beyond the band's edge"
    return f"the published figure lies {beyond:+.0%} beyond the band's edge"


def judge(
    published: float | None,
    nominal: float | None,
    low: float | None,
    high: float | None,
    metric: str,
    bound: str = "point",
) -> tuple[str, float | None]:
    """(verdict, how far the published figure lies beyond the band's edge it should meet: a fraction of that edge,
    or for efficiency the difference in points as a fraction of 1).

    The published figure's window is itself within :data:`TOLERANCE` as a
    ratio, or for efficiency within :data:`POINTS` percentage points. For a
    ``point``: consistent when the whole band lies in the window,
    inconsistent when none of it does, else undetermined. For a ``floor``
    only the window's low edge counts (consistent: the band's low end
    reaches it; inconsistent: its high end does not); for a ``ceiling``
    only its high edge. A ratio between two algorithms with no published
    figure is ``separated`` (its band, an outer bound, is on one side of 1)
    or ``not separated``.
    """
    if nominal is None or low is None or high is None:
        return "not simulated", None
    if published is None:
        if metric not in RATIOS:
            return "for reference", None
        return ("separated" if low > 1 or high < 1 else "not separated"), None
    if metric == "efficiency":
        floor, ceiling = published - POINTS, published + POINTS
    else:
        floor, ceiling = published / (1 + TOLERANCE), published * (1 + TOLERANCE)
    below, above = bound != "ceiling" and high < floor, bound != "floor" and low > ceiling
    if below or above:
        return "inconsistent", _beyond(published, high if below else low, metric)
    if (bound == "ceiling" or low >= floor) and (bound == "floor" or high <= ceiling):
        return "consistent", None
    edge = high if published > high and bound != "ceiling" else low if published < low and bound != "floor" else None
    return "undetermined", None if edge is None else _beyond(published, edge, metric)


def _beyond(published: float, edge: float, metric: str) -> float:
    """How far ``published`` lies beyond the band's ``edge``: in points for efficiency, else as a fraction of it."""
    return published - edge if metric == "efficiency" else published / edge - 1


def _band(claim: dict[str, Any], proj: Projection) -> tuple[float | None, float | None, float | None]:
    """The claim's metric as described, and its lowest and highest over the settings that were simulated.

    A single algorithm's time is bounded by the network's corners (it is no
    faster when a link is slower), but a ratio of two may peak between them:
    a ratio's band is the outer bound, the lowest of the other's times over
    the highest of this one's and the reverse, over every setting.
    """
    nominal = value(claim, proj, "", None, "")
    if nominal is None:
        return None, None, None
    if claim["metric"] not in RATIOS:
        values = [v for s in proj.settings() if (v := value(claim, proj, *s)) is not None]
        return nominal, min(values), max(values)
    field = "allreduce_s" if claim["metric"] == "speedup_over" else "step_s"
    mine, theirs = ([getattr(t, field) for t in _steps(proj, claim, a)] for a in (claim["algorithm"], claim["over"]))
    return nominal, min(theirs) / max(mine), max(theirs) / min(mine)


def _steps(proj: Projection, claim: dict[str, Any], algo: str) -> list[Any]:
    """``algo``'s step at the claim's point over every setting of the band that was simulated."""
    p, dtype = claim["ranks"], claim["dtype"]
    return [proj.step(algo, p, dtype, *s) for s in proj.settings() if proj.simulated(s[0], algo, p, dtype)]


def value(claim: dict[str, Any], proj: Projection, net: str, rate: float | None, overlap: str) -> float | None:
    """The claim's metric with the network ``net`` (a variant), ``rate`` and ``overlap``; None if not simulated."""
    algos = [claim["algorithm"]] + ([claim["over"]] if claim["metric"] in RATIOS else [])
    if not all(proj.simulated(net, a, claim["ranks"], claim["dtype"]) for a in algos):
        return None
    found = [proj.step(a, claim["ranks"], claim["dtype"], net, rate, overlap) for a in algos]
    if claim["metric"] == "speedup_over":
        return found[1].allreduce_s / found[0].allreduce_s
    if claim["metric"] == "step_speedup_over":
        return found[1].step_s / found[0].step_s
    return proj.metrics(found[0], claim["ranks"])[claim["metric"]]


def sensitivity(claims: list[dict[str, Any]], projections: dict[str, Projection]) -> list[dict[str, Any]]:
    """Per claim and ranged number of its platform: the claim's metric with that number alone at its slow and at
    its fast end (every other as described), where those were simulated."""
    rows = []
    for c in claims:
        proj = projections.get(c["platform"])
        described = value(c, proj, "", None, "") if proj is not None else None
        if proj is None or described is None:
            continue
        plat = proj.platform
        for key in plat.ranges:
            slow, fast = _alone(c, proj, key, False), _alone(c, proj, key, True)
            if slow is None or fast is None:
                continue
            rows.append(
                {
                    "id": c["id"],
                    "metric": c["metric"],
                    "assumption": key,
                    "slow_end": plat.end(key, False),
                    "fast_end": plat.end(key, True),
                    "at_slow_end": slow,
                    "at_fast_end": fast,
                    "as_described": described,
                    "swing": abs(fast - slow) / described,
                }
            )
    return rows


def independence(claim: dict[str, Any], proj: Projection | None) -> dict[str, Any]:
    """Whether the claim's simulated figure is independent of it: no number of its platform that sets a time cites
    the claim's own source or a reproduced paper (:meth:`~scalerepro.sim.platforms.Platform.resting_on`); the
    numbers that do, if any."""
    if proj is None:
        return {"independent": None, "depends_on": ""}
    own = [str(claim["source"]).partition("#")[0]] if claim.get("source") else []
    found = proj.platform.resting_on(own)
    return {"independent": not found, "depends_on": ", ".join(found)}


def rests_on(moved: list[dict[str, Any]]) -> dict[str, Any]:
    """What a claim's simulated figure rests on most: of its :func:`sensitivity` rows ``moved``, the ranged number
    that moves it most alone, its two ends and the figure at each (empty where nothing varied moves it: an
    all-reduce ratio moves with the network only, whose numbers alone are simulated with ``simulate.sensitivity``)."""
    rows = [r for r in moved if r["swing"] > 0]
    if not rows:
        return {"rests_on": "", "rests_on_ends": "", "rests_on_low": None, "rests_on_high": None}
    top = max(rows, key=lambda r: r["swing"])
    return {
        "rests_on": top["assumption"],
        "rests_on_ends": f"{top['slow_end']} to {top['fast_end']}",
        "rests_on_low": top["at_slow_end"],
        "rests_on_high": top["at_fast_end"],
    }


def _alone(claim: dict[str, Any], proj: Projection, key: str, fast: bool) -> float | None:
    """The claim's metric with only ``key`` at one end of its range."""
    plat = proj.platform
    if key in NETWORK:
        return value(claim, proj, plat.varied(key, fast).variant, None, "")
    if key == "overlap":
        return value(claim, proj, "", None, plat.end(key, fast))
    return value(claim, proj, "", plat.end(key, fast), "")
