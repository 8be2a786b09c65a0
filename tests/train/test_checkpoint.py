"""Checkpoint / resume: a run stopped by SIGTERM and rerun ends with the uninterrupted run's exact state."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

from scalerepro.config import from_mapping
from scalerepro.train.events import EventLog, read_events
from scalerepro.train.loop import RunSpec, resume_key
from scalerepro.train.runfolder import StopSignals
from tests import support

SETTINGS = (
    "train.epochs=3",
    "train.width=8",
    "train.batch_per_rank=8",
    "train.bn_group=world",
    "train.optimizer=lars",
    "loader.workers=1",
    "train.checkpoint_every=0",
)


def train_args(shards: Path, out: Path, *extra: str) -> list[str]:
    """Python arguments of the training command: SETTINGS, then ``extra`` settings."""
    return support.train_args(shards, out, *SETTINGS, *extra)


def steps_logged(out: Path) -> int:
    """Step events in the run's partial log so far."""
    partial = out / "events.jsonl.partial"
    return partial.read_text().count('"key": "step"') if partial.exists() else 0


def mid_epoch(out: Path) -> bool:
    """The run has checkpointed and is a few steps past its last checkpoint."""
    partial = out / "events.jsonl.partial"
    if not partial.exists():
        return False
    events = read_events(partial)
    saved = [e["value"] for e in events if e["key"] == "checkpoint"]
    return bool(saved) and sum(e["key"] == "step" for e in events) >= saved[-1] + 2


def final_state(out: Path) -> dict:
    """The checkpoint a finished run leaves."""
    return torch.load(out / "checkpoint.pt", map_location="cpu", weights_only=True)


def test_resumed_log_keeps_earlier_events_with_run_stop_renamed(tmp_path):
    log = EventLog(tmp_path / "events.jsonl", enabled=True)
    log.start("run_start")
    log.end("run_stop", status="aborted")
    log.close()
    again = EventLog(tmp_path / "events.jsonl", enabled=True, resume=True)
    assert again.resume(0) is None
    again.emit("run_resume")
    again.end("run_stop", status="success")
    again.finish()
    keys = [e["key"] for e in read_events(tmp_path / "events.jsonl")]
    assert keys == ["run_start", "run_interrupted", "run_resume", "run_stop"]


def test_stop_signal_is_agreed_over_ranks():
    signals = StopSignals()
    try:
        assert signals.agreed(lambda _: None) == (0, False)
        assert signals.agreed(lambda _: None, diverged=True) == (0, True)
        os.kill(os.getpid(), signal.SIGUSR1)
        assert signals.received == signal.SIGUSR1
        # another rank got SIGTERM and saw a non-finite loss
        assert signals.agreed(lambda flags: np.add(flags, 1, out=flags)) == (signal.SIGTERM, True)
        os.kill(os.getpid(), signal.SIGINT)
        assert signals.received == signal.SIGINT
    finally:
        signals.restore()


# MPI is started first (its shared-memory segments are bigger than the limit), then the limit is set.
LIMITED = (
    "import resource, signal, sys; from mpi4py import MPI; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]),) * 2); from scalerepro.cli import main; "
    "sys.exit(main(sys.argv[2:]))"
)


