"""Analysis: time-to-accuracy, throughput, scaling efficiency, metrics and figures from real-shaped tables."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pandas as pd
import pytest

from scalerepro.analysis.analyze import (
    analyze,
    mlperf_score,
    scaling,
    step_parts,
    study_table,
    throughput,
    time_to_accuracy,
)
from scalerepro.analysis.collect import collect, run_tables
from scalerepro.analysis.plots import FIGURES, plot_all
from tests.support import REPO


def test_tta_is_first_eval_reaching_target():
    evals = pd.DataFrame({"elapsed_s": [10.0, 20.0, 30.0, 40.0], "top1": [0.3, 0.72, 0.65, 0.9]})
    assert time_to_accuracy(evals, 0.7) == 20.0
    assert time_to_accuracy(evals, 0.95) is None


def test_throughput_skips_first_epoch():
    epochs = pd.DataFrame({"epoch": [0, 1, 2, 3], "images_per_s": [10.0, 100.0, 110.0, 90.0]})
    assert throughput(epochs) == 100.0
    assert throughput(epochs.iloc[:1]) == 10.0


def test_scaling_efficiency_relative_to_smallest_count_with_medians_over_repetitions():
    runs = pd.DataFrame(
        {
            "run": [f"r{i}" for i in range(5)],
            "setting": ["ring-g1"] * 5,
            "algorithm": ["ring"] * 5,
            "bn_group": ["1"] * 5,
            "world_size": [4, 1, 2, 2, 2],
            "images_per_s": [300.0, 100.0, 170.0, 180.0, 250.0],
            "tta_s": [9.0, 30.0, 20.0, None, 16.0],
            "source": "measured",
        }
    )
    other = runs.assign(setting="ring-gworld", bn_group="world", images_per_s=runs["images_per_s"] / 2)
    out = scaling(pd.concat([runs, other]))
    ring = out[out["setting"] == "ring-g1"].set_index("world_size")
    assert ring.loc[1, "efficiency"] == 1.0
    assert ring.loc[2, "runs"] == 3
    assert ring.loc[2, "efficiency"] == pytest.approx(0.9)  # median of 170, 180, 250
    assert ring.loc[4, "efficiency"] == pytest.approx(0.75)
    assert out[out["setting"] == "ring-gworld"].set_index("world_size").loc[1, "images_per_s"] == 50.0
    assert ring.loc[2, "tta_median_s"] == 18.0
    assert pd.isna(ring.loc[2, "tta_mlperf_s"])


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
    for epoch, (acc, rate) in enumerate(zip(top1s, ips, strict=True)):
        ev.append(
            {
                "key": "epoch_start",
                "time_ms": t + 1,
                "event_type": "INTERVAL_START",
                "value": epoch,
                "metadata": {"epoch_num": epoch},
            }
        )
        ev.append(
            {
                "key": "step",
                "time_ms": t + 2,
                "event_type": "POINT_IN_TIME",
                "value": epoch,
                "metadata": {
                    "epoch_num": epoch,
                    "batch": 64,
                    "loss": 1.0,
                    "data_s": 0.1,
                    "fwd_bwd_s": 0.6,
                    "allreduce_s": 0.2,
                    "optimizer_s": 0.1,
                },
            }
        )
        t += 10_000
        ev.append(
            {
                "key": "epoch_stop",
                "time_ms": t,
                "event_type": "INTERVAL_END",
                "value": epoch,
                "metadata": {"epoch_num": epoch, "seconds": 10.0, "images": 640, "images_per_s": rate},
            }
        )
        ev.append(
            {
                "key": "eval_accuracy",
                "time_ms": t + 500,
                "event_type": "POINT_IN_TIME",
                "value": acc,
                "metadata": {"epoch_num": epoch, "top5": 1.0, "samples": 200},
            }
        )
    stop = {"status": "success", "target_top1": 0.7}
    ev.append({"key": "run_stop", "time_ms": t + 600, "event_type": "INTERVAL_END", "value": None, "metadata": stop})
    (folder / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in ev))
    record = {
        "algorithm": algo,
        "world_size": world,
        "status": "success",
        "seconds": 40.0,
        "hosts": ["h"] * world,
        "final": {"epoch": len(top1s) - 1, "top1": top1s[-1], "top5": 1.0},
        "config": {
            "train": {
                "model": "resnet8",
                "batch_per_rank": 32,
                "epochs": len(top1s),
                "target_top1": 0.7,
                "optimizer": "sgd",
            }
        },
    }
    (folder / "run.json").write_text(json.dumps(record))
    return folder / "run.json"


def test_collect_analyze_plot_end_to_end(tmp_path):
    runs = [
        _fake_run(tmp_path / "r1", "ring", 1, [0.5, 0.75, 0.8], [50, 100, 100]),
        _fake_run(tmp_path / "r2", "ring", 2, [0.4, 0.6, 0.71], [90, 160, 160]),
    ]
    bench = tmp_path / "bench.json"
    bench.write_text(
        json.dumps(
            {
                "world_size": 2,
                "hosts": ["h", "h"],
                "rows": [
                    {
                        "algorithm": "ring",
                        "bytes": 8,
                        "count": 2,
                        "dtype": "float32",
                        "time_us": 10.0,
                        "min_us": 9.0,
                        "median_us": 9.5,
                        "algbw_GBps": 0.0008,
                        "busbw_GBps": 0.0008,
                        "wrong": 0,
                    }
                ],
            }
        )
    )
    counts = collect(runs, [bench], tmp_path / "collect")
    assert counts["evals"] == 6
    assert counts["steps"] == 6
    assert len(pd.read_csv(tmp_path / "collect" / "steps.csv")) == 6
    costmodel = tmp_path / "costmodel.json"
    costmodel.write_text(
        json.dumps(
            {
                "projection": [
                    {
                        "algorithm": "ring",
                        "bytes": 102228128,
                        "fit_regime": "dedicated",
                        "ms": 12.5,
                        "ranks": 256,
                        "source": "projected",
                        "topology": "fattree",
                    }
                ]
            }
        )
    )
    (tmp_path / "r2" / "stage.json").write_text(
        json.dumps(
            {
                "nodes": [
                    {"splits": [{"split": "train", "seconds": 1.5}, {"split": "val", "seconds": 0.5}]},
                    {"splits": [{"split": "train", "seconds": 2.5}]},
                ]
            }
        )
    )
    collect(runs, [bench], tmp_path / "collect")
    metrics = analyze(
        tmp_path / "collect",
        REPO / "config" / "baselines.yaml",
        tmp_path / "metrics.json",
        tmp_path / "analysis",
        costmodel,
        studies=study_table({"main": ["ring-n1-g1-s0-r0", "ring-n2-g1-s0-r0"]}, {"main": "ring at 1, 2 ranks"}),
    )
    assert metrics["runs"]["ring-n2-g1-s0-r0"]["stage_s"] == 2.5
    assert metrics["runs"]["ring-n1-g1-s0-r0"]["stage_s"] is None
    assert metrics["runs"]["ring-n1-g1-s0-r0"]["tta_s"] == pytest.approx(20.5)
    assert metrics["runs"]["ring-n2-g1-s0-r0"]["tta_s"] == pytest.approx(30.5)
    assert metrics["scaling"]["ring-g1-n2"]["efficiency"] == pytest.approx(0.8)
    assert metrics["runs"]["ring-n2-g1-s0-r0"]["allreduce_share"] == pytest.approx(0.2)
    assert json.loads((tmp_path / "metrics.json").read_text()) == metrics
    comparison = pd.read_csv(tmp_path / "analysis" / "comparison.csv")
    assert set(comparison["source"]) == {"measured", "projected", "published"}
    assert comparison.loc[comparison["source"] == "projected", "allreduce_ms"].tolist() == [12.5]
    assert "arXiv 1811.06992" in set(comparison["cite"])
    papers = comparison.set_index("work")["paper"]  # a reproduced paper's own published rows name it
    assert (papers["Kumar et al. 2017"], papers["IBM DDL announcement 2017 (Caffe)"]) == (
        "Kumar et al. 2017",
        "Cho et al. 2017",
    )
    assert pd.isna(papers["Goyal et al. 2017"])
    studies = pd.read_csv(tmp_path / "analysis" / "studies.csv")
    assert studies.values.tolist() == [
        ["main", "ring at 1, 2 ranks", "ring-n1-g1-s0-r0"],
        ["main", "ring at 1, 2 ranks", "ring-n2-g1-s0-r0"],
    ]
    figures = plot_all(tmp_path / "analysis", tmp_path / "plots")
    assert [f.name for f in figures] == list(FIGURES)
    assert all(f.stat().st_size > 10_000 and f.read_bytes()[:4] == b"\x89PNG" for f in figures)


def test_time_to_accuracy_of_a_preempted_run_counts_training_not_the_wait(tmp_path):
    """Preempted after epoch 0, back 100 s later: TTA is 22.5 s of training; the 100 s are downtime."""
    run = _fake_run(tmp_path / "r", "ring", 2, [0.5, 0.75], [90, 160])
    events = [json.loads(line) for line in (run.parent / "events.jsonl").read_text().splitlines()]
    cut = next(i for i, e in enumerate(events) if e["key"] == "eval_accuracy") + 1
    stop = events[cut - 1]["time_ms"] + 1_500
    pause = [
        {"key": "run_preempted", "time_ms": stop, "event_type": "POINT_IN_TIME", "value": None, "metadata": {}},
        {"key": "run_resume", "time_ms": stop + 100_000, "event_type": "POINT_IN_TIME", "value": None, "metadata": {}},
    ]
    later = [e | {"time_ms": e["time_ms"] + 100_000 + 2_000} for e in events[cut:]]
    (run.parent / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events[:cut] + pause + later))
    tables = run_tables(run)
    assert tables["runs"][0]["downtime_s"] == pytest.approx(100.0)
    assert [e["elapsed_s"] for e in tables["evals"]] == [pytest.approx(10.5), pytest.approx(22.5)]
    collect([run], [], tmp_path / "collect")
    analyze(tmp_path / "collect", REPO / "config" / "baselines.yaml", tmp_path / "m.json", tmp_path / "a")
    assert json.loads((tmp_path / "m.json").read_text())["runs"]["ring-n2-g1-s0-r0"]["tta_s"] == pytest.approx(22.5)


def test_the_all_reduce_share_is_the_wait_a_step_paid_not_the_enqueue_time():
    """NCCL's calls return at once (busy ~0) and the step waits on the GPU: the share counts the wait."""
    steps = pd.DataFrame(
        {
            "data_s": [0.1, 0.1],
            "fwd_bwd_s": [0.5, 0.5],
            "allreduce_s": [0.001, 0.001],
            "allreduce_wait_s": [0.3, 0.3],
            "optimizer_s": [0.1, 0.1],
        }
    )
    parts = step_parts(steps)
    assert parts["allreduce_s"] == pytest.approx(0.6)
    assert parts.sum() == pytest.approx(2.0)
    assert step_parts(steps.drop(columns="allreduce_wait_s"))["allreduce_s"] == pytest.approx(0.002)


