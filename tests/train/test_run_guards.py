"""What a user can do to a run that must not lose or corrupt it: stop signals at any moment, a second trainer on
the same folder, a resume whose log lost steps, a finished run's files cut short, a diverging loss, a batch larger
than the data."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from scalerepro.train.events import read_events
from tests.support import cli, mpiexec
from tests.train.test_checkpoint import final_state, train_args

ENV = {**os.environ, "OMP_NUM_THREADS": "1"}
BOOKKEEPING = ("train.lock", "ranks.json")  # who holds the folder, which pids run it: rewritten by every attempt
STEPS = 24  # tiny_shards at 2 ranks: 3 epochs of 8 steps (60 samples per rank, 8 per batch)
# When to signal each segment of the run: once it has resumed and the log holds `count` events `key` in all, after
# `delay_s`: inside epochs, at an epoch's last step, during an evaluation (after epoch_stop), while a resumed pass's
# workers start (right after run_resume), in each of the three signals.
MOMENTS = [
    ("step", 1, 0.0, signal.SIGTERM),
    ("step", 3, 0.02, signal.SIGUSR1),
    ("step", 7, 0.0, signal.SIGINT),
    ("epoch_stop", 1, 0.0, signal.SIGTERM),
    ("run_resume", 0, 0.0, signal.SIGUSR1),
    ("step", 13, 0.0, signal.SIGINT),
    ("epoch_stop", 2, 0.01, signal.SIGTERM),
    ("step", 18, 0.0, signal.SIGUSR1),
    ("step", 19, 0.02, signal.SIGINT),
    ("step", 21, 0.0, signal.SIGTERM),
]


def launch(args: list[str], ranks: int = 2) -> subprocess.Popen:
    """``ranks`` ranks of ``python args`` in their own process group, as SLURM's job step or a terminal has them."""
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, *args]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=ENV, start_new_session=True
    )


def signal_at(
    args: list[str], out: Path, segment: int, moment: tuple[str, int, float, int]
) -> subprocess.CompletedProcess:
    """Run segment ``segment`` (0: the first) until the moment, signal its whole process group; the outcome."""
    key, count, delay_s, signum = moment
    proc = launch(args)
    deadline = time.monotonic() + 120
    while not logged(out, segment, key, count) and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.005)
    time.sleep(delay_s)
    os.killpg(proc.pid, signum)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def logged(out: Path, segment: int, key: str, count: int) -> bool:
    """Segment ``segment`` of the run has resumed (logged its run_resume) and the log holds ``count`` events
    ``key``."""
    partial = out / "events.jsonl.partial"
    text = partial.read_text() if partial.exists() else ""
    return text.count('"key": "run_resume"') >= segment and text.count(f'"key": "{key}"') >= count


def run(args: list[str], ranks: int = 2) -> subprocess.CompletedProcess:
    """Run ``python args`` on ``ranks`` ranks to its end."""
    cmd = [mpiexec(), "-n", str(ranks), sys.executable, *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=ENV, timeout=300)


