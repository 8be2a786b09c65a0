"""Reproduction cards: a row per claim of config/reproduction.yaml, verdicts from the tables, DVC numbers."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import yaml

from scalerepro.analysis.accuracy import AGREEMENT_COLUMNS
from scalerepro.analysis.reproduce import load_claims, reproduce
from scalerepro.errors import UserError
from tests.support import REPO

CLAIMS = REPO / "config" / "reproduction.yaml"


def tables(folder: Path, multicolor_busbw: float = 1.5, torus_schedule: str = "{}") -> Path:
    """Analysis tables as `analyze` writes them: a 4-rank bench, agreement, recipes, scaling, one simulated claim."""
    folder.mkdir(parents=True, exist_ok=True)
    bench = [
        ("native", 4, 4194304, 1.0, "{}"),
        ("ring", 4, 4194304, 1.2, "{}"),
        ("multicolor", 4, 4194304, multicolor_busbw, "{}"),
        ("torus2d", 4, 4194304, 1.3, torus_schedule),
        ("multicolor", 4, 1024, 9.0, "{}"),
        ("multicolor", 2, 4194304, 0.1, "{}"),
    ]
    pd.DataFrame(bench, columns=["algorithm", "world_size", "bytes", "busbw_GBps", "schedule"]).to_csv(
        folder / "busbw.csv", index=False
    )
    pd.DataFrame(
        [
            ("two-nodes", 4, "1", 0, "multicolor", "a", 0.80, 0.81, -0.01, 0.01, 2, 0.02, 0.02, True),
            ("two-nodes", 4, "1", 0, "torus2d", "b", 0.70, 0.81, -0.11, 0.01, 2, 0.02, 0.02, False),
        ],
        columns=AGREEMENT_COLUMNS,
    ).to_csv(folder / "accuracy.csv", index=False)
    pd.DataFrame(
        [
            ("r1", "base", 4, "1", "sgd", 128, 0, 0.80),
            ("r2", "base", 4, "4", "sgd", 128, 0, 0.81),
            ("r3", "lars", 4, "1", "lars", 512, 0, 0.50),
        ],
        columns=["run", "variant", "world_size", "bn_group", "optimizer", "global_batch", "seed", "final_top1"],
    ).to_csv(folder / "recipes.csv", index=False)
    pd.DataFrame([("ring-g1", 1, 1.0), ("ring-g1", 4, 0.4)], columns=["setting", "world_size", "efficiency"]).to_csv(
        folder / "scaling.csv", index=False
    )
    pd.DataFrame(
        [
            (
                "Cho et al. 2017",
                "scaling efficiency of ResNet-50 on 256 GPUs with DDL's multi-ring all-reduce",
                "minsky-ddl",
                256,
                "efficiency",
                0.95,
                0.935,
                0.984,
            )
        ],
        columns=["paper", "claim", "platform", "ranks", "metric", "published", "simulated", "simulated_over_published"],
    ).to_csv(folder / "papers.csv", index=False)
    pd.DataFrame(columns=["run"]).to_csv(folder / "runs.csv", index=False)
    return folder


def run(tmp_path: Path, **kw) -> tuple[pd.DataFrame, str, dict]:
    """reproduce() on generated tables; the table, the Markdown and the DVC metrics."""
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    table = reproduce(tables(tmp_path / "analysis", **kw), CLAIMS, out / "r.md", out / "r.csv", out / "r.json", "cmd")
    return table.set_index("claim"), (out / "r.md").read_text(), json.loads((out / "r.json").read_text())


def test_every_claim_gets_a_row_and_a_verdict_from_the_tables(tmp_path):
    table, md, metrics = run(tmp_path)
    claims = [c["claim"] for p in load_claims(CLAIMS) for c in p["claims"]]
    assert list(table.index) == claims
    assert all(f"| {c} |" in md for c in claims)
    assert md.count("\n## ") == 3
    kumar = table.loc["the multi-color all-reduce is faster than the MPI library's"]
    assert kumar["verdict"] == "reproduced"
    assert kumar["value"] == pytest.approx(1.5)
    assert table.loc["the 2-D torus changes the time of the sums, not the accuracy", "verdict"].startswith(
        "not reproduced"
    )
    assert (
        table.loc["the multi-color all-reduce changes the time of the sums, not the accuracy", "verdict"]
        == "reproduced"
    )
    bn = table.loc[
        "distributed batch norm (statistics over a group of replicas) keeps accuracy at small per-replica batches"
    ]
    assert bn["value"] == pytest.approx(0.01)
    assert bn["verdict"] == "reproduced"
    lars = table.loc["a large global batch (32K) without accuracy loss"]
    assert lars["value"] == pytest.approx(-0.30)
    assert lars["verdict"].startswith("not reproduced (0.300 lower")
    cho = table.loc["95% scaling efficiency of ResNet-50 on 256 GPUs with DDL's multi-ring all-reduce"]
    assert cho["simulated"].endswith("0.98x the published figure")
    assert cho["verdict"].startswith("not measurable here")
    assert (
        "not simulated yet"
        in table.loc[
            "training throughput over 1.05 M images/s on 1,024 chips with the 2-D torus all-reduce", "simulated"
        ]
    )
    assert (
        metrics["Kumar et al. 2017"]["the multi-color all-reduce is faster than the MPI library's"]["reproduced"] == 1
    )
    assert table.loc["the multi-ring all-reduce is faster than a single ring", "verdict"] == (
        "not measurable here: several nodes: on one node the multi-ring is the ring, so the laptop bench leaves it out"
    )


def test_a_slower_algorithm_is_not_reproduced_and_one_that_ran_as_another_is_not_measurable(tmp_path):
    table, _, metrics = run(tmp_path, multicolor_busbw=0.8, torus_schedule='{"as": "ring"}')
    assert (
        table.loc["the multi-color all-reduce is faster than the MPI library's", "verdict"]
        == "not reproduced (20% slower here)"
    )
    assert table.loc["the 2-D torus all-reduce is faster than the 1-D ring", "verdict"].startswith(
        "not measurable here: torus2d needs several nodes"
    )
    assert (
        metrics["Kumar et al. 2017"]["the multi-color all-reduce is faster than the MPI library's"]["reproduced"] == 0
    )


def test_an_unknown_measure_is_named_with_its_claim(tmp_path):
    bad = tmp_path / "claims.yaml"
    bad.write_text(
        yaml.safe_dump({"papers": [{"paper": "P", "claims": [{"claim": "fast", "measure": {"kind": "vibes"}}]}]})
    )
    with pytest.raises(UserError, match=r"P, claim 'fast': measure.kind 'vibes' is not one of"):
        load_claims(bad)
