"""All-reduce correctness at 1-4 ranks, registry errors, and the benchmark harness."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scalerepro.comm.harness import bus_factor, expected, fill, sizes
from scalerepro.comm.registry import allreduce, as_array, get, names
from scalerepro.errors import UserError

CHECK = str(Path(__file__).with_name("allreduce_check.py"))


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2, 3, 4])
def test_every_algorithm_sums_exactly_with_same_bits(run_mpi, ranks):
    proc = run_mpi(ranks, [CHECK])
    assert f"OK {ranks} ranks" in proc.stdout


def test_registry_lists_and_refuses():
    assert {"native", "ring"} <= set(names())
    with pytest.raises(UserError, match="unknown all-reduce algorithm 'nope'; choose one of: native"):
        get("nope")


def test_single_rank_is_identity():
    buf = np.arange(5, dtype=np.float32)
    assert allreduce(buf, "ring") is buf
    assert np.array_equal(buf, np.arange(5, dtype=np.float32))


def test_rejects_non_contiguous_and_foreign_buffers():
    with pytest.raises(UserError, match="C-contiguous"):
        as_array(np.zeros((4, 4), dtype=np.float32)[:, 1])
    with pytest.raises(UserError, match="NumPy array or a torch tensor"):
        as_array([1.0, 2.0])


def test_harness_pattern_and_sizes():
    assert sizes(8, 64) == [8, 16, 32, 64]
    assert bus_factor(1) == 0.0 and bus_factor(4) == 1.5
    buf = np.empty(20, dtype=np.float32)
    total = np.zeros(20, dtype=np.float32)
    for rank in range(3):
        fill(buf, rank, it=2)
        total += buf
    assert np.array_equal(total, expected(20, 3, 2, np.float32))


@pytest.mark.mpi
def test_bench_cli_writes_checked_json(run_mpi, tmp_path):
    out = tmp_path / "bench.json"
    proc = run_mpi(3, ["-m", "scalerepro.cli", "bench", "--set", "bench.max_bytes=4096", "--set", "bench.iters=3",
                       "--out", str(out)])
    record = json.loads(out.read_text())
    assert record["world_size"] == 3 and len(record["hosts"]) == 3 and "MPICH" in record["mpi_library"]
    assert {r["algorithm"] for r in record["rows"]} == {"native", "ring"}
    assert [r["bytes"] for r in record["rows"] if r["algorithm"] == "ring"] == sizes(8, 4096)
    assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in record["rows"])
    assert "busbw(GB/s)" in proc.stderr  # the table for people
