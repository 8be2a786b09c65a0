"""Accuracy across algorithms (within the ring's seed-to-seed noise) and the recipes table."""

from __future__ import annotations

import pandas as pd
import pytest

from scalerepro.analysis.accuracy import agreement, eval_error, recipes, seed_range


def runs(rows: list[tuple], val_samples: int | None = None) -> pd.DataFrame:
    """Per-run rows: (variant, algorithm, ranks, bn, seed, final_top1, optimizer, global batch)."""
    frame = pd.DataFrame(
        rows,
        columns=["variant", "algorithm", "world_size", "bn_group", "seed", "final_top1", "optimizer", "global_batch"],
    )
    return frame.assign(
        repetition=0,
        run=[f"r{i}" for i in range(len(frame))],
        best_top1=frame["final_top1"],
        tta_s=None,
        status="success",
        val_samples=val_samples,
    )


def test_an_algorithm_within_the_rings_seed_noise_agrees_and_one_beyond_does_not():
    table = runs(
        [
            ("two", "ring", 4, "1", 0, 0.8125, "sgd", 128),
            ("two", "ring", 4, "1", 1, 0.7875, "sgd", 128),
            ("two", "multiring", 4, "1", 0, 0.8, "sgd", 128),
            ("two", "torus2d", 4, "1", 0, 0.75, "sgd", 128),
        ]
    )
    out = agreement(table).set_index("algorithm")
    assert seed_range(table, "two", 4, "1") == (pytest.approx(0.025), 2)
    assert out["noise"].tolist() == [pytest.approx(0.025)] * 2  # no eval size known: the seed range alone
    assert out.loc["multiring", "diff"] == pytest.approx(-0.0125)
    assert out.loc["multiring", "within_noise"]
    assert out.loc["torus2d", "diff"] == pytest.approx(-0.0625)
    assert not out.loc["torus2d", "within_noise"]
    assert "ring" not in out.index
    assert len(out) == 2


def test_without_a_second_seed_the_eval_sampling_error_is_the_noise_and_without_either_it_is_unknown():
    pair = [("b", "ring", 2, "1", 0, 0.5, "sgd", 64), ("b", "native", 2, "1", 0, 0.45, "sgd", 64)]
    out = agreement(runs(pair))
    assert out["noise"].isna().all()
    assert out["within_noise"].isna().all()
    assert out["noise_seeds"].tolist() == [1]
    out = agreement(runs(pair, val_samples=200)).iloc[0]
    assert out["eval_error"] == pytest.approx(2 * (2 * 0.25 / 200) ** 0.5) == pytest.approx(0.1)
    assert out["noise"] == pytest.approx(0.1)
    assert out["within_noise"]
    assert not agreement(runs([pair[0], ("b", "native", 2, "1", 0, 0.39, "sgd", 64)], val_samples=200)).iloc[0][
        "within_noise"
    ]
    assert eval_error(0.5, None) is None
    assert eval_error(1.0, 100) == 0.0


def test_recipes_are_the_rings_runs_where_recipes_vary():
    table = runs(
        [
            ("base", "ring", 1, "1", 0, 0.9, "sgd", 32),
            ("base", "ring", 4, "1", 0, 0.8, "sgd", 128),
            ("base", "ring", 4, "4", 0, 0.82, "sgd", 128),
            ("lars", "ring", 4, "1", 0, 0.5, "lars", 512),
            ("base", "native", 4, "1", 0, 0.8, "sgd", 128),
        ]
    )
    out = recipes(table)
    assert out["world_size"].unique().tolist() == [4]
    assert len(out) == 3
    assert set(out["optimizer"]) == {"sgd", "lars"}
    assert set(out["bn_group"]) == {"1", "4"}
