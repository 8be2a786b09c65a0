"""Analysis: time-to-accuracy, throughput, scaling efficiency, metrics and figures from real-shaped tables."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from scalerepro.analysis.analyze import analyze, mlperf_score, scaling, throughput, time_to_accuracy
from scalerepro.analysis.collect import collect
from scalerepro.analysis.plots import FIGURES, plot_all
from tests.conftest import REPO


def test_tta_is_first_eval_reaching_target():
    evals = pd.DataFrame({"elapsed_s": [10.0, 20.0, 30.0, 40.0], "top1": [0.3, 0.72, 0.65, 0.9]})
    assert time_to_accuracy(evals, 0.7) == 20.0
    assert time_to_accuracy(evals, 0.95) is None


def test_throughput_skips_first_epoch():
    epochs = pd.DataFrame({"epoch": [0, 1, 2, 3], "images_per_s": [10.0, 100.0, 110.0, 90.0]})
    assert throughput(epochs) == 100.0
    assert throughput(epochs.iloc[:1]) == 10.0


def test_scaling_efficiency_relative_to_smallest_count_with_medians_over_repetitions():
    runs = pd.DataFrame({"run": [f"r{i}" for i in range(5)], "setting": ["ring-g1"] * 5, "algorithm": ["ring"] * 5,
                         "bn_group": ["1"] * 5, "world_size": [4, 1, 2, 2, 2],
                         "images_per_s": [300.0, 100.0, 170.0, 180.0, 250.0], "tta_s": [9.0, 30.0, 20.0, None, 16.0],
                         "source": "measured"})
    other = runs.assign(setting="ring-gworld", bn_group="world", images_per_s=runs["images_per_s"] / 2)
    out = scaling(pd.concat([runs, other]))
    ring = out[out["setting"] == "ring-g1"].set_index("world_size")
    assert ring.loc[1, "efficiency"] == 1.0 and ring.loc[2, "runs"] == 3
    assert ring.loc[2, "efficiency"] == pytest.approx(0.9)  # median of 170, 180, 250
    assert ring.loc[4, "efficiency"] == pytest.approx(0.75)
    assert out[out["setting"] == "ring-gworld"].set_index("world_size").loc[1, "images_per_s"] == 50.0
    assert ring.loc[2, "tta_median_s"] == 18.0 and pd.isna(ring.loc[2, "tta_mlperf_s"])  # 3 runs: no MLPerf score


def test_mlperf_score_drops_fastest_and_slowest_and_counts_a_miss_as_slowest():
    assert mlperf_score(pd.Series([10.0, 50.0, 20.0, 30.0, 40.0])) == 30.0
    assert mlperf_score(pd.Series([10.0, None, 20.0, 30.0, 40.0])) == 30.0  # the run that missed is dropped
    assert mlperf_score(pd.Series([10.0, None, None, 30.0, 40.0])) is None  # a second miss stays in
    assert mlperf_score(pd.Series([10.0, 20.0, 30.0, 40.0])) is None  # fewer than 5 runs


def _fake_run(folder, algo, world, top1s, ips):
    """Write run.json + events.jsonl shaped exactly like `scalerepro train` writes them."""
    folder.mkdir(parents=True)
    t = 1_000_000
    ev = [{"key": "run_start", "time_ms": t, "event_type": "INTERVAL_START", "value": None, "metadata": {}}]
    for epoch, (acc, rate) in enumerate(zip(top1s, ips)):
        ev.append({"key": "epoch_start", "time_ms": t + 1, "event_type": "INTERVAL_START", "value": epoch, "metadata": {"epoch_num": epoch}})
        ev.append({"key": "step", "time_ms": t + 2, "event_type": "POINT_IN_TIME", "value": epoch,
                   "metadata": {"epoch_num": epoch, "batch": 64, "loss": 1.0, "data_s": 0.1, "fwd_bwd_s": 0.6,
                                "allreduce_s": 0.2, "optimizer_s": 0.1}})
        t += 10_000
        ev.append({"key": "epoch_stop", "time_ms": t, "event_type": "INTERVAL_END", "value": epoch,
                   "metadata": {"epoch_num": epoch, "seconds": 10.0, "images": 640, "images_per_s": rate}})
        ev.append({"key": "eval_accuracy", "time_ms": t + 500, "event_type": "POINT_IN_TIME", "value": acc,
                   "metadata": {"epoch_num": epoch, "top5": 1.0, "samples": 200}})
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))
    record = {"algorithm": algo, "world_size": world, "status": "success", "seconds": 40.0, "hosts": ["h"] * world,
              "final": {"top1": top1s[-1]},
              "config": {"train": {"model": "resnet8", "batch_per_rank": 32, "epochs": len(top1s), "target_top1": 0.7,
                                         "optimizer": "sgd"}}}
    (folder / "run.json").write_text(json.dumps(record))
    return folder / "run.json"


def test_collect_analyze_plot_end_to_end(tmp_path):
    runs = [_fake_run(tmp_path / "r1", "ring", 1, [0.5, 0.75, 0.8], [50, 100, 100]),
            _fake_run(tmp_path / "r2", "ring", 2, [0.4, 0.6, 0.71], [90, 160, 160])]
    bench = tmp_path / "bench.json"
    bench.write_text(json.dumps({"world_size": 2, "hosts": ["h", "h"], "rows": [
        {"algorithm": "ring", "bytes": 8, "count": 2, "dtype": "float32", "time_us": 10.0, "min_us": 9.0,
         "median_us": 9.5, "algbw_GBps": 0.0008, "busbw_GBps": 0.0008, "wrong": 0}]}))
    tables = collect(runs, [bench], tmp_path / "collect")
    assert len(tables["evals"]) == 6 and len(tables["steps"]) == 6
    costmodel = tmp_path / "costmodel.json"
    costmodel.write_text(json.dumps({"projection": [{"algorithm": "ring", "bytes": 102228128, "fit_regime": "dedicated",
                                                     "ms": 12.5, "ranks": 256, "source": "projected",
                                                     "topology": "fattree"}]}))
    (tmp_path / "r2" / "stage.json").write_text(json.dumps({"nodes": [
        {"splits": [{"split": "train", "seconds": 1.5}, {"split": "val", "seconds": 0.5}]},
        {"splits": [{"split": "train", "seconds": 2.5}]}]}))
    tables = collect(runs, [bench], tmp_path / "collect")
    metrics = analyze(tmp_path / "collect", REPO / "config" / "baselines.yaml", tmp_path / "metrics.json",
                      tmp_path / "analysis", costmodel)
    assert metrics["runs"]["ring-n2-g1-s0-r0"]["stage_s"] == 2.5 and metrics["runs"]["ring-n1-g1-s0-r0"]["stage_s"] is None
    assert metrics["runs"]["ring-n1-g1-s0-r0"]["tta_s"] == pytest.approx(20.5)
    assert metrics["runs"]["ring-n2-g1-s0-r0"]["tta_s"] == pytest.approx(30.5)
    assert metrics["scaling"]["ring-g1-n2"]["efficiency"] == pytest.approx(0.8)
    assert metrics["runs"]["ring-n2-g1-s0-r0"]["allreduce_share"] == pytest.approx(0.2)
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    comparison = pd.read_csv(tmp_path / "analysis" / "comparison.csv")
    assert set(comparison["source"]) == {"measured", "projected", "published"}
    assert comparison.loc[comparison["source"] == "projected", "allreduce_ms"].tolist() == [12.5]
    assert "arXiv 1811.06992" in set(comparison["cite"])
    figures = plot_all(tmp_path / "analysis", tmp_path / "plots")
    assert [f.name for f in figures] == list(FIGURES)
    assert all(f.stat().st_size > 10_000 and f.read_bytes()[:4] == b"\x89PNG" for f in figures)
