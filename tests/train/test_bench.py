"""bench-train: both sides measured in one run, JSON with the ratio and our all-reduce time per step."""

from __future__ import annotations

import json

import pytest

from scalerepro.comm.algorithms import select
from scalerepro.train.bench import TrainBenchSpec, format_summary, summarise
from tests.support import REPO


@pytest.mark.mpi
def test_bench_train_cli_writes_both_sides(run_mpi, tmp_path):
    out = tmp_path / "bt.json"
    proc = run_mpi(
        2,
        [
            "-m",
            "scalerepro.cli",
            "bench-train",
            "--out",
            str(out),
            "--steps",
            "2",
            "--warmup",
            "1",
            "--reps",
            "2",
            "--set",
            "train.width=4",
            "--set",
            "train.batch_per_rank=4",
            "--baselines",
            str(REPO / "config" / "baselines.yaml"),
            "--set",
            "train.model=resnet8",
        ],
    )
    result = json.loads(out.read_text())
    assert [(r["rep"], r["side"]) for r in result["rows"]] == [
        (0, "ours"),
        (0, "ddp-gloo"),
        (1, "ddp-gloo"),
        (1, "ours"),
    ]
    s = result["summary"]
    assert s["world_size"] == 2
    assert s["ratio"] == pytest.approx(s["ours_images_per_s"] / s["ddp_images_per_s"])
    assert 0 < s["allreduce_s_per_step"] < s["step_s"]
    assert "ratio ours/ddp" in proc.stderr
    assert result["published_per_accelerator"] == []


def test_summary_takes_medians():
    rows = [
        {"rep": i, "side": side, "seconds": sec, "images_per_s": 100 / sec, "allreduce_s_per_step": 0.01}
        for i, (a, b) in enumerate([(1.0, 2.0), (2.0, 2.0), (4.0, 2.0)])
        for side, sec in (("ours", a), ("ddp-gloo", b))
    ]
    for r in rows:
        if r["side"] != "ours":
            del r["allreduce_s_per_step"]
    s = summarise(rows, TrainBenchSpec(select("ring"), steps=10), 2)
    assert s["ours_images_per_s"] == 50
    assert s["ddp_images_per_s"] == 50
    assert s["ratio"] == 1
    assert s["step_s"] == pytest.approx(0.2)
    assert "ratio ours/ddp 1.000" in format_summary(s)


def test_bad_counts_are_named(run_mpi, tmp_path):
    proc = run_mpi(
        1, ["-m", "scalerepro.cli", "bench-train", "--out", str(tmp_path / "x.json"), "--steps", "0"], check=False
    )
    assert proc.returncode == 2
    assert "--steps 0" in proc.stderr
