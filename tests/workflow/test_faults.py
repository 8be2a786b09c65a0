"""The workflow under faults: a failed training job is retried and resumes; a killed workflow reruns only the rest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from scalerepro.train.events import read_events
from tests.train.test_checkpoint import mid_epoch
from tests.workflow.support import (
    job_counts,
    small_config,
    snakemake,
    snakemake_background,
    wait_for,
    workflow_copy,
)

RUN = "results/train/base/ring/n{ranks}/g1-s0-r0"


def fault_config(tmp_path: Path, ranks: list[int]) -> dict:
    """The reduced laptop sweep with runs long enough to be hit mid-epoch (6 epochs of 10 steps)."""
    cfg = small_config(tmp_path)
    cfg["train"].update(ranks=ranks, epochs=6, batch_per_rank=8, checkpoint_every=1)
    cfg["comm"] = {"timeout_s": 30}
    return cfg


def start(wf: Path, *targets: str) -> subprocess.Popen:
    """`snakemake --profile laptop` for ``targets``, in the background (targets first: --configfile takes every
    word after it)."""
    profile = ("--cores", "2", "--profile", "workflow/profiles/laptop", "--configfile", "f.yaml")
    return snakemake_background(wf, *targets, *profile, OMP_NUM_THREADS="1")


def running(pid: int) -> bool:
    """The process exists and is not a zombie."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, ProcessLookupError):
        return False


def gone(pids: list[int], within_s: float) -> bool:
    """Every process in ``pids`` has exited within ``within_s`` seconds."""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if not [pid for pid in pids if running(pid)]:
            return True
        time.sleep(0.1)
    return False


@pytest.mark.faults
@pytest.mark.slow
def test_failed_training_job_is_retried_and_resumes_from_its_checkpoint(tmp_path):
    wf = workflow_copy(tmp_path)
    (wf / "f.yaml").write_text(yaml.safe_dump(fault_config(tmp_path, [2])))
    run = wf / RUN.format(ranks=2)
    proc = start(wf, f"{RUN.format(ranks=2)}/run.json")
    wait_for(proc, lambda: mid_epoch(run), "the run's second epoch")
    victim = json.loads((run / "ranks.json").read_text())["ranks"][1]
    os.kill(victim["pid"], signal.SIGKILL)
    killed = time.monotonic()
    output, _ = proc.communicate(timeout=600)
    print(f"rank killed under Snakemake: retried and finished {time.monotonic() - killed:.1f} s later")
    assert proc.returncode == 0, output[-4000:]

    attempts = (run / "attempts.log").read_text()
    assert attempts.count("== train job on ") == 2, attempts[-4000:]
    first, second = attempts.split("== train job on ")[1:]
    assert f"rank 1 (pid {victim['pid']} on {victim['host']}) exited first" in first
    assert "rerun the same command to continue from it" in first
    assert "scalerepro supervise" not in second
    record = json.loads((run / "run.json").read_text())
    assert record["resumed"]
    assert record["final"]["epoch"] == 5
    keys = [e["key"] for e in read_events(run / "events.jsonl")]
    assert keys.count("run_start") == 1
    assert keys.count("run_resume") == 1
    assert keys[-1] == "run_stop"


@pytest.mark.faults
@pytest.mark.slow
def test_killed_workflow_reruns_only_the_unfinished_run_and_resumes_it(tmp_path):
    wf = workflow_copy(tmp_path)
    cfg = fault_config(tmp_path, [1, 2])
    cfg["train"]["epochs"] = 10  # long enough for a second trainer to start while the first trains
    (wf / "f.yaml").write_text(yaml.safe_dump(cfg))
    runs = {n: wf / RUN.format(ranks=n) for n in (1, 2)}
    targets = [f"{RUN.format(ranks=n)}/run.json" for n in runs]
    proc = start(wf, *targets)

    def one_done_other_mid_epoch() -> bool:
        done = [n for n, r in runs.items() if (r / "run.json").exists()]
        return len(done) == 1 and mid_epoch(runs[3 - done[0]])

    wait_for(proc, one_done_other_mid_epoch, "one finished run and the other mid-epoch")
    finished = next(n for n, r in runs.items() if (r / "run.json").exists())
    cut = runs[3 - finished]
    kept = {name: (runs[finished] / name).read_bytes() for name in ("run.json", "events.jsonl")}

    # A second trainer on the folder the workflow is training in: refused, naming the first.
    train = ("train", "--config", "f.yaml", "--algo", "ring", "--shards", "results/shards", "--out", str(cut))
    second = subprocess.run(
        [sys.executable, "-m", "scalerepro.cli", *train],
        cwd=wf,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )
    assert second.returncode == 2, second.stderr[-3000:]
    assert f"the run folder {cut} is in use by another trainer (pid " in second.stderr

    # kill -9 of Snakemake alone (a dropped login, the OOM killer): its job's shell lives on, but not the training.
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=120)
    ranks = [p["pid"] for p in json.loads((cut / "ranks.json").read_text())["ranks"]]
    assert gone(ranks, within_s=30), f"ranks {ranks} outlived the killed workflow"
    assert "the process that started this job" in (cut / "attempts.log").read_text()
    assert not (cut / "run.json").exists()
    assert not (cut / "events.jsonl").exists()

    plan = snakemake(wf, *targets, "-n", "--profile", "workflow/profiles/laptop", "--configfile", "f.yaml")
    assert plan.returncode == 0, plan.stdout[-3000:] + plan.stderr[-3000:]
    assert job_counts(plan.stdout)["train"] == 1, plan.stdout
    assert f"output: {RUN.format(ranks=3 - finished)}/run.json" in plan.stdout

    # A killed Snakemake leaves its lock; the user's one extra step, as Snakemake's message says.
    unlock = snakemake(wf, "--unlock", "--cores", "1")
    assert unlock.returncode == 0, unlock.stderr[-3000:]
    again = start(wf, *targets)
    t0 = time.monotonic()
    output, _ = again.communicate(timeout=600)
    print(f"killed workflow: the rerun finished the interrupted run in {time.monotonic() - t0:.1f} s")
    assert again.returncode == 0, output[-4000:]
    assert {name: (runs[finished] / name).read_bytes() for name in kept} == kept
    record = json.loads((cut / "run.json").read_text())
    assert record["resumed"]
    assert record["final"]["epoch"] == 9
