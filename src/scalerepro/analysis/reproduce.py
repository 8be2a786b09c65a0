"""Reproduction cards: per paper, each claim with its source, what this run measured and on what, what the
simulation says at the paper's scale, and a verdict no stronger than the measurement.

The claims are the papers' (config/papers/, :mod:`scalerepro.papers`); each states its source fact or
is ``unverified``. A claim's ``scope`` (:data:`SCOPES`) says what a measurement must have been made on to
judge it: a measurement outside the scope is reported as indicative only. Verdicts
(:data:`VERDICTS`) are fixed phrases, so two runs of one commit that measure alike give the same
verdict; the numbers (value, interval, resolution) sit in their own columns.
"""

from __future__ import annotations

import inspect
import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from html import escape
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from scalerepro.analysis.collect import read_csv
from scalerepro.comm import benchfile
from scalerepro.comm.algorithms import check_named
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic, write_text_atomic
from scalerepro.papers import Paper, load_papers
from scalerepro.sim.claims import VERDICTS as SIMULATED_VERDICTS
from scalerepro.sim.claims import beyond_text, tolerance_text

# what adds the simulated rows where SimGrid is missing (or the simulation was turned off)
ADD_SIMULATION = "`sudo make system-deps && make run` adds it (SimGrid's Python module; or simulate.enabled was false)"
# the analysis tables the measures read, each with the columns they read from every row (`scalerepro analyze`
# writes them; a table with no rows may have no columns at all)
TABLES = {
    "busbw": ("algorithm", "world_size", "bytes", "time_us"),
    "accuracy": ("algorithm", "world_size", "final_top1", "ring_top1", "diff", "noise"),
    "recipes": ("variant", "world_size", "bn_group", "optimizer", "global_batch", "seed", "final_top1"),
    "scaling": ("setting", "algorithm", "world_size", "efficiency"),
    "papers": ("id", "simulated"),
    "runs": (),
}
CARD_COLUMNS = [
    "paper",
    "id",
    "claim",
    "published",
    "source",
    "scope",
    "measured",
    "regime",
    "simulated",
    "verdict",
    "value",
    "low",
    "high",
    "resolution",
    "reproduced",
]

# What a measurement must have been made on to judge a claim of each scope.
SCOPES = {
    "paper-scale": "the paper's accelerators and dataset at its scale",
    "network": "an interconnect: ranks on two or more hosts, at most one rank per core",
    "numerics": "the sums' rounding only: any run that trains the algorithms side by side at one seed",
    "recipe": "the recipe on a real dataset (the synthetic laptop data only indicates)",
}
NUMERICS_ONLY = " (numerics only: the all-reduce's share, the same top-1 as the ring at one seed)"
UNVERIFIED = "unverified claim"
# The verdicts' first words (a numerics verdict ends in NUMERICS_ONLY; an unverified claim's adds what was measured)
VERDICTS = (
    "reproduced",
    "not reproduced",
    "undetermined",
    "indicative only",
    "not measurable here",
    "not in this run",
    UNVERIFIED,
)
RATIO_BYTES = 1 << 20  # a speed claim is about large messages (ResNet-50's gradient buckets): sizes from here up
PERCENTILES = (10, 90)  # the interval of a measured ratio over the bench's rounds and sizes


@dataclass(frozen=True)
class Measured:
    """One claim's measurement here: a number, its interval or resolution, what it was measured on, a verdict.

    ``verdict`` is one of :data:`VERDICTS` with a fixed reason; ``reproduced`` 1 / 0 where judged (a number
    for ``dvc metrics diff``), None otherwise.
    """

    value: float | None
    text: str
    verdict: str
    regime: str = ""
    low: float | None = None
    high: float | None = None
    resolution: float | None = None
    reproduced: int | None = None


def _indicative(scope: str) -> str:
    """The verdict of an in-scope-less measurement: indicative, and what a verdict needs."""
    return f"indicative only: a verdict needs {SCOPES[scope]}"