@pytest.mark.faults
@pytest.mark.mpi
def test_stop_signals_to_the_process_group_at_ten_moments_checkpoint_and_resume_bit_identical(tiny_shards, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    assert run(train_args(tiny_shards, whole)).returncode == 0
    args = train_args(tiny_shards, cut)
    stopped_at = []
    for segment, moment in enumerate(MOMENTS):
        stopped = signal_at(args, cut, segment, moment)
        assert stopped.returncode == 128 + moment[-1], (moment, stopped_at, stopped.stderr[-3000:])
        assert f"stopped by {signal.Signals(moment[-1]).name}; checkpoint written" in stopped.stderr
        assert "Traceback" not in stopped.stderr
        assert "killed by signal" not in stopped.stderr
        stopped_at.append(final_state(cut)["progress"]["step"])
    print(f"stop checkpoints at steps {stopped_at} of {STEPS}")
    assert stopped_at == sorted(set(stopped_at))  # each segment trained at least one step before its stop
    assert stopped_at[-1] < STEPS

    log_behind_checkpoint_is_refused_untouched(tiny_shards, cut, tmp_path / "behind")
    other = run(train_args(tiny_shards, cut, "train.lars_eta=0.002"))
    assert other.returncode == 2
    assert "train.lars_eta: 0.001 there, 0.002 now" in other.stderr
    assert run(args).returncode == 0
    a, b = final_state(whole), final_state(cut)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["progress"]["evals"] == b["progress"]["evals"]
    keys = [e["key"] for e in read_events(cut / "events.jsonl")]
    assert keys.count("run_start") == 1
    assert keys[-1] == "run_stop"
    assert keys.count("run_preempted") == len(MOMENTS)
    assert keys.count("run_resume") == len(MOMENTS)


def log_behind_checkpoint_is_refused_untouched(shards: Path, stopped: Path, copy: Path) -> None:
    """A stopped run whose partial log lost its last steps: the resume is refused, and changes no file."""
    shutil.copytree(stopped, copy)
    partial = copy / "events.jsonl.partial"
    lines = partial.read_text().splitlines(keepends=True)
    last_step = max(i for i, line in enumerate(lines) if '"key": "step"' in line)
    partial.write_text("".join(lines[:last_step]))
    before = {p.name: p.read_bytes() for p in copy.iterdir() if p.name not in BOOKKEEPING}
    refused = run(train_args(shards, copy))
    assert refused.returncode == 2, refused.stderr[-2000:]
    assert refused.stderr.count(f"the checkpoint in {copy} is at step ") == 1
    assert "resuming would give a log that lacks what the checkpoint holds" in refused.stderr
    assert {p.name: p.read_bytes() for p in copy.iterdir() if p.name not in BOOKKEEPING} == before


@pytest.mark.faults
@pytest.mark.mpi
def test_a_second_trainer_on_a_running_folder_is_refused_and_the_first_finishes_whole(tiny_shards, tmp_path):
    out = tmp_path / "run"
    first = launch(train_args(tiny_shards, out, "train.epochs=12"))
    deadline = time.monotonic() + 120
    while not (out / "ranks.json").exists() and first.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    holder = json.loads((out / "ranks.json").read_text())["ranks"][0]
    second = run(train_args(tiny_shards, out, "train.epochs=12"), ranks=1)
    _, stderr = first.communicate(timeout=300)
    assert first.returncode == 0, stderr[-3000:]
    assert second.returncode == 2
    assert f"the run folder {out} is in use by another trainer (pid {holder['pid']} on {holder['host']} since" in (
        second.stderr
    )
    assert "Traceback" not in second.stderr
    keys = [e["key"] for e in read_events(out / "events.jsonl")]
    assert keys.count("eval_accuracy") == 12
    assert keys.count("run_start") == 1
    assert keys[-1] == "run_stop"
    assert "run_resume" not in keys


@pytest.mark.faults
@pytest.mark.mpi
def test_a_finished_run_cut_short_is_refused_by_train_collect_and_mlperf_log(tiny_shards, tmp_path):
    out = tmp_path / "run"
    assert run(train_args(tiny_shards, out), ranks=1).returncode == 0
    log = out / "events.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    log.write_text("".join(lines[: len(lines) // 2]))
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name not in BOOKKEEPING}
    named = f"{log} does not match {out / 'run.json'}: the log ends without run_stop, after epoch "
    again = run(train_args(tiny_shards, out), ranks=1)
    collect = cli("collect", "--runs", str(out / "run.json"), "--out", str(tmp_path / "tables"))
    mlperf = cli("mlperf-log", "--runs", str(out), "--out", str(tmp_path / "mlperf"))
    for proc in (again, collect, mlperf):
        assert proc.returncode == 2, proc.stderr[-2000:]
        assert named in proc.stderr
        assert "Traceback" not in proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name not in BOOKKEEPING} == before
    assert not list((tmp_path / "mlperf").glob("*.txt"))


@pytest.mark.mpi
def test_a_diverging_run_stops_at_the_step_names_the_learning_rate_and_is_recorded_diverged(tiny_shards, tmp_path):
    out = tmp_path / "run"
    proc = run(train_args(tiny_shards, out, "train.base_lr=1.0e+9", "train.epochs=20"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr.count("the training loss became nan at step ") == 1
    assert "lower train.base_lr" in proc.stderr
    record = json.loads((out / "run.json").read_text())
    events = read_events(out / "events.jsonl")
    assert record["status"] == "diverged"
    assert events[-1]["metadata"]["status"] == "diverged"
    steps = [e for e in events if e["key"] == "step"]
    assert str(steps[-1]["metadata"]["loss"]) == "nan"
    assert len(steps) < 8
    tables = cli("collect", "--runs", str(out / "run.json"), "--out", str(tmp_path / "tables"))
    assert tables.returncode == 0, tables.stderr
    assert "diverged" in (tmp_path / "tables" / "runs.csv").read_text()


@pytest.mark.mpi
def test_a_batch_larger_than_each_ranks_data_is_refused_once_with_both_counts(tiny_shards, tmp_path):
    proc = run(train_args(tiny_shards, tmp_path / "run", "train.batch_per_rank=100"))
    assert proc.returncode == 2
    assert proc.stderr.count("train.batch_per_rank 100 is more than the 60 training samples each of the 2 ranks") == 1
    assert "Traceback" not in proc.stderr
