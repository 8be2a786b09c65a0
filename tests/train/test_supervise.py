"""Faults during training: a rank killed or frozen mid-run ends the job quickly, names the rank and step, resumes."""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from scalerepro.train.events import read_events
from scalerepro.train.supervise import Watch, report
from tests.support import mpiexec, train_args
from tests.train.test_checkpoint import mid_epoch

TIMEOUT_S = 30  # comm.timeout_s of these runs: a failure must be detected well within it


def train_cmd(shards: Path, out: Path, timeout_s: float = TIMEOUT_S) -> list[str]:
    """2 ranks of ring training, 6 epochs, a checkpoint after every epoch."""
    settings = ("train.epochs=6", "train.width=8", "train.batch_per_rank=8", "train.checkpoint_every=1")
    return [
        mpiexec(),
        "-n",
        "2",
        sys.executable,
        *train_args(shards, out, *settings, "loader.workers=1", f"comm.timeout_s={timeout_s}"),
    ]


def supervised(shards: Path, out: Path, timeout_s: float = TIMEOUT_S) -> subprocess.Popen:
    """`scalerepro supervise` around the training launcher, in its own session (as a job is)."""
    cmd = [
        sys.executable,
        "-m",
        "scalerepro.cli",
        "supervise",
        "--run-dir",
        str(out),
        "--",
        *train_cmd(shards, out, timeout_s),
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, start_new_session=True
    )


def wait_mid_epoch(proc: subprocess.Popen, out: Path) -> dict:
    """Block until the first checkpoint exists and a few steps of the next epoch ran; rank 1's process."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline and proc.poll() is None:
        if mid_epoch(out):
            return json.loads((out / "ranks.json").read_text())["ranks"][1]
        time.sleep(0.02)
    os.killpg(proc.pid, signal.SIGKILL)
    raise AssertionError(f"training never reached its second epoch: {proc.communicate()[1][-3000:]}")


@pytest.mark.faults
@pytest.mark.mpi
def test_killed_rank_ends_the_job_names_it_and_the_rerun_resumes(run_mpi, tiny_shards, tmp_path):
    out = tmp_path / "run"
    proc = supervised(tiny_shards, out)
    victim = wait_mid_epoch(proc, out)
    killed = time.monotonic()
    os.kill(victim["pid"], signal.SIGKILL)
    _, stderr = proc.communicate(timeout=TIMEOUT_S + 30)
    detect_s = time.monotonic() - killed
    print(f"rank killed: job ended {detect_s:.2f} s later\n{stderr[-1500:]}")
    assert proc.returncode not in (0, 128 + signal.SIGTERM), stderr
    assert detect_s < TIMEOUT_S, stderr
    assert f"rank 1 (pid {victim['pid']} on {victim['host']}) exited first" in stderr, stderr
    step = re.search(r"last step logged: epoch (\d+), step (\d+)", stderr)
    resume = re.search(r"loads: it resumes at epoch (\d+), batch 0 \(step (\d+)\)", stderr)
    assert step, stderr
    assert resume, stderr
    assert int(step[1]) >= int(resume[1]) >= 1, stderr
    assert int(step[2]) >= int(resume[2]), stderr
    assert not (out / "run.json").exists()
    assert not (out / "events.jsonl").exists()

    run_mpi(2, train_cmd(tiny_shards, out)[4:])
    record = json.loads((out / "run.json").read_text())
    assert record["resumed"]
    assert record["final"]["epoch"] == 5
    keys = [e["key"] for e in read_events(out / "events.jsonl")]
    assert keys.count("run_start") == 1
    assert keys.count("run_resume") == 1
    assert keys[-1] == "run_stop"
    assert [e for e in read_events(out / "events.jsonl") if e["key"] == "eval_accuracy"][-1]["metadata"][
        "epoch_num"
    ] == 5


@pytest.mark.faults
@pytest.mark.mpi
def test_frozen_rank_is_named_with_its_step_by_the_watchdog(tiny_shards, tmp_path):
    out = tmp_path / "run"
    timeout_s = 5
    proc = supervised(tiny_shards, out, timeout_s)
    victim = wait_mid_epoch(proc, out)
    frozen = time.monotonic()
    os.kill(victim["pid"], signal.SIGSTOP)
    try:
        _, stderr = proc.communicate(timeout=timeout_s + 60)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(victim["pid"], signal.SIGKILL)
    detect_s = time.monotonic() - frozen
    print(f"rank frozen: job ended {detect_s:.2f} s later")
    assert proc.returncode != 0
    assert f"rank(s) [1] on {victim['node']} did not answer (died or hung, or their node was lost)" in stderr, stderr
    assert re.search(r", epoch \d+, step \d+\) did not finish", stderr), stderr
    assert f"comm.timeout_s={timeout_s} s" in stderr, stderr
    assert detect_s < timeout_s + 15, stderr


def test_report_without_a_local_death_points_at_the_messages_above(tmp_path):
    text = report(1, Watch(tmp_path), time.monotonic(), tmp_path)
    assert "exit code 1" in text
    assert "no rank on this host exited" in text
    assert "no training step was logged" in text
    assert "a rerun starts from the beginning" in text


def test_damaged_checkpoint_is_reported_with_the_fix(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"not a checkpoint")
    text = report(-9, Watch(tmp_path), time.monotonic(), tmp_path)
    assert "killed by SIGKILL" in text
    assert "does not load" in text
    assert "delete it to start over" in text


def test_supervise_passes_the_exit_status_through(tmp_path):
    from scalerepro.cli import main

    assert main(["supervise", "--run-dir", str(tmp_path), "--", sys.executable, "-c", "raise SystemExit(0)"]) == 0
    assert main(["supervise", "--run-dir", str(tmp_path), "--", sys.executable, "-c", "raise SystemExit(7)"]) == 7
    assert main(["supervise", "--run-dir", str(tmp_path), "--", "no-such-launcher-xyz"]) == 2


def supervise_cli(run_dir: Path, start_timeout: str, code: str) -> subprocess.CompletedProcess:
    """`scalerepro supervise --start-timeout` around a Python launcher stand-in running ``code``."""
    cmd = [sys.executable, "-m", "scalerepro.cli", "supervise", "--run-dir", str(run_dir)]
    cmd += ["--start-timeout", start_timeout, "--", sys.executable, "-c", code]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=90)


def test_a_launch_whose_ranks_never_start_is_stopped_and_explained(tmp_path):
    """No ranks.json within --start-timeout (MPI_Init stuck in the launcher's PMI): launcher ended, exit 124."""
    pid_file = tmp_path / "launcher.pid"
    hang = f"import os, time; open({str(pid_file)!r}, 'w').write(str(os.getpid())); time.sleep(300)"
    begun = time.monotonic()
    proc = supervise_cli(tmp_path, "1.5", hang)
    assert proc.returncode == 124, proc.stderr
    assert time.monotonic() - begun < 30
    assert "the ranks did not start within 1.5 s (rank 0 wrote no ranks.json)" in proc.stderr, proc.stderr
    assert "MPI_Init did not finish" in proc.stderr
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


def test_a_launcher_deaf_to_sigterm_is_killed_after_the_grace(tmp_path, monkeypatch, capsys):
    from scalerepro.train import supervise as sv

    monkeypatch.setattr(sv, "STOP_GRACE_S", 0.5)
    deaf = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"
    begun = time.monotonic()
    assert sv.supervise([sys.executable, "-c", deaf], tmp_path, start_timeout_s=1.0) == 124
    assert time.monotonic() - begun < 20
    assert "did not start within 1 s" in capsys.readouterr().err


def test_ranks_that_started_are_not_stopped_by_the_start_timeout(tmp_path):
    """Rank 0 wrote ranks.json before the deadline: the launch runs past it and its status passes through."""
    started = (
        f"import json, time; open({str(tmp_path / 'ranks.json')!r}, 'w').write(json.dumps({{'ranks': []}})); "
        "time.sleep(2.5); raise SystemExit(3)"
    )
    proc = supervise_cli(tmp_path, "1", started)
    assert proc.returncode == 3, proc.stderr
    assert "did not start" not in proc.stderr


@pytest.mark.parametrize("bad", ["0", "-5", "soon"])
def test_start_timeout_must_be_seconds_above_zero(tmp_path, bad):
    proc = supervise_cli(tmp_path, bad, "pass")
    assert proc.returncode == 2
    assert "--start-timeout" in proc.stderr, proc.stderr
    assert repr(bad) in proc.stderr, proc.stderr


def test_the_supervisor_starts_without_torch_or_mpi():
    """One supervisor per training job runs beside ranks importing torch on the same cores: it imports neither."""
    check = "import sys, scalerepro.train.supervise; print(sorted({'torch', 'mpi4py.MPI'} & set(sys.modules)))"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True).stdout.strip() == "[]"


