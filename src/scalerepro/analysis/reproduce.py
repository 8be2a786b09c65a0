"""Reproduction cards: per paper, each claim with the published number, what this run measured, what the
simulation says at the paper's scale, and a verdict (config/reproduction.yaml lists the claims).

Verdicts: ``reproduced``, ``not reproduced`` (with by how much), ``not measurable here`` (with what it
would take), ``not in this run`` (the runs a measurement needs are not in the sweep).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pandas as pd
import yaml

from scalerepro.analysis.collect import read_csv
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic, write_text_atomic

TABLES = ("busbw", "accuracy", "recipes", "scaling", "papers")
CARD_COLUMNS = ["paper", "claim", "published", "where", "measured", "simulated", "verdict", "value", "reproduced"]


@dataclass(frozen=True)
class Measured:
    """One claim's measurement here: a number (or None), how to read it, and the verdict."""

    value: float | None
    text: str
    verdict: str
    reproduced: int | None = None  # 1 reproduced, 0 not, None not judged (a number: `dvc metrics diff` shows it)


def judged(value: float, text: str, ok: bool, why_not: str) -> Measured:
    """A measurement with a verdict: reproduced, or not reproduced and by how much."""
    return Measured(value, text, "reproduced" if ok else f"not reproduced ({why_not})", int(ok))


def _largest(frame: pd.DataFrame, column: str) -> pd.DataFrame:
    """The rows at the largest value of ``column``."""
    at_max: pd.Series[bool] = frame[column] == frame[column].max()
    return frame[at_max]


def busbw_ratio(
    tables: dict[str, pd.DataFrame], algorithm: str, over: str, needs: str | None = None, **_: Any
) -> Measured:
    """Median bus bandwidth of ``algorithm`` over ``over``'s at the bench's largest rank count and message;
    ``needs``: why a sweep may leave the pair out (then the claim is not measurable here, not missing)."""
    bench = tables["busbw"]
    pair = bench[bench["algorithm"].isin([algorithm, over])]
    if pair["algorithm"].nunique() < 2:
        text = f"the bench ran no {algorithm} and {over} side by side"
        return Measured(None, text, f"not measurable here: {needs}" if needs else "not in this run")
    top = _largest(_largest(pair, "world_size"), "bytes")
    ran_as = _ran_as(top[top["algorithm"] == algorithm])
    if ran_as not in (None, algorithm):
        return Measured(
            None,
            f"{algorithm} ran as {ran_as} here (one node, or too few ranks for its shape)",
            f"not measurable here: {algorithm} needs several nodes to differ from {ran_as}",
        )
    rates = top.groupby("algorithm")["busbw_GBps"].median()
    ratio = float(rates[algorithm] / rates[over])
    world, size = int(top["world_size"].iloc[0]), int(top["bytes"].iloc[0])
    text = f"{ratio:.2f}x {over}'s bus bandwidth at {world} ranks, {size / 2**20:.0f} MiB"
    return judged(ratio, text, ratio >= 1, f"{1 - ratio:.0%} slower here")


def _ran_as(rows: pd.DataFrame) -> str | None:
    """The algorithm a bench row's schedule reduced to (``as`` in its schedule record), if any."""
    if rows.empty or "schedule" not in rows.columns:
        return None
    schedule = rows["schedule"].iloc[0]
    record = json.loads(schedule) if isinstance(schedule, str) and schedule.startswith("{") else {}
    return record.get("as") if isinstance(record, dict) else None


def accuracy_agreement(tables: dict[str, pd.DataFrame], algorithm: str, **_: Any) -> Measured:
    """The final top-1 of ``algorithm`` against the ring's at the same seed, judged by the noise (see accuracy)."""
    acc = tables["accuracy"]
    rows = acc[acc["algorithm"] == algorithm]
    if rows.empty:
        return Measured(None, f"no {algorithm} run beside a ring run at the same seed", "not in this run")
    row = _largest(rows, "world_size").iloc[0]
    noise = row["noise"]
    text = f"top-1 {row['final_top1']:.3f} against ring's {row['ring_top1']:.3f} at {int(row['world_size'])} ranks"
    if pd.isna(noise):
        return Measured(
            float(row["diff"]), text + "; neither a second seed nor the eval size to judge it by", "not in this run"
        )
    seeds = "n/a" if pd.isna(row["seed_range"]) else f"{row['seed_range']:.3f} over {int(row['noise_seeds'])} seeds"
    text += f" (noise {noise:.3f}: seed range {seeds}, eval sampling error {row['eval_error']:.3f})"
    return judged(
        float(row["diff"]), text, bool(row["within_noise"]), f"differs by {abs(row['diff']):.3f}, beyond the noise"
    )


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