@pytest.mark.slow
def test_collect_holds_one_run_at_a_time(tmp_path):
    """100 runs x 20,000 logged steps (2 M step rows): collect stays under 500 MB resident."""
    template = _fake_run(tmp_path / "template", "ring", 4, [0.5, 0.75], [90, 160])
    events = [json.loads(line) for line in (template.parent / "events.jsonl").read_text().splitlines()]
    step = next(e for e in events if e["key"] == "step")
    many = events[:1] + [step | {"value": i} for i in range(20_000)] + events[1:]
    (tmp_path / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in many))
    runs = []
    for i in range(100):
        folder = tmp_path / f"r{i}"
        folder.mkdir()
        record = json.loads(template.read_text())
        record["config"]["train"]["seed"] = i
        (folder / "run.json").write_text(json.dumps(record))
        os.link(tmp_path / "events.jsonl", folder / "events.jsonl")  # one file on disk, 100 runs to read
        runs.append(str(folder / "run.json"))
    # VmHWM is this process image's peak; ru_maxrss would carry the forking pytest's size across exec.
    code = (
        "import re, sys; from pathlib import Path; from scalerepro.analysis.collect import collect; "
        "rows = collect([Path(p) for p in sys.argv[2:]], [], Path(sys.argv[1])); "
        "hwm = re.search(r'VmHWM:\\s+(\\d+)', Path('/proc/self/status').read_text()).group(1); "
        "print(rows['steps'], int(hwm) // 1024)"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path / "out"), *runs],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    )
    steps, peak_mib = map(int, proc.stdout.split())
    assert steps == 100 * sum(e["key"] == "step" for e in many)
    assert peak_mib < 500, f"collect peaked at {peak_mib} MiB"