def single_rank(args: list[str], limit_bytes: int | None = None) -> subprocess.CompletedProcess:
    """One training process; with ``limit_bytes``, no file it writes may grow past that (RLIMIT_FSIZE: a full disk)."""
    cmd = (
        [sys.executable, *args] if limit_bytes is None else [sys.executable, "-c", LIMITED, str(limit_bytes), *args[2:]]
    )
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.faults
def test_full_disk_at_a_checkpoint_keeps_the_previous_one_and_the_rerun_resumes(tiny_shards, tmp_path):
    out = tmp_path / "run"
    args = train_args(tiny_shards, out, "train.checkpoint_every=1", "loader.workers=0")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    first = subprocess.Popen([sys.executable, *args], stderr=subprocess.PIPE, text=True, env=env)
    while steps_logged(out) < 3 and first.poll() is None:
        time.sleep(0.02)
    first.send_signal(signal.SIGTERM)
    assert first.wait(timeout=120) == 128 + signal.SIGTERM, first.stderr.read()
    before = (out / "checkpoint.pt").read_bytes()

    t0 = time.monotonic()
    full = single_rank(args, limit_bytes=len(before) // 2)
    print(f"full disk: run failed {time.monotonic() - t0:.2f} s after it started: {full.stderr.strip()[-300:]}")
    assert full.returncode == 2, full.stderr
    assert f"could not write {out / 'checkpoint.pt'}" in full.stderr
    assert "the previous version is intact" in full.stderr
    assert "Free space in" in full.stderr
    assert "Traceback" not in full.stderr
    assert (out / "checkpoint.pt").read_bytes() == before
    assert not list(out.glob(".*partial"))
    assert not (out / "run.json").exists()

    done = single_rank(args)
    assert done.returncode == 0, done.stderr
    assert json.loads((out / "run.json").read_text())["resumed"]


def _key(algo: str = "ring", **sets: object) -> dict:
    """The resume key of a run at 4 ranks with ``sets`` (section__key=value) over the defaults."""
    raw: dict = {}
    for dotted, value in sets.items():
        section, key = dotted.split("__")
        raw.setdefault(section, {})[key] = value
    spec = RunSpec(config=from_mapping(raw), algorithm=algo, train_dir=Path("t"), val_dir=Path("v"), out=Path("o"))
    return resume_key(spec, 4, "sha")


@pytest.mark.parametrize(
    "harmless",
    [
        {"comm__timeout_s": 900},
        {"loader__workers": 4},
        {"loader__prefetch": 6},
        {"train__overlap": True},
        {"train__bucket_mib": 1},
        {"train__threads_per_rank": 1},
        {"train__eval_every": 2},
        {"train__checkpoint_every": 3},
        {"train__target_top1": 0.9},
        {"train__ranks": [8]},
        {"comm__chunk_bytes": 4096},
        {"algo": "multicolor"},
        {"algo": "torus2d"},
    ],
)
def test_settings_that_leave_the_maths_alone_keep_the_checkpoint(harmless):
    assert _key(**harmless) == _key()


@pytest.mark.parametrize(
    "changed",
    [
        {"train__base_lr": 0.2},
        {"train__seed": 1},
        {"train__bn_group": 2},
        {"train__batch_per_rank": 16},
        {"train__model": "resnet18"},
        {"train__optimizer": "lars"},
        {"train__epochs": 9},
        {"train__weight_decay": 1e-4},
        {"train__lr_schedule": "step"},
        {"loader__crop_scale": [0.35, 1.0]},
        {"train__label_smoothing": 0.1},
    ],
)
def test_settings_that_change_the_maths_refuse_the_checkpoint(changed):
    assert _key(**changed) != _key()


READ_CHECK = str(Path(__file__).with_name("checkpoint_read_check.py"))


@pytest.mark.mpi
@pytest.mark.parametrize(("ranks", "nodes"), [(3, 1), (4, 2)])
def test_one_rank_per_node_reads_the_checkpoint_and_each_rank_gets_its_own_buffers(run_mpi, tmp_path, ranks, nodes):
    env = {"MPIR_CVAR_NUM_CLIQUES": str(nodes)} if nodes > 1 else {}  # MPICH's emulated nodes
    out = run_mpi(ranks, [READ_CHECK, str(tmp_path)], env=env, timeout=300).stdout
    assert f"OK {nodes}" in out, out


def damaged(path: Path, how: str) -> None:
    """Damage the checkpoint at ``path`` in one of the ways a disk, a copy or a person can."""
    good = path.read_bytes()
    if how == "garbage":
        path.write_bytes(os.urandom(len(good)))
    elif how == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif how == "other-file":  # a torch file of something else
        torch.save({"model": {}, "note": "not a checkpoint"}, path)
    elif how == "fewer-ranks":  # shaped right, but with one rank's buffers fewer than the run has
        state = torch.load(path, map_location="cpu", weights_only=True)
        state["buffers_per_rank"] = state["buffers_per_rank"][:-1]
        torch.save(state, path)


@pytest.mark.faults
def test_a_finished_run_is_left_byte_identical_by_a_rerun_and_a_damaged_checkpoint_gets_one_message(
    tiny_shards, tmp_path
):
    out = tmp_path / "run"
    args = train_args(tiny_shards, out, "train.epochs=1", "loader.workers=0")
    assert single_rank(args).returncode == 0
    finished = {name: (out / name).read_bytes() for name in ("run.json", "events.jsonl")}
    damaged(out / "checkpoint.pt", "garbage")
    again = single_rank(args)
    assert again.returncode == 0, again.stderr
    assert "has finished (run.json, events.jsonl); left as it is" in again.stderr
    assert {name: (out / name).read_bytes() for name in finished} == finished
    assert not (out / "events.jsonl.partial").exists()

    (out / "run.json").unlink()  # no longer finished: the rerun resumes from the checkpoint, which is damaged
    for how in ("garbage", "truncated", "other-file"):
        damaged(out / "checkpoint.pt", how)
        failed = single_rank(args)
        assert failed.returncode == 2, failed.stderr
        assert "Traceback" not in failed.stderr
        assert "weights_only" not in failed.stderr
        assert failed.stderr.strip().endswith(
            f"checkpoint {out / 'checkpoint.pt'} cannot be read (damaged, or not a checkpoint scalerepro wrote); "
            "delete it to start the run over, or put back a good copy to resume"
        ), how


@pytest.mark.faults
@pytest.mark.mpi
def test_a_checkpoint_missing_a_ranks_buffers_gets_the_same_message_on_every_rank(run_mpi, tiny_shards, tmp_path):
    out = tmp_path / "run"
    args = train_args(tiny_shards, out, "train.epochs=1", "loader.workers=0")
    run_mpi(2, args)
    (out / "run.json").unlink()
    damaged(out / "checkpoint.pt", "fewer-ranks")
    failed = run_mpi(2, args, check=False, timeout=120)
    assert failed.returncode != 0
    assert "cannot be read (damaged, or not a checkpoint scalerepro wrote)" in failed.stderr
    assert "Traceback" not in failed.stderr
