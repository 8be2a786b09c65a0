"""MLPerf logs from the event log pass mlperf-logging's compliance checker (training, ruleset 4.0.0)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scalerepro.cli import main

CHECK = [sys.executable, "-m", "mlperf_logging.compliance_checker", "--usage", "training", "--ruleset", "4.0.0"]


def checker(log: Path) -> subprocess.CompletedProcess:
    """The official compliance checker on one log (it writes compliance_checker.log beside the log)."""
    return subprocess.run([*CHECK, str(log)], cwd=log.parent, capture_output=True, text=True, timeout=120)


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory, tiny_shards) -> Path:
    """A finished 2-rank run with three evaluations."""
    from tests.support import mpiexec, train_args

    out = tmp_path_factory.mktemp("mlperf") / "run"
    cmd = [
        mpiexec(),
        "-n",
        "2",
        sys.executable,
        *train_args(tiny_shards, out, "train.epochs=3", "train.width=8", "train.batch_per_rank=8"),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env={**os.environ, "OMP_NUM_THREADS": "1"})
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.mpi
def test_exported_log_passes_the_compliance_checker(two_rank_run, tmp_path):
    assert main(["mlperf-log", "--runs", str(two_rank_run / "run.json"), "--out", str(tmp_path), "--org", "lab"]) == 0
    log = tmp_path / "ring-n2-g1-s0-r0.txt"
    lines = log.read_text().splitlines()
    assert all(line.startswith(":::MLLOG {") for line in lines)
    assert '"key": "submission_org", "metadata": {}, "namespace": "scalerepro", "time_ms"' in lines[2]
    result = checker(log)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout + result.stderr, result.stdout + result.stderr


@pytest.mark.mpi
def test_checker_fails_a_log_without_its_evaluation_intervals(two_rank_run, tmp_path):
    main(["mlperf-log", "--runs", str(two_rank_run), "--out", str(tmp_path)])
    log = tmp_path / "ring-n2-g1-s0-r0.txt"
    log.write_text("".join(line + "\n" for line in log.read_text().splitlines() if '"key": "eval_st' not in line))
    result = checker(log)
    assert result.returncode != 0
    assert "eval_start" in result.stdout + result.stderr


def test_no_matching_run_is_named(tmp_path):
    assert main(["mlperf-log", "--runs", str(tmp_path / "nothing-*"), "--out", str(tmp_path)]) == 2
