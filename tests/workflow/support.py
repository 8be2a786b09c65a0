"""What the workflow tests share: a copy of the workflow to run in, snakemake run to the end or in the background
with one environment, the reduced laptop sweep, and reading a dry-run's job table."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from tests.support import REPO

BIN = Path(sys.executable).parent
LAPTOP = yaml.safe_load((REPO / "config/config.yaml").read_text())


def workflow_copy(tmp_path: Path) -> Path:
    """The workflow files in a fresh folder, so runs never touch the checkout's results/."""
    dst = tmp_path / "wf"
    dst.mkdir()
    shutil.copy(REPO / "Snakefile", dst)
    shutil.copytree(REPO / "workflow", dst / "workflow", symlinks=True)
    shutil.copytree(REPO / "config", dst / "config")
    return dst


def snakemake_env(**extra: str) -> dict[str, str]:
    """The environment every workflow test runs snakemake in: this venv's tools first on PATH, DVC quiet."""
    return {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "true", **extra}


def snakemake(cwd: Path, *args: str, timeout: float = 120, **env: str) -> subprocess.CompletedProcess:
    """Run the snakemake CLI of this venv in ``cwd`` to the end (``env``: variables to add)."""
    return subprocess.run(
        [str(BIN / "snakemake"), *args],
        cwd=cwd,
        env=snakemake_env(**env),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def snakemake_background(cwd: Path, *args: str, **env: str) -> subprocess.Popen:
    """Start the snakemake CLI of this venv in ``cwd`` in its own session (so a test can stop all of it), its
    output merged on ``stdout``."""
    return subprocess.Popen(
        [str(BIN / "snakemake"), *args],
        cwd=cwd,
        env=snakemake_env(**env),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


def wait_for(proc: subprocess.Popen, ready: Callable[[], bool], what: str, limit_s: float = 300) -> None:
    """Poll ``ready()`` until true; fail with the workflow's output if it ends first."""
    deadline = time.monotonic() + limit_s
    while not ready():
        if proc.poll() is not None or time.monotonic() > deadline:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            raise AssertionError(f"never saw {what}:\n{proc.communicate()[0][-4000:]}")
        time.sleep(0.02)


def small_config(tmp_path: Path) -> dict:
    """The reduced laptop sweep the end-to-end tests run: ring on 1 and 2 ranks, 2 epochs, no studies, staged in tmp."""
    return {
        "dataset": {"name": "small", "train_per_class": 16, "val_per_class": 4, "max_size": 200, "quirks_per_kind": 1},
        "shard": {"train_shards": 4, "val_shards": 2},
        "stage": {"root": str(tmp_path / "shm")},
        "train": {
            "ranks": [1, 2],
            "algorithms": ["ring"],
            "epochs": 2,
            "width": 8,
            "batch_per_rank": 16,
            "studies": dict.fromkeys(LAPTOP["train"]["studies"]),
        },  # null: left out
        "bench": {"ranks": [2], "max_bytes": 65536, "iters": 3},
        "simulate": {
            "platforms": ["minsky-ddl"],
            "algorithms": ["ring", "multicolor"],
            "ranks": [8],
            "claims_max_ranks": 8,
        },
    }


def job_counts(stdout: str) -> dict[str, int]:
    """The 'Job stats' table of a dry-run."""
    lines = stdout[stdout.index("Job stats:") :].splitlines()[3:]
    counts = {}
    for line in lines:
        parts = line.split()
        if len(parts) != 2 or not parts[1].isdigit():
            break
        counts[parts[0]] = int(parts[1])
    return counts