def test_the_job_is_stopped_when_the_process_that_started_it_ends(tmp_path, capsys):
    """Snakemake killed with kill -9 leaves its shell running: the supervisor, watching it, stops the launcher,
    whose ranks checkpoint and exit 128+SIGTERM, and says how to go on."""
    from scalerepro.train.supervise import supervise

    starter = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
    trainer = "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *_: sys.exit(143)); time.sleep(300)"
    timer = threading.Timer(1.0, starter.kill)
    timer.start()
    begun = time.monotonic()
    try:
        code = supervise([sys.executable, "-c", trainer], tmp_path, starter_pid=starter.pid)
    finally:
        timer.cancel()
        starter.kill()
        starter.wait()
    assert code == 128 + signal.SIGTERM
    assert time.monotonic() - begun < 15
    err = capsys.readouterr().err
    assert f"the process that started this job (pid {starter.pid}, e.g. Snakemake) has ended" in err
    assert "the training was checkpointed and stopped" in err


def test_a_run_folder_held_by_a_trainer_is_refused_before_the_launch(tmp_path):
    from tests.train.test_runfolder import HOLD

    holder = subprocess.Popen([sys.executable, "-c", HOLD, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        proc = supervise_cli(tmp_path, "30", f"open({str(tmp_path / 'launched')!r}, 'w')")
    finally:
        holder.kill()
        holder.wait()
    assert proc.returncode == 2
    assert f"the run folder {tmp_path} is in use by another trainer (pid {holder.pid} on " in proc.stderr
    assert not (tmp_path / "launched").exists()
