"""Checkpoint / resume: a run stopped by SIGTERM and rerun ends with the uninterrupted run's exact state."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from scalerepro.train.checkpoint import StopSignals
from scalerepro.train.events import EventLog, read_events
from tests.conftest import mpiexec

SETTINGS = ["--set", "train.epochs=3", "--set", "train.width=8", "--set", "train.batch_per_rank=8",
            "--set", "train.bn_group=world", "--set", "train.optimizer=lars", "--set", "loader.workers=1",
            "--set", "train.checkpoint_every=0"]


def train_args(shards: Path, out: Path, extra: list[str] = ()) -> list[str]:
    """Python arguments of the training command."""
    return ["-m", "scalerepro.cli", "train", "--algo", "ring", "--shards", str(shards), "--out", str(out), "--no-stage",
            *SETTINGS, *extra]


def steps_logged(out: Path) -> int:
    """Step events in the run's partial log so far."""
    partial = out / "events.jsonl.partial"
    return partial.read_text().count('"key": "step"') if partial.exists() else 0


def run_until_signalled(args: list[str], out: Path, after_steps: int) -> subprocess.CompletedProcess:
    """Start 2 ranks in their own process group; SIGTERM the whole group (as SLURM does) after some steps."""
    cmd = [mpiexec(), "-n", "2", sys.executable, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True)
    deadline = time.monotonic() + 120
    while steps_logged(out) < after_steps and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGTERM)
    stdout, stderr = proc.communicate(timeout=120)
    return subprocess.CompletedProcess(cmd, proc.returncode, stdout, stderr)


def final_state(out: Path) -> dict:
    """The checkpoint a finished run leaves."""
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)


@pytest.mark.mpi
def test_preempted_run_resumes_to_the_uninterrupted_state(run_mpi, tiny_shards, tmp_path):
    whole, cut = tmp_path / "whole", tmp_path / "cut"
    run_mpi(2, train_args(tiny_shards, whole))
    stopped = run_until_signalled(train_args(tiny_shards, cut), cut, after_steps=10)
    assert stopped.returncode == 128 + signal.SIGTERM, stopped.stderr
    assert "checkpoint written" in stopped.stderr and not (cut / "run.json").exists()
    assert final_state(cut)["progress"]["step"] >= 10

    other = run_mpi(2, train_args(tiny_shards, cut, ["--set", "train.lars_eta=0.002"]), check=False)
    assert other.returncode != 0 and "train.lars_eta: 0.001 there, 0.002 now" in other.stderr

    run_mpi(2, train_args(tiny_shards, cut))
    a, b = final_state(whole), final_state(cut)
    assert all(torch.equal(a["model"][k], b["model"][k]) for k in a["model"])
    assert a["progress"]["evals"] == b["progress"]["evals"] and a["progress"]["step"] == b["progress"]["step"]
    keys = [e["key"] for e in read_events(cut / "events.jsonl")]
    assert keys.count("run_start") == 1 and keys.count("run_stop") == 1 and keys[-1] == "run_stop"
    assert "run_preempted" in keys and "run_resume" in keys
    assert keys.count("step") == a["progress"]["step"]


def test_resumed_log_keeps_earlier_events_with_run_stop_renamed(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", enabled=True)
    log.start("run_start")
    log.end("run_stop", status="aborted")
    log.close()
    again = EventLog(tmp_path / "events.jsonl", enabled=True, resume=True)
    again.emit("run_resume")
    again.end("run_stop", status="success")
    again.finish()
    keys = [e["key"] for e in read_events(tmp_path / "events.jsonl")]
    assert keys == ["run_start", "run_interrupted", "run_resume", "run_stop"]


def test_stop_signal_is_agreed_over_ranks():
    signals = StopSignals()
    try:
        assert signals.agreed(lambda flags: None) == 0
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.received == signal.SIGUSR1
        assert signals.agreed(lambda flags: np.add(flags, 1, out=flags)) == signal.SIGTERM  # another rank got SIGTERM
    finally:
        signals.restore()