def _largest(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows at the largest value of ``column``."""
    at_max: pd.Series[bool] = frame[column] == frame[column].max()
    return frame[at_max]


# --- speed: the bench's bus bandwidth, with its spread over rounds and sizes ---


def bench_regime(rows: pd.DataFrame) -> tuple[str, bool]:
    """What bench rows (one rank count) were measured on, and whether that is a network: two or more hosts and
    at most one rank per core."""
    world = int(rows["world_size"].iloc[0])
    hosts = int(rows["hosts"].iloc[0]) if "hosts" in rows and pd.notna(rows["hosts"].iloc[0]) else 1
    per_core = _per_core(rows)
    crowded = per_core is not None and per_core > 1
    load = f"{per_core:.1f} ranks per core, oversubscribed" if crowded else "at most one rank per core"
    where = f"{world} ranks on {hosts} host{'s' if hosts > 1 else ''} ({load})"
    return where, hosts >= 2 and not crowded


def _per_core(rows: pd.DataFrame) -> float | None:
    """Ranks per core of one rank count's bench rows (None where the bench did not record it)."""
    value = rows["ranks_per_core"].iloc[0] if "ranks_per_core" in rows else None
    return None if value is None or pd.isna(value) else float(value)


def _regime_order(rows: pd.DataFrame) -> tuple[bool, bool, int]:
    """Sort key of one rank count's bench rows: a network first, then dedicated, then the largest."""
    _, network = bench_regime(rows)
    per_core = _per_core(rows)
    return network, per_core is None or per_core <= 1, int(rows["world_size"].iloc[0])


def round_ratios(mine: pd.Series, theirs: pd.Series) -> list[float]:
    """Per round, ``theirs``' time over ``mine`` (so > 1: mine faster), rounds paired as the bench interleaved
    them; one ratio of the mean times where rounds were not recorded."""
    a, b = _rounds(mine), _rounds(theirs)
    if a and b and len(a) == len(b):
        return [t / m for m, t in zip(a, b, strict=True) if m > 0]
    return [float(theirs["time_us"]) / float(mine["time_us"])] if float(mine["time_us"]) > 0 else []


def _rounds(row: pd.Series) -> list[float]:
    """The per-round times of a bench row (``round_us``, JSON in the CSV), or []."""
    raw = row.get("round_us")
    if isinstance(raw, str) and raw.startswith("["):
        return [float(x) for x in json.loads(raw)]
    return list(raw) if isinstance(raw, list) else []


def busbw_ratio(
    tables: dict[str, pd.DataFrame],
    scope: str,
    algorithm: str,
    over: str,
    needs: str | None = None,
    min_bytes: int = RATIO_BYTES,
    **_: Any,
) -> Measured:
    """Bus bandwidth of ``algorithm`` over ``over``'s, paired round by round at every size from ``min_bytes`` up
    (the largest size if none reaches it): the median ratio and its 10-90th percentile interval, at the rank
    count whose regime speaks best to the claim (a network, then one rank per core, then the largest).

    ``needs``: why a sweep may leave the pair out (then the claim is not measurable here, not missing).
    """
    bench = tables["busbw"]
    pair = bench[bench["algorithm"].isin([algorithm, over])]
    worlds = [g for _, g in pair.groupby("world_size") if g["algorithm"].nunique() == 2]
    if not worlds:
        text = f"the bench ran no {algorithm} and {over} side by side"
        return Measured(None, text, f"not measurable here: {needs}" if needs else "not in this run")
    sized = [_from_size(g, min_bytes) for g in worlds]
    itself = [g for g in sized if _ran_as(g[g["algorithm"] == algorithm]) in (None, algorithm)]
    if not itself:
        ran_as = _ran_as(sized[-1][sized[-1]["algorithm"] == algorithm])
        text = f"{algorithm} ran as {ran_as} at every rank count benched (one node, or too few ranks for its shape)"
        return Measured(None, text, f"not measurable here: {algorithm} needs several nodes to differ from {ran_as}")
    big = max(itself, key=_regime_order)
    ratios = [
        r
        for _, at in big.groupby("bytes")
        for r in round_ratios(at[at["algorithm"] == algorithm].iloc[0], at[at["algorithm"] == over].iloc[0])
    ]
    value = float(np.median(ratios))
    low, high = (float(v) for v in np.percentile(ratios, PERCENTILES))
    where, network = bench_regime(big)
    regime = f"{where}, {_sizes(int(big['bytes'].min()), int(big['bytes'].max()))}"
    text = f"{value:.2f}x {over}'s bus bandwidth ({low:.2f}-{high:.2f} over {len(ratios)} round-size pairs)"
    if not network or scope != "network":
        return Measured(value, text, _indicative(scope), regime, low, high)
    if low > 1:
        return Measured(value, text, "reproduced", regime, low, high, reproduced=1)
    if high < 1:
        return Measured(value, text, "not reproduced", regime, low, high, reproduced=0)
    return Measured(value, text, "undetermined: the interval holds no difference", regime, low, high)


def _from_size(rows: pd.DataFrame, min_bytes: int) -> pd.DataFrame:
    """One rank count's bench rows at sizes from ``min_bytes`` (its largest size if none reaches it)."""
    big = rows[rows["bytes"] >= min_bytes]
    return big if len(big) else _largest(rows, "bytes")


def _sizes(lo: int, hi: int) -> str:
    """A range of message sizes for the cards (``1-4 MiB``, ``256 KiB``)."""

    def size(n: int) -> tuple[str, str]:
        return (f"{n / 2**20:g}", "MiB") if n >= 2**20 else (f"{n / 1024:g}", "KiB")

    (a, unit_a), (b, unit_b) = size(lo), size(hi)
    if lo == hi:
        return f"{a} {unit_a}"
    return f"{a}-{b} {unit_b}" if unit_a == unit_b else f"{a} {unit_a}-{b} {unit_b}"


def _ran_as(rows: pd.DataFrame) -> str | None:
    """The algorithm the schedule of a group's first bench row was (:func:`scalerepro.comm.benchfile.ran`)."""
    return None if rows.empty else benchfile.ran({str(k): v for k, v in rows.iloc[0].items()})


# --- accuracy: against the ring at one seed, or between recipes; each with its resolution ---


def _data_regime(row: pd.Series) -> str:
    """The dataset and evaluation a run measured on."""
    name = row.get("dataset")
    kind = "synthetic " if bool(row.get("synthetic")) else ""
    n = row.get("val_samples")
    evals = f", {int(n):,} val images" if n is not None and pd.notna(n) else ""
    return f"{kind}dataset {name}{evals}" if isinstance(name, str) else f"the run's dataset{evals}"


def accuracy_agreement(tables: dict[str, pd.DataFrame], scope: str, algorithm: str, **_: Any) -> Measured:
    """The final top-1 of ``algorithm`` against the ring's at the same seed, judged within the resolution: the
    larger of the ring's seed-to-seed range and two standard errors of a difference at this eval size."""
    acc = tables["accuracy"]
    rows = acc[acc["algorithm"] == algorithm]
    if rows.empty:
        return Measured(None, f"no {algorithm} run beside a ring run at the same seed", "not in this run")
    row = _largest(rows, "world_size").iloc[0]
    regime = f"{int(row['world_size'])} ranks, {_data_regime(row)}"
    text = f"top-1 {row['final_top1']:.3f} against ring's {row['ring_top1']:.3f} ({row['diff']:+.3f})"
    if pd.isna(row["noise"]):
        return Measured(float(row["diff"]), text + "; no resolution known (no eval size, one seed)", "not in this run")
    res = float(row["noise"])
    text += f", resolution {res:.3f} ({_resolution_parts(row)})"
    if scope != "numerics":
        return Measured(float(row["diff"]), text, _indicative(scope), regime, resolution=res)
    ok = abs(float(row["diff"])) <= res + 1e-9
    verdict = ("reproduced" if ok else "not reproduced") + NUMERICS_ONLY
    return Measured(float(row["diff"]), text, verdict, regime, resolution=res, reproduced=int(ok))


def _resolution_parts(row: pd.Series) -> str:
    """What the resolution is made of: the eval sampling error and the ring's seed range."""
    parts = []
    if pd.notna(row.get("eval_error")):
        parts.append(f"eval sampling {row['eval_error']:.3f}")
    if pd.notna(row.get("seed_range")):
        parts.append(f"seed range {row['seed_range']:.3f} over {int(row['noise_seeds'])} seeds")
    return ", ".join(parts)


def _select(recipes: pd.DataFrame, where: dict[str, Any]) -> pd.DataFrame:
    """The recipe runs matching ``where`` (``bn_group: max``: the largest group among them)."""
    out = recipes
    for key, value in where.items():
        if value == "max":
            numeric = pd.to_numeric(out[key], errors="coerce")
            out = out[numeric == numeric.max()]
        else:
            out = out[out[key].astype(str) == str(value)]
    return out


def recipe_delta(
    tables: dict[str, pd.DataFrame],
    scope: str,
    runs: dict[str, Any],
    against: dict[str, Any],
    same_batch: dict[str, Any] | None = None,
    **_: Any,
) -> Measured:
    """Final top-1 of the runs matching ``runs`` minus that of ``against`` (first seed); judged (no loss larger
    than the resolution) only on a real dataset, indicative on the synthetic one. ``same_batch``, where given,
    selects a run at the first one's batch whose difference is reported beside it (a recipe at a large batch
    against the small-batch recipe at that batch), and each run says how many optimizer steps it took."""
    recipes = tables["recipes"]
    a, b = _select(recipes, runs), _select(recipes, against)
    if a.empty or b.empty:
        return Measured(None, "the sweep has no such pair of runs", "not in this run")
    ra, rb = a.sort_values("seed").iloc[0], b.sort_values("seed").iloc[0]
    delta = float(ra["final_top1"] - rb["final_top1"])
    noises = tables["accuracy"]["noise"].dropna()
    res = float(noises.max()) if len(noises) else None
    text = (
        f"top-1 {ra['final_top1']:.3f} ({_describe(ra)}) against {rb['final_top1']:.3f} ({_describe(rb)}), {delta:+.3f}"
    )
    same = _select(recipes, same_batch) if same_batch else recipes.iloc[0:0]
    if len(same):
        rc = same.sort_values("seed").iloc[0]
        text += (
            f"; at the same batch against {rc['final_top1']:.3f} ({_describe(rc)}), "
            f"{float(ra['final_top1'] - rc['final_top1']):+.3f}"
        )
    text += f", resolution {res:.3f}" if res is not None else ", resolution unknown"
    regime = f"{int(ra['world_size'])} ranks, {_data_regime(ra)}"
    if bool(ra.get("synthetic", True)) or res is None:
        return Measured(delta, text, _indicative(scope), regime, resolution=res)
    ok = delta >= -res
    return Measured(delta, text, "reproduced" if ok else "not reproduced", regime, resolution=res, reproduced=int(ok))


def _describe(run: pd.Series) -> str:
    """A recipe run in a few words."""
    steps = run.get("steps")
    took = f", {int(steps)} steps" if steps is not None and pd.notna(steps) else ""
    return f"{run['optimizer']}, batch {int(run['global_batch'])}, BN over {run['bn_group']}{took}"


# --- the rest: scaling efficiency (never judged on CPU ranks), and what this hardware cannot measure ---


def scaling_efficiency(tables: dict[str, pd.DataFrame], scope: str, needs: str, algorithm: str, **_: Any) -> Measured:
    """The measured scaling efficiency of the claim's ``algorithm`` at the largest rank count: indicative (see
    ``needs``). Another algorithm's curve is no evidence for the claim, so it is named, not quoted."""
    scale = tables["scaling"].dropna(subset=["efficiency"])
    scale = scale[scale.groupby("setting")["world_size"].transform("nunique") > 1]  # a curve, not one point
    if scale.empty:
        return Measured(None, "no scaling measured", f"not measurable here: {needs}")
    others = sorted({str(a) for a in scale["algorithm"]} - {algorithm})
    scale = scale[scale["algorithm"] == algorithm]
    if scale.empty:
        curves = f" (this run's curves are of {', '.join(others)})" if others else ""
        return Measured(None, f"no {algorithm} scaling curve{curves}", f"not measurable here: {needs}")
    row = _largest(scale, "world_size").iloc[0]
    regime = f"{int(row['world_size'])} CPU ranks"
    text = f"{row['efficiency']:.0%} at {int(row['world_size'])} ranks ({row['setting']})"
    return Measured(float(row["efficiency"]), text, _indicative(scope), regime)


def not_measurable(_tables: dict[str, pd.DataFrame], scope: str, needs: str, **_: Any) -> Measured:  # noqa: ARG001 (every measure takes the scope)
    """A claim this hardware cannot speak to; ``needs`` says what would."""
    return Measured(None, "not measured", f"not measurable here: {needs}")


MEASURES: dict[str, Callable[..., Measured]] = {
    f.__name__: f for f in (busbw_ratio, accuracy_agreement, recipe_delta, scaling_efficiency, not_measurable)
}


# --- the claims file ---


def load_cards(folder: Path) -> list[Paper]:
    """The papers of ``folder`` (:func:`scalerepro.papers.load_papers`), every claim's scope and measure checked;
    errors name the file, the claim and the fix."""
    found = load_papers(folder)
    for paper in found:
        for claim in paper.claims:
            where = f"{paper.path}: claim {claim['id']!r}"
            if claim.get("scope") not in SCOPES:
                raise UserError(f"{where}: scope {claim.get('scope')!r} is not one of {', '.join(SCOPES)}")
            measure = claim.get("measure")
            kind = measure.get("kind") if isinstance(measure, dict) else None
            if kind not in MEASURES:
                raise UserError(f"{where}: measure.kind {kind!r} is not one of {sorted(MEASURES)}")
            _check_measure(where, kind, claim["measure"])
    return found


def _check_measure(where: str, kind: str, measure: dict[str, Any]) -> None:
    """A claim's measure gives what its function needs, and its algorithms exist."""
    takes = list(inspect.signature(MEASURES[kind]).parameters.values())[2:]  # after (tables, scope)
    needed = [p.name for p in takes if p.default is p.empty and p.kind is not p.VAR_KEYWORD]
    missing = [name for name in needed if name not in measure]
    if missing:
        raise UserError(f"{where}: measure {kind} needs `{missing[0]}:` (it takes {', '.join(needed)})")
    check_named(measure, f"{where}: measure.")


# --- cards ---


def simulated(papers_csv: pd.DataFrame, claim: str | None) -> str:
    """What the simulation says for the claim with id ``claim`` (its row of simulate-scale's papers.csv)."""
    if claim is None:
        return "not simulated"
    rows = papers_csv[papers_csv["id"] == claim] if len(papers_csv) and "id" in papers_csv else papers_csv.iloc[0:0]
    if rows.empty:
        return f"not simulated in this run: {ADD_SIMULATION}"
    row = rows.iloc[0]
    if pd.isna(row["simulated"]):
        why = row.get("why_not")
        why = why if isinstance(why, str) and why else f"{int(row['ranks'])} ranks is above simulate.claims_max_ranks"
        return f"not simulated in this run ({why}: make simulate runs it)"
    where = f"at {int(row['ranks'])} ranks on {row['platform']}"
    band = f"{_format(row['metric'], row['simulated_low'])} to {_format(row['metric'], row['simulated_high'])}"
    value = f"{_format(row['metric'], row['simulated'])} {where} (band over the platform's ranges: {band})"
    if str(row.get("independent")).lower() == "false":
        value += f" (not independent: the platform's {row.get('depends_on')} cite the claim's source or a paper's own)"
    value += _rests_on(row)
    verdict = str(row.get("verdict"))
    if verdict == "inconsistent":
        return f"{value}: inconsistent, {beyond_text(row['metric'], row['outside_by'])}"
    if verdict in ("consistent", "undetermined"):
        bound = BOUND_WORDS.get(str(row.get("bound")), "")
        return f"{value}: {verdict} (tolerance {tolerance_text(row['metric'])}{bound})"
    return f"{value}: {verdict}"


def _rests_on(row: pd.Series) -> str:
    """The ranged number the simulated figure moves with most, and how far (empty where none was varied)."""
    key = row.get("rests_on")
    if not isinstance(key, str) or not key:
        return ""
    low, high = _format(row["metric"], row["rests_on_low"]), _format(row["metric"], row["rests_on_high"])
    return f"; it rests most on {key}, {row['rests_on_ends']} giving {low} to {high}"


BOUND_WORDS = {"floor": "; the published figure a floor", "ceiling": "; the published figure a ceiling"}


def _format(metric: str, value: float) -> str:
    """A simulated value in the claim's unit."""
    return {
        "efficiency": f"{value:.0%} efficiency",
        "time_90_epochs_s": f"{value / 60:.1f} min of training steps for 90 epochs",
        "images_per_s": f"{value / 1e6:.3f} M images/s",
        "speedup_over": f"{value:.2f}x faster all-reduce",
        "step_speedup_over": f"{value:.2f}x faster step",
    }.get(metric, f"{value:.3g} {metric}")


def judge_claim(claim: dict[str, Any], tables: dict[str, pd.DataFrame]) -> Measured:
    """The claim's measurement; where no held source states the claim, its verdict is ``unverified claim``, with
    what the measurement found where it judged the claim's numerics (so the same measurement reads alike on every
    card)."""
    params = {k: v for k, v in claim["measure"].items() if k != "kind"}
    got = MEASURES[claim["measure"]["kind"]](tables, claim["scope"], **params)
    if claim.get("unverified"):
        found = f"; measured: {got.verdict}" if got.verdict.endswith(NUMERICS_ONLY) else ""
        return Measured(got.value, got.text, UNVERIFIED + found, got.regime, got.low, got.high, got.resolution)
    return got


def cards(papers: list[Paper], tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per claim: its source, published, measured and on what, simulated, verdict and numbers."""
    rows = []
    for paper in papers:
        for claim in paper.claims:
            got = judge_claim(claim, tables)
            rows.append(
                {
                    "paper": paper.title,
                    "id": claim["id"],
                    "claim": claim["claim"],
                    "published": claim["published"],
                    "source": claim["cite"],
                    "scope": claim["scope"],
                    "measured": got.text,
                    "regime": got.regime,
                    "simulated": simulated(tables["papers"], claim["id"] if "at_scale" in claim else None),
                    "verdict": got.verdict,
                    "value": got.value,
                    "low": got.low,
                    "high": got.high,
                    "resolution": got.resolution,
                    "reproduced": got.reproduced,
                }
            )
    return pd.DataFrame(rows, columns=CARD_COLUMNS)


def establishes(tables: dict[str, pd.DataFrame], table: pd.DataFrame) -> list[str]:
    """What this run can establish, from what it ran on: the opening of results/reproduction.md."""
    bench, runs, acc = tables["busbw"], tables["runs"], tables["accuracy"]
    lines = []
    if len(bench):
        regimes = [bench_regime(g) for _, g in bench.groupby("world_size")]
        wrong = pd.to_numeric(bench["wrong"], errors="coerce").fillna(0).sum() if "wrong" in bench else 0
        sums = "every benchmarked sum checked correct" if wrong == 0 else f"{int(wrong)} WRONG elements in the bench"
        network = any(on_network for _, on_network in regimes)
        speed = "speed claims judged on a network" if network else "speed claims indicative only (no network here)"
        lines.append(f"- All-reduce bench: {'; '.join(sorted({where for where, _ in regimes}))}: {sums}; {speed}.")
    if len(runs):
        names = sorted({str(n) for n in runs.get("dataset", pd.Series(dtype=object)).dropna()})
        flags = runs.get("synthetic", pd.Series(dtype=object)).dropna()
        real = bool(len(flags)) and not flags.astype(bool).any()
        kind = "real" if real else "synthetic" if len(flags) else "unrecorded"
        data = f"the {kind} dataset {', '.join(names)}" if names else f"a dataset (kind {kind})"
        res = acc["noise"].dropna()
        within = f", accuracy compared within a resolution of {res.max():.3f} top-1" if len(res) else ""
        recipes = "recipe claims judged" if real else "recipe claims indicative only"
        lines.append(f"- Training: {len(runs)} runs on {data}{within}; {recipes}.")
    sim = tables["papers"]
    done = sim[sim["simulated"].notna()] if len(sim) and "simulated" in sim else sim.iloc[0:0]
    counts = ", ".join(f"{n} {v}" for v, n in done["verdict"].value_counts().sort_index().items()) if len(done) else ""
    flags = done["independent"].astype(str).str.lower() if "independent" in done else pd.Series(dtype=str)
    dependent = int((flags == "false").sum())
    inputs = (
        f"{dependent} of them rest on a compute rate taken from a reproduced paper's own results"
        if dependent
        else "compute rates from single-node measurements by others, so no published figure is an input of the "
        "number it is compared with"
    )
    lines.append(
        f"- Simulation: {len(done)} claims at the paper's scale judged against their band over every assumption "
        f"of config/platforms.yaml ({counts}); {inputs}."
        if len(done)
        else f"- Simulation: not in this run: {ADD_SIMULATION}."
    )
    unverified = int(table["verdict"].str.startswith(UNVERIFIED).sum())
    lines.append(f"- Claims no held source states: {unverified} (marked unverified claim, measured all the same).")
    lines.append(
        "- What would judge the speed and scale claims themselves: a paper's preset run on a cluster, several "
        "hosts with one rank per accelerator, on ILSVRC-2012 (the `At the paper's scale` line of each card)."
    )
    return lines


def markdown(papers: list[Paper], table: pd.DataFrame, tables: dict[str, pd.DataFrame], command: str) -> str:
    """results/reproduction.md: what the run can establish, then one card (a heading and a table) per paper."""
    lines = ["# Reproduction", "", f"Written by `{command}` from this run's results/analysis tables.", ""]
    lines += ["What this run can establish:", "", *establishes(tables, table), ""]
    lines += [
        "Verdicts: " + "; ".join(VERDICTS) + ". A verdict is given only where the measurement was made on what "
        "the claim's scope needs (" + "; ".join(f"{k}: {v}" for k, v in SCOPES.items()) + ").",
        "",
        (
            "Simulated at the paper's scale (a figure under the assumptions of config/platforms.yaml, not a "
            f"measurement): {'; '.join(SIMULATED_VERDICTS)}. The tolerance is {tolerance_text('efficiency')} for an "
            f"efficiency and {tolerance_text('images_per_s')} (as a ratio) for the rest; a published figure stated as "
            "'over' is a floor, and a whole run's wall time a ceiling for the simulated training steps alone."
        ),
        "",
    ]
    for paper in papers:
        rows = table[table["paper"] == paper.title]
        lines += [
            f"## {paper.title} ({paper.cite}, source `{paper.id}`)",
            "",
            (
                f"Held of the paper: {paper.held}. Here: {tally(rows)}. At the paper's scale: "
                f"`--configfile config/cluster.yaml {paper.preset_arg()}`."
            ),
            *(["", *methods(paper)] if paper.methods else []),
            "",
            "| claim | published | source (where) | measured here | on | simulated at the paper's scale | verdict |",
            "|---|---|---|---|---|---|---|",
        ]
        r: Any  # a row of the cards table: its columns' types are unknown to the type checker
        for r in rows.itertuples(index=False):
            lines.append(
                f"| {r.claim} | {r.published} | {r.source} | {r.measured} | {r.regime or '-'} | {r.simulated} "
                f"| {r.verdict} |"
            )
        lines.append("")
    return "\n".join(lines)


def methods(paper: Paper) -> list[str]:
    """The card's lines on which algorithm it judged as the paper's own, what reading that is, and its sources; an
    error naming the paper's file for an algorithm the table does not have."""
    for m in paper.methods:
        check_named({"algorithm": m.algorithm}, f"{paper.path}: method ")
    return [
        f"Judged as the paper's all-reduce: `{m.algorithm}`, {m.reading} (from {'; '.join(m.cites)})."
        for m in paper.methods
    ]


def tally(rows: pd.DataFrame) -> str:
    """Cards' verdicts counted (``6 not measurable here, 1 reproduced``): what a run can say of the claims."""
    counts = rows["verdict"].map(verdict_word).value_counts()
    return ", ".join(f"{n} {v}" for v, n in counts.items())


def verdict_word(verdict: str) -> str:
    """A verdict's fixed phrase (one of :data:`VERDICTS`), without what follows it: its reason, scope or finding."""
    return re.split(r"[:;(]", verdict)[0].strip()


def dvc_metrics(table: pd.DataFrame) -> dict[str, Any]:
    """For DVC: per paper and claim id, the measured value, its interval or resolution, 1/0 reproduced, verdict."""
    out: dict[str, Any] = {}
    r: Any  # a row of the cards table: its columns' types are unknown to the type checker
    for r in table.itertuples(index=False):
        out.setdefault(r.paper, {})[r.id] = {
            "value": _num(r.value),
            "low": _num(r.low),
            "high": _num(r.high),
            "resolution": _num(r.resolution),
            "reproduced": None if pd.isna(r.reproduced) else int(r.reproduced),
            "verdict": r.verdict,
        }
    return out


def _num(value: Any) -> float | None:
    """A JSON number, None for a missing one."""
    return None if value is None or pd.isna(value) else float(value)


def read_analysis(analysis: Path) -> dict[str, pd.DataFrame]:
    """The analysis tables the measures read: one without rows or columns as an empty table of the columns the
    measures need; one with rows must have them (else an error naming the file and the column)."""
    out = {}
    for name, columns in TABLES.items():
        path = analysis / f"{name}.csv"
        frame = read_csv(path, "analyze")
        if frame.empty and not len(frame.columns):
            frame = pd.DataFrame(columns=list(columns))
        missing = [c for c in columns if c not in frame.columns]
        if missing:
            raise UserError(
                f"{path}: no column {missing[0]!r}, which `scalerepro analyze` writes; rerun it (snakemake "
                "results/analysis/runs.csv) rather than editing the table"
            )
        out[name] = frame
    return out


PAGE = """<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>Reproduction</title>
<style>
body {{ font-family: sans-serif; font-size: 13px; margin: 1em; }}
table {{ border-collapse: collapse; margin-bottom: 2em; }}
th, td {{ border: 1px solid #ccc; padding: 4px 6px; text-align: left; vertical-align: top; }}
th {{ background: #f0f0f0; }}
</style></head>
<body>
<h1>Reproduction: one row per published claim</h1>
<p>Written by <code>{command}</code>; the cards with what this run can establish are in
results/reproduction.md.</p>
{body}
</body></html>
"""


def html(table: pd.DataFrame, command: str) -> str:
    """The claims' table as one HTML page (the report shows it): a section per paper, a row per claim."""
    sections = [
        f"<h2>{escape(str(paper))}</h2>\n" + rows.drop(columns=["paper"]).to_html(index=False, na_rep="", border=0)
        for paper, rows in table.groupby("paper", sort=False)
    ]
    return PAGE.format(command=escape(command), body="\n".join(sections))


def reproduce(
    analysis: Path,
    papers_dir: Path,
    out_md: Path,
    out_csv: Path,
    out_json: Path,
    command: str,
    out_html: Path | None = None,
) -> pd.DataFrame:
    """Write the cards (Markdown), their table (CSV, and as HTML for the report) and the DVC metrics; return the
    table."""
    papers = load_cards(papers_dir)
    tables = read_analysis(analysis)
    table = cards(papers, tables)
    write_text_atomic(out_md, markdown(papers, table, tables, command))
    shown = table.drop(columns=["value", "low", "high", "resolution", "reproduced"])
    write_text_atomic(out_csv, shown.to_csv(index=False))
    if out_html is not None:
        write_text_atomic(out_html, html(shown, command))
    write_json_atomic(out_json, dvc_metrics(table))
    return table