def recipe_delta(tables: dict[str, pd.DataFrame], runs: dict[str, Any], against: dict[str, Any], **_: Any) -> Measured:
    """Final top-1 of the runs matching ``runs`` minus that of ``against`` (first seed), judged by the noise."""
    recipes = tables["recipes"]
    a, b = _select(recipes, runs), _select(recipes, against)
    if a.empty or b.empty:
        return Measured(None, "the sweep has no such pair of runs", "not in this run")
    ra, rb = a.sort_values("seed").iloc[0], b.sort_values("seed").iloc[0]
    delta = float(ra["final_top1"] - rb["final_top1"])
    noises = tables["accuracy"]["noise"].dropna()
    noise = float(noises.max()) if len(noises) else 0.0
    text = (
        f"top-1 {ra['final_top1']:.3f} ({_describe(ra)}) against {rb['final_top1']:.3f} ({_describe(rb)}), "
        f"{delta:+.3f}; noise {noise:.3f}"
    )
    return judged(delta, text, delta >= -noise, f"{-delta:.3f} lower, beyond the noise")


def _describe(run: pd.Series) -> str:
    """A recipe run in a few words."""
    return f"{run['optimizer']}, batch {int(run['global_batch'])}, BN over {run['bn_group']}"


def scaling_efficiency(tables: dict[str, pd.DataFrame], needs: str, **_: Any) -> Measured:
    """The measured scaling efficiency at the largest rank count, reported but not judged (see ``needs``)."""
    scale = tables["scaling"].dropna(subset=["efficiency"])
    scale = scale[scale.groupby("setting")["world_size"].transform("nunique") > 1]  # a curve, not one point
    if scale.empty:
        return Measured(None, "no scaling measured", f"not measurable here: {needs}")
    row = _largest(scale, "world_size").iloc[0]
    text = f"{row['efficiency']:.0%} at {int(row['world_size'])} ranks ({row['setting']})"
    return Measured(float(row["efficiency"]), text, f"not measurable here: {needs}")


def not_measurable(_tables: dict[str, pd.DataFrame], needs: str, **_: Any) -> Measured:
    """A claim this hardware cannot speak to; ``needs`` says what would."""
    return Measured(None, "not measured", f"not measurable here: {needs}")


MEASURES: dict[str, Callable[..., Measured]] = {
    f.__name__: f for f in (busbw_ratio, accuracy_agreement, recipe_delta, scaling_efficiency, not_measurable)
}


def load_claims(path: Path) -> list[dict[str, Any]]:
    """The papers of config/reproduction.yaml, each claim's measure kind checked (errors name the claim)."""
    try:
        papers: list[dict[str, Any]] = yaml.safe_load(Path(path).read_text())["papers"]
    except (OSError, yaml.YAMLError, KeyError, TypeError) as exc:
        raise UserError(f"cannot read the claims in {path}: {exc}; it needs a top-level `papers:` list") from None
    for paper in papers:
        for claim in paper["claims"]:
            kind = claim.get("measure", {}).get("kind")
            if kind not in MEASURES:
                raise UserError(
                    f"{path}: {paper['paper']}, claim {claim['claim']!r}: measure.kind {kind!r} is not "
                    f"one of {sorted(MEASURES)}"
                )
    return papers


