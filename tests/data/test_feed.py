"""Loader workers and CPUs per accelerator: published rates, a bench-train JSON's measured rate, bad files named."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scalerepro.comm.algorithms import select
from scalerepro.config import from_mapping
from scalerepro.data import feed
from scalerepro.data.loaderbench import per_loader
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.provenance import record
from scalerepro.train.bench import TrainBenchSpec
from scalerepro.train.bench import summarise as summarise_train
from tests.support import REPO

BASELINES = REPO / "config" / "baselines.yaml"


def bench_train_json(path, images_per_s=(400.0, 500.0, 450.0), world=4):
    """A bench-train result as `scalerepro bench-train` writes it, with ours at the given total images/s."""
    spec = TrainBenchSpec(algorithm=select("ring"), steps=10, reps=len(images_per_s))
    rows = [
        row
        for rep, rate in enumerate(images_per_s)
        for row in (
            {"rep": rep, "side": "ours", "seconds": 1.0, "images_per_s": rate, "allreduce_s_per_step": 0.01},
            {"rep": rep, "side": "ddp-gloo", "seconds": 1.0, "images_per_s": rate / 2},
        )
    ]
    cfg = from_mapping({"train": {"model": "resnet50", "image_size": 224}})
    out = {**record(), "spec": spec.record(), "config": cfg.to_dict(), "rows": rows}
    write_json_atomic(path, out | {"summary": summarise_train(rows, spec, world)})
    return path


@pytest.mark.parametrize(
    ("rate", "per_worker", "workers"),
    [(1025.4, 733.1, 2), (733.1, 733.1, 1), (2.1, 0.3, 7), (125.1, 100.0, 2), (99.0, 100.0, 1)],
)
def test_workers_needed_is_the_ceiling_of_the_ratio(rate, per_worker, workers):
    assert feed.workers_needed(rate, per_worker) == workers


@pytest.mark.parametrize("per_worker", [0.0, -5.0])
def test_a_rate_per_worker_that_is_not_positive_is_refused(per_worker):
    with pytest.raises(UserError, match="must be positive"):
        feed.workers_needed(100.0, per_worker)


def test_published_resnet50_rates_per_accelerator_and_the_workers_they_need():
    rows = [feed.need(r, 100.0) for r in feed.published(BASELINES, "resnet50")]
    by = {r["source"].split(" (")[0]: r for r in rows}
    assert set(by) == {"Goyal et al. 2017", "Cho et al. 2017", "Kumar et al. 2017", "Ying et al. 2018"}
    assert by["Goyal et al. 2017"]["images_per_s_per_accelerator"] == pytest.approx(32029 / 256)
    assert (by["Goyal et al. 2017"]["workers"], by["Goyal et al. 2017"]["cpus_per_task"]) == (2, 3)
    assert (by["Ying et al. 2018"]["workers"], by["Ying et al. 2018"]["cpus_per_task"]) == (11, 12)
    assert "TPU v3 Pod" in by["Ying et al. 2018"]["source"]


def test_the_most_demanding_published_rate_is_the_fastest_per_accelerator():
    top = feed.most_demanding(BASELINES, "resnet50", 733.1)
    assert top["source"].startswith("Ying et al. 2018")
    assert top["images_per_s_per_accelerator"] == pytest.approx(1_050_000 / 1024)
    assert (top["workers"], top["cpus_per_task"]) == (2, 3)
    assert feed.most_demanding(BASELINES, "resnet101", 733.1) is None  # its one entry gives no images/s
    assert feed.most_demanding(BASELINES, "resnet8", 733.1) is None


def test_a_bench_train_json_gives_our_rate_per_rank(tmp_path):
    path = bench_train_json(tmp_path / "bt.json", images_per_s=(400.0, 500.0, 450.0), world=4)
    row = feed.measured_rate(path)
    assert row["images_per_s_per_accelerator"] == pytest.approx(450.0 / 4)  # the median, per rank
    assert "ring" in row["source"]
    assert "4 ranks" in row["source"]
    assert "resnet50 224 px" in row["source"]
    rates = feed.rates("resnet50", BASELINES, path)
    assert len(rates) == 5
    assert rates[-1] == row
    assert feed.rates("resnet50", BASELINES, None) == rates[:-1]


@pytest.mark.parametrize(
    ("content", "named"),
    [
        ('{"summary": [{"loader": "shards"}]}', "summary.ours_images_per_s, summary.world_size, summary.algorithm"),
        ('{"summary": {"ours_images_per_s": 10.0, "algorithm": "ring"}}', "no summary.world_size;"),
        ('{"rows": []}', "no summary.ours_images_per_s"),
        ("[1, 2]", "not a bench-train result"),
        ("not json", "cannot read"),
    ],
)
def test_a_file_that_is_not_a_bench_train_result_is_named(tmp_path, content, named):
    path = tmp_path / "other.json"
    path.write_text(content)
    with pytest.raises(UserError) as err:
        feed.measured_rate(path)
    assert str(path) in str(err.value)
    assert named in str(err.value)


def loader_summary(shards_per_worker):
    """bench-loader's summary for the shards loader at {workers: images/s per worker} (torchvision at half)."""
    rows = []
    for workers, per_worker in shards_per_worker.items():
        for loader, rate in (("shards", per_worker), ("torchvision", per_worker / 2)):
            base = {"loader": loader, "workers": workers, "startup_s": 0.1, "peak_rss_mib": 1.0, "peak_pss_mib": 1.0}
            rows.append(base | {"rep": 0, "pass": "timed", "images_per_s": rate * max(1, workers)})
            rows.append(base | {"rep": 1, "pass": "memory", "images_per_s": 1.0, "data_mib": 1.0})
    return per_loader(rows)


