"""Shared fixtures: an MPI launcher, a small generated dataset and its shards."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scalerepro import shm
from scalerepro.config import from_mapping
from scalerepro.data.pack import shard_split
from scalerepro.data.synth import generate
from scalerepro.oversubscription import launch_env
from tests.support import SMALL, mpiexec


@pytest.fixture
def run_mpi():
    """Run ``python -c/-m ...`` on N ranks, with MPI's yield settings when they outnumber the cores; return the
    CompletedProcess (never hangs: timeout)."""

    def run(n: int, args: list[str], timeout: float = 300, env: dict | None = None, check: bool = True):
        cmd = [mpiexec(), "-n", str(n), sys.executable, *args]
        full_env = launch_env(n, {**os.environ, "OMP_NUM_THREADS": "1", **(env or {})})
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=full_env)
        if check and proc.returncode != 0:
            raise AssertionError(
                f"{' '.join(cmd)} exited {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
            )
        return proc

    return run


@pytest.fixture(scope="session")
def tiny_dataset(tmp_path_factory) -> Path:
    """A 10-class dataset of 12 train / 4 val images per class, with every quirk."""
    return generate(SMALL, tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="session")
def tiny_shards(tiny_dataset, tmp_path_factory) -> Path:
    """``tiny_dataset`` sharded: <root>/train (4 shards), <root>/val (2 shards)."""
    root = tmp_path_factory.mktemp("shards")
    shard_split(tiny_dataset, "train", root / "train", 4, 0)
    shard_split(tiny_dataset, "val", root / "val", 2, 0)
    return root


@pytest.fixture
def default_config():
    """The schema's defaults as a frozen Config."""
    return from_mapping({})


@pytest.fixture(autouse=True)
def no_segment_left_behind(request):
    """Around every fault test: the MPICH segments in /dev/shm that appeared while it ran are gone after it (a job
    that aborts must not leave node memory nobody frees; see scalerepro.shm)."""
    if request.node.get_closest_marker("faults") is None:
        yield
        return
    started = time.time_ns()
    before = set(shm.segments())
    yield
    left = sorted(str(p) for p, mtime in shm.segments().items() if p not in before and mtime >= started)
    assert not left, f"left in /dev/shm by this test: {left}"
