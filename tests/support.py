"""Helpers the tests import: the repository root, the small dataset's spec and an MPI launcher."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from scalerepro.data.synth import SynthSpec

REPO = Path(__file__).resolve().parents[1]
SMALL = SynthSpec(name="tiny", train_per_class=12, val_per_class=4, max_size=160, quirks_per_kind=2)


def cli(*args: str, cwd: Path = REPO, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    """``scalerepro ARGS`` in a fresh interpreter, one intra-op thread (a timeout: a hang fails, it does not stall
    the suite)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    argv = [sys.executable, "-m", "scalerepro.cli", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=cwd, env=env)


def refused(proc: subprocess.CompletedProcess[str], *named: str, one_line: bool = False) -> None:
    """Exit 2, no traceback, every ``named`` text in the message; ``one_line``: in its one error line (progress
    lines may come before it)."""
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    errors = [line for line in proc.stderr.splitlines() if ": error: " in line]
    if one_line:
        assert len(errors) == 1, proc.stderr
    for text in named:
        assert text in (errors[0] if one_line else proc.stderr), proc.stderr


def refused_one(proc: subprocess.CompletedProcess[str], *named: str) -> None:
    """:func:`refused`, the message on one error line."""
    refused(proc, *named, one_line=True)


def mpiexec() -> str:
    """The mpiexec beside this Python (the mpich wheel's)."""
    beside = Path(sys.executable).with_name("mpiexec")
    found = str(beside) if beside.exists() else shutil.which("mpiexec")
    if not found:
        pytest.skip("mpiexec not found; install the mpich wheel (make venv)")
    return found


def train_args(shards: Path | str, out: Path | str, *settings: str, stage: bool = False) -> list[str]:
    """Python arguments of ``scalerepro train --algo ring`` (without staging unless ``stage``), one ``--set`` each."""
    args = ["-m", "scalerepro.cli", "train", "--algo", "ring", "--shards", str(shards), "--out", str(out)]
    args += [] if stage else ["--no-stage"]
    return args + [a for setting in settings for a in ("--set", setting)]


def paper_folder(root: Path, claims: list[dict], pid: str = "ying2018", title: str = "P") -> Path:
    """A papers folder under ``root`` holding one paper file, ``pid`` (a registered source) with ``claims``,
    beside the shipped sources registry and the paper's shipped preset."""
    import yaml

    config = root / "config"
    (config / "papers").mkdir(parents=True)
    (config / "presets").mkdir()
    shutil.copy(REPO / "config" / "sources.yaml", config / "sources.yaml")
    shutil.copy(REPO / "config" / "presets" / f"{pid}.yaml", config / "presets" / f"{pid}.yaml")
    doc = {"title": title, "preset": f"../presets/{pid}.yaml", "claims": claims}
    (config / "papers" / f"{pid}.yaml").write_text(yaml.safe_dump(doc))
    return config / "papers"