def test_the_slowest_worker_of_our_loader_is_the_one_sized_by():
    low = feed.slowest_worker(loader_summary({1: 733.1, 2: 765.5, 4: 700.0}))
    assert low == {"loader": "shards", "workers": 4, "images_per_s_per_worker": pytest.approx(700.0)}
    with pytest.raises(UserError, match="no 'shards' loader rows"):
        feed.slowest_worker([r for r in loader_summary({1: 733.1}) if r["loader"] != "shards"])


def test_the_table_names_the_rate_its_sources_and_cpus_per_task(tmp_path):
    path = bench_train_json(tmp_path / "bt.json", images_per_s=(2000.0,), world=2)
    per_worker = feed.slowest_worker(loader_summary({1: 733.1, 2: 765.5}))
    t = feed.needed_workers(per_worker, 224, "resnet50", BASELINES, feed.rates("resnet50", BASELINES, path))
    assert [(r["workers"], r["cpus_per_task"]) for r in t["rows"]] == [(1, 2), (1, 2), (1, 2), (2, 3), (2, 3)]
    text = feed.format_table(t)
    assert "733.1 images/s of 224-px crops" in text
    assert "at 1 worker)" in text
    assert "1025.4       2         3  Ying et al. 2018 (TPU v3 Pod)" in text
    assert "1000.0       2         3  bench-train ours" in text
    empty = feed.format_table(feed.needed_workers(per_worker, 224, "resnet8", BASELINES, []))
    assert "no published images/s for resnet8" in empty


def test_bench_loader_refuses_a_bad_train_json_before_measuring(tmp_path):
    bad = tmp_path / "loader.json"
    bad.write_text('{"summary": []}')
    cmd = [sys.executable, "-m", "scalerepro.cli", "bench-loader", "--work", str(tmp_path / "work")]
    proc = subprocess.run(
        [*cmd, "--out", str(tmp_path / "x.json"), "--train-json", str(bad)], capture_output=True, text=True
    )
    assert proc.returncode == 2
    assert f"{bad} is not a bench-train result" in proc.stderr
    assert not (tmp_path / "work").exists()  # refused before generating any JPEG
