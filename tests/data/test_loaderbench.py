"""bench-loader: both loaders measured in one run on the same JPEGs; JSON and table; clear errors."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys

import pytest
from PIL import Image

from scalerepro.data.loaderbench import LoaderBenchSpec, bench_dataset, per_loader


def test_bench_dataset_is_imagenet_sized_quality_90(tmp_path):
    folder = bench_dataset(tmp_path, 20, 0)
    files = sorted((folder / "train").rglob("*.JPEG"))
    assert len(files) == 20
    sizes = [Image.open(p).size for p in files]
    assert all(min(s) >= 400 and max(s) <= 500 for s in sizes)
    assert bench_dataset(tmp_path, 20, 0) == folder  # reused, not regenerated


def test_summary_takes_medians_and_ratios():
    rows = [
        {
            "loader": loader,
            "workers": 2,
            "rep": rep,
            "pass": "timed",
            "images_per_s": ips,
            "startup_s": 0.1,
            "peak_rss_mib": 100.0,
            "peak_pss_mib": 0.0,
        }
        for rep, (a, b) in enumerate([(300, 100), (330, 110), (200, 120)])
        for loader, ips in (("shards", a), ("torchvision", b))
    ]
    rows += [
        {
            "loader": loader,
            "workers": 2,
            "rep": 3,
            "pass": "memory",
            "images_per_s": 1.0,
            "startup_s": 9.0,
            "peak_rss_mib": 120.0,
            "peak_pss_mib": 60.0,
            "data_mib": 10.0,
        }
        for loader in ("shards", "torchvision")
    ]
    by = {r["loader"]: r for r in per_loader(rows)}
    assert by["shards"]["images_per_s"] == 300
    assert by["torchvision"]["images_per_s"] == 110
    assert by["shards"]["startup_s"] == 0.1
    assert by["shards"]["peak_pss_mib"] == 60.0  # memory from its own pass
    assert by["shards"]["images_per_s_per_worker"] == 150
    assert by["shards"]["ratio_vs_torchvision"] == pytest.approx(300 / 110)


@pytest.mark.slow
def test_cli_measures_both_loaders_in_one_run(tmp_path):
    out = tmp_path / "loader.json"
    cmd = [
        sys.executable,
        "-m",
        "scalerepro.cli",
        "bench-loader",
        "--work",
        str(tmp_path / "work"),
        "--out",
        str(out),
        "--images",
        "30",
        "--size",
        "64",
        "--batch",
        "8",
        "--workers",
        "0,1",
        "--reps",
        "1",
        "--stage-root",
        str(tmp_path / "shm"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    record = json.loads(out.read_text())
    assert {(r["loader"], r["workers"]) for r in record["rows"]} == {
        (loader, w) for loader in ("shards", "torchvision") for w in (0, 1)
    }
    assert all(r["images_per_s"] > 0 and r["peak_rss_mib"] > 0 for r in record["rows"])
    assert [r["pass"] for r in record["rows"] if r["workers"] == 1] == ["timed", "timed", "memory", "memory"]
    assert all(r["peak_pss_mib"] > 0 for r in record["rows"] if r["pass"] == "memory")
    assert {r["start_method"] for r in record["rows"] if r["pass"] == "memory"} == {"fork"}  # as a rank's workers
    memory = {r["loader"]: r for r in record["rows"] if r["pass"] == "memory" and r["workers"] == 1}
    jpegs = sum(f.stat().st_size for f in (tmp_path / "work").rglob("*.JPEG") if "/train/" in str(f))
    assert memory["torchvision"]["data_mib"] == pytest.approx(jpegs / 2**20)
    assert 0.5 * jpegs < memory["shards"]["data_mib"] * 2**20 < 2 * jpegs  # the same JPEGs, packed
    assert "data MiB" in proc.stderr
    assert record["row_index"]["images"] == (30 if shutil.which("jpegtran") else 0)
    assert all("pss_ratio_vs_torchvision" in r for r in record["summary"])
    assert "vs tv" in proc.stderr
    assert record["spec"]["scale"] == [0.08, 1.0]
    assert "loader workers per accelerator to feed resnet50" in proc.stderr
    needed = record["workers_needed"]
    assert needed["per_worker"]["images_per_s_per_worker"] == min(
        r["images_per_s_per_worker"] for r in record["summary"] if r["loader"] == "shards"
    )
    assert any(r["source"].startswith("Ying et al. 2018") and r["cpus_per_task"] >= 2 for r in needed["rows"])


def test_cli_refuses_a_bad_scale(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalerepro.cli",
            "bench-loader",
            "--work",
            str(tmp_path),
            "--out",
            str(tmp_path / "x.json"),
            "--scale",
            "0.5,0.2",
        ],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "--scale 0.5,0.2" in proc.stderr
    assert LoaderBenchSpec().scale == (0.08, 1.0)
