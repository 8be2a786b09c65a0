"""``auto``: the fixed rule, and choices read from a bench JSON (measured curves, fits elsewhere)."""

from __future__ import annotations

import json

import pytest

from scalerepro.comm.auto import Tuner, interpolate, rule, smooth
from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import allreduce, resolve, select
from scalerepro.errors import UserError


def bench_json(path, world, curves, device="cpu", schedule_as=None):
    """A minimal `scalerepro bench` record: per algorithm a {bytes: us} curve."""
    rows = [
        {
            "algorithm": a,
            "bytes": b,
            "time_us": t,
            "wrong": 0,
            "schedule": {"algorithm": a, **({"as": schedule_as[a]} if schedule_as and a in schedule_as else {})},
        }
        for a, curve in curves.items()
        for b, t in curve.items()
    ]
    path.write_text(
        json.dumps(
            {
                "world_size": world,
                "device": device,
                "rows": rows,
                "reduction_s_per_byte": 1e-10,
                "params": {"colors": 2, "grid": []},
                "nodes": [0] * world,
            }
        )
    )
    return str(path)


def test_fixed_rule():
    assert rule(8, 2, "cpu") == "ring"
    assert rule(1 << 30, 2, "cpu") == "ring"
    assert rule(8192, 4, "cpu") == "rabenseifner"
    assert rule(64 << 20, 4, "cpu") == "multicolor-ring"
    assert rule(8, 4, "cuda") == "nccl"


def test_tuner_picks_the_least_measured_time_per_size(tmp_path):
    sizes = [1 << k for k in range(3, 23)]
    curves = {"native": {b: 10 + b * 1e-3 for b in sizes}, "ring": {b: 30 + b * 2e-4 for b in sizes}}
    tuner = Tuner.load(bench_json(tmp_path / "b.json", 4, curves))
    assert tuner.choose(64, 4, "cpu") == "native"
    assert tuner.choose(4 << 20, 4, "cpu") == "ring"
    crossover = 20 / (1e-3 - 2e-4)  # 25 KB: where the two lines meet
    assert tuner.choose(int(crossover * 0.7), 4, "cpu") == "native"
    assert tuner.choose(int(crossover * 1.5), 4, "cpu") == "ring"


def test_one_noisy_point_does_not_decide(tmp_path):
    sizes = [1 << k for k in range(3, 12)]
    curves = {"native": dict.fromkeys(sizes, 20.0), "ring": dict.fromkeys(sizes, 10.0)}
    curves["ring"][256] = 500.0  # a scheduler tick during ring's loop at 256 B
    tuner = Tuner.load(bench_json(tmp_path / "b.json", 4, curves))
    assert tuner.choose(256, 4, "cpu") == "ring"


def test_rows_that_ran_as_another_algorithm_count_for_it(tmp_path):
    sizes = [1 << k for k in range(3, 12)]
    curves = {
        "ring": dict.fromkeys(sizes, 50.0),
        "multicolor-ring": dict.fromkeys(sizes, 10.0),
        "native": dict.fromkeys(sizes, 30.0),
    }
    tuner = Tuner.load(bench_json(tmp_path / "b.json", 2, curves, schedule_as={"multicolor-ring": "ring"}))
    assert tuner.choose(256, 2, "cpu") == "ring"  # multicolor-ring on 2 ranks is the ring: its fast loop was the ring's


def test_other_rank_counts_use_the_fitted_schedule_costs(tmp_path):
    sizes = [1 << k for k in range(3, 23)]
    curves = {"native": {b: 10 + b * 1e-3 for b in sizes}, "ring": {b: 30 + b * 2e-4 for b in sizes}}
    tuner = Tuner.load(bench_json(tmp_path / "b.json", 4, curves))
    assert tuner.predict("ring", 1 << 20, 8) is not None
    assert tuner.choose(64 << 20, 8, "cpu") in ("native", "ring")


def test_tuning_errors_name_the_file_and_the_fix(tmp_path):
    with pytest.raises(UserError, match="comm.tuning=.*nothing.json: not a readable `scalerepro bench` JSON"):
        Tuner.load(str(tmp_path / "nothing.json"))
    tuner = Tuner.load(bench_json(tmp_path / "b.json", 2, {"ring": {8: 1.0, 16: 2.0}}))
    with pytest.raises(UserError, match="measured on cpu buffers.*bench with --device cuda"):
        tuner.choose(8, 2, "cuda")


def test_interpolation_is_log_log_and_clamped():
    curve = ((8, 1e-6), (32, 4e-6))
    assert interpolate(curve, 16) == pytest.approx(2e-6)
    assert interpolate(curve, 1) == 1e-6
    assert interpolate(curve, 64) == pytest.approx(8e-6)
    assert smooth([(1, 1.0), (2, 9.0), (3, 2.0), (4, 3.0)]) == ((1, 1.0), (2, 2.0), (3, 2.0), (4, 3.0))


def test_auto_runs_its_choice_and_records_it(tmp_path):
    import numpy as np

    path = bench_json(tmp_path / "b.json", 1, {"ring": {8: 1.0}})
    with Context(params=CommParams(tuning=path)) as ctx:
        buf = np.ones(4, dtype=np.float32)
        assert allreduce(buf, "auto", ctx) is buf
        assert resolve(buf, select("auto"), ctx).algorithm == "ring"  # alone: nothing to tune