def simulated(papers_csv: pd.DataFrame, claim: str | None) -> str:
    """What the simulation says for the platforms.yaml claim named ``claim``."""
    if claim is None:
        return "not simulated"
    rows = papers_csv[papers_csv["claim"] == claim] if len(papers_csv) else papers_csv
    if rows.empty:
        return "not simulated yet (run the simulation: make simulate, or simulate.enabled)"
    row = rows.iloc[0]
    if pd.isna(row["simulated"]):
        return (
            f"not simulated in this run ({int(row['ranks'])} ranks is above simulate.claims_max_ranks: "
            "make simulate runs it)"
        )
    value = _format(row["metric"], row["simulated"])
    if pd.isna(row["published"]):
        return f"{value} at {int(row['ranks'])} ranks on {row['platform']} (no published number to compare)"
    ratio = row["simulated_over_published"]
    return f"{value} at {int(row['ranks'])} ranks on {row['platform']}: {ratio:.2f}x the published figure"


def _format(metric: str, value: float) -> str:
    """A simulated value in the claim's unit."""
    return {
        "efficiency": f"{value:.0%} efficiency",
        "time_90_epochs_s": f"{value / 60:.1f} min for 90 epochs",
        "images_per_s": f"{value / 1e6:.3f} M images/s",
        "speedup_over": f"{value:.1f}x faster all-reduce",
    }.get(metric, f"{value:.3g} {metric}")


def cards(papers: list[dict[str, Any]], tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per claim: published, measured, simulated, verdict."""
    rows = []
    for paper in papers:
        for claim in paper["claims"]:
            params = {k: v for k, v in claim["measure"].items() if k != "kind"}
            got = MEASURES[claim["measure"]["kind"]](tables, **params)
            rows.append(
                {
                    "paper": paper["paper"],
                    "claim": claim["claim"],
                    "published": claim["published"],
                    "where": claim["where"],
                    "measured": got.text,
                    "simulated": simulated(tables["papers"], claim.get("simulated")),
                    "verdict": got.verdict,
                    "value": got.value,
                    "reproduced": got.reproduced,
                }
            )
    return pd.DataFrame(rows, columns=CARD_COLUMNS)


def markdown(papers: list[dict[str, Any]], table: pd.DataFrame, command: str) -> str:
    """results/reproduction.md: one card (a heading and a table) per paper."""
    lines = [
        "# Reproduction",
        "",
        f"Written by `{command}` from this run's results/analysis tables.",
        (
            "Measured: this run (see results/metrics.json for the machine and rank counts). Simulated: SimGrid "
            "at the paper's scale (config/platforms.yaml)."
        ),
        "",
    ]
    for paper in papers:
        rows = table[table["paper"] == paper["paper"]]
        lines += [
            f"## {paper['paper']}: {paper['title']} ({paper['cite']})",
            "",
            f"At the paper's scale: `--configfile config/cluster.yaml {paper['preset']}`.",
            "",
            "| claim | published (where) | measured here | simulated at the paper's scale | verdict |",
            "|---|---|---|---|---|",
        ]
        for r in rows.itertuples(index=False):
            lines.append(f"| {r.claim} | {r.published} ({r.where}) | {r.measured} | {r.simulated} | {r.verdict} |")
        lines.append("")
    return "\n".join(lines)


def metrics(table: pd.DataFrame) -> dict[str, Any]:
    """For DVC: per paper and claim, the measured value, 1/0 reproduced, and the verdict."""
    out: dict[str, Any] = {}
    r: Any  # a row of the cards table: its columns' types are unknown to the type checker
    for r in table.itertuples(index=False):
        out.setdefault(r.paper, {})[r.claim] = {
            "value": None if pd.isna(r.value) else float(r.value),
            "reproduced": None if pd.isna(r.reproduced) else int(r.reproduced),
            "verdict": r.verdict,
        }
    return out


def read_tables(analysis: Path) -> dict[str, pd.DataFrame]:
    """The analysis tables the measures read."""
    return {name: read_csv(analysis / f"{name}.csv", "analyze") for name in TABLES}


def reproduce(analysis: Path, claims: Path, out_md: Path, out_csv: Path, out_json: Path, command: str) -> pd.DataFrame:
    """Write the cards (Markdown), their table (CSV, for the HTML report) and the DVC metrics; return the table."""
    papers = load_claims(claims)
    table = cards(papers, read_tables(analysis))
    write_text_atomic(out_md, markdown(papers, table, command))
    write_text_atomic(out_csv, table.drop(columns=["value", "reproduced"]).to_csv(index=False))
    write_json_atomic(out_json, metrics(table))
    return table
