"""All-reduce correctness at 1-4 ranks, registry errors, and the benchmark harness."""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scalerepro.comm.buffers import expected, fill
from scalerepro.comm.harness import SweepSpec, bus_factor, sizes, timed_iterations
from scalerepro.comm.registry import allreduce, as_array, get, names, select
from scalerepro.errors import UserError

CHECK = str(Path(__file__).with_name("allreduce_check.py"))


ALL = names(device="cpu")  # every algorithm that runs on CPU buffers (nccl needs CUDA)
HANG = str(Path(__file__).with_name("hang_check.py"))


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 2, 3, 4, 6])
def test_every_algorithm_sums_exactly_with_same_bits(run_mpi, ranks):
    """Sizes 0, 1, < ranks, primes, 1 Mi; float32/64 random data; in and out of place; torch tensors; both executors."""
    proc = run_mpi(ranks, [CHECK], timeout=600)
    assert f"OK {ranks} ranks: {', '.join(ALL)} on mpi, torch" in proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [3, 5, 7])
@pytest.mark.parametrize("colors", [2, 3])
def test_colored_trees_sum_random_floats_to_the_same_bits(run_mpi, ranks, colors):
    """multicolor's trees with 2 and 3 colors, pipelined in 64 KiB chunks, on both executors (dbtree's trees are
    checked with every algorithm above)."""
    proc = run_mpi(ranks, [CHECK, "multicolor", "", "mpi,torch", str(colors)], timeout=600)
    assert f"OK {ranks} ranks: multicolor on mpi, torch" in proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [2, 3, 4])
def test_ring_reduce_blocks_pair_up_across_uneven_chunks(run_mpi, ranks):
    """Chunks just over and at whole multiples of the 1 MiB reduce block, float32 and float64."""
    from scalerepro.comm.mpi_executor import REDUCE_BLOCK_BYTES
    from scalerepro.comm.ring import DIRECT_BYTES

    block = REDUCE_BLOCK_BYTES // 4
    extra = [ranks * block + 2, ranks * block + ranks - 1, DIRECT_BYTES // 4 + 1]
    proc = run_mpi(ranks, [CHECK, "ring,hierarchical", ",".join(map(str, extra)), "mpi"], timeout=600)
    assert f"OK {ranks} ranks: ring, hierarchical on mpi" in proc.stdout


@pytest.mark.mpi
@settings(max_examples=3, deadline=None, suppress_health_check=list(HealthCheck))
@given(extra=st.lists(st.integers(min_value=0, max_value=200_000), min_size=1, max_size=6))
def test_property_sizes(run_mpi, extra):
    """Hypothesis-drawn element counts, every algorithm, 3 ranks."""
    proc = run_mpi(3, [CHECK, "", ",".join(map(str, extra)), "mpi"], timeout=600)
    assert "OK 3 ranks" in proc.stdout


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("algo", "grid", "kinds", "executor"),
    [
        ("torus2d", "[2,3]", "()", "mpi"),
        ("torus2d", "[3,2]", "()", "mpi"),
        ("torus2d-3phase", "[2,3]", "()", "mpi"),
        ("torus2d-4link", "[2,3]", "()", "mpi"),
        ("torus2d-4link", "[3,2]", "()", "torch"),
        ("multiring", "[2,3]", "()", "mpi"),
        ("multiring", "[3,1,2]", "()", "mpi"),
        ("multiring", "[6]", "()", "mpi"),
        ("multiring", "[3,1,2]", "('ring', 'ring', 'library')", "mpi"),
        ("multiring", "[2,3]", "('library', 'ring')", "mpi"),
        ("multiring", "[2,3]", "('ring', 'library')", "torch"),
    ],
)
def test_grids_on_six_ranks(run_mpi, algo, grid, kinds, executor):
    """Each grid (and multiring's per-dimension algorithms) sums random float64 data on 6 ranks, same bits."""
    script = f"""
import sys, numpy as np, torch
from mpi4py import MPI
from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import allreduce
comm = MPI.COMM_WORLD
params = CommParams(chunk_bytes=1000, grid=tuple({grid}), dim_algorithms={kinds}, executor="{executor}")
with Context(comm, params) as ctx:
    for n in (0, 5, 6, 1001, 77777):
        data = np.random.default_rng([n, comm.rank]).standard_normal(n)
        want = np.sum(np.stack(comm.allgather(data)), axis=0) if n else data
        buf = torch.from_numpy(data) if "{executor}" == "torch" else data
        allreduce(buf, "{algo}", ctx)
        assert np.allclose(data, want, rtol=1e-12, atol=1e-12), n
        assert len(set(comm.allgather(data.tobytes()))) == 1
print("OK")
"""
    assert "OK" in run_mpi(6, ["-c", script]).stdout


@pytest.mark.faults
@pytest.mark.mpi
@pytest.mark.parametrize(
    ("algo", "grid", "fits"),
    [
        ("torus2d", "[4,2]", "[[2, 3], [3, 2]]"),
        ("multiring", "[5]", "[[6]]"),
        ("torus2d", "[6]", "must have 2 dimensions"),
    ],
)
def test_grid_that_does_not_fit_lists_ones_that_do(run_mpi, algo, grid, fits):
    proc = run_mpi(
        6,
        [
            "-m",
            "scalerepro.cli",
            "bench",
            "--algos",
            algo,
            "--set",
            f"comm.grid={grid}",
            "--set",
            "bench.max_bytes=64",
            "--out",
            "/dev/null",
        ],
        check=False,
    )
    assert proc.returncode != 0
    assert fits in proc.stderr, proc.stderr


@pytest.mark.faults
@pytest.mark.mpi
@pytest.mark.parametrize("algo", ["native", "ring", "multicolor", "torus2d"])
def test_rank_that_never_arrives_ends_the_job_naming_it(run_mpi, algo):
    proc = run_mpi(3, [HANG, algo, "late", "2"], timeout=60, check=False)
    assert proc.returncode != 0
    assert f"{algo} all-reduce (collective #2) did not finish within comm.timeout_s=2 s" in proc.stderr
    assert f"rank(s) [1] on {socket.gethostname()} never arrived" in proc.stderr


@pytest.mark.faults
@pytest.mark.mpi
def test_killed_rank_does_not_hang_the_others(run_mpi):
    proc = run_mpi(3, [HANG, "ring", "dead", "2"], timeout=60, check=False)
    assert proc.returncode != 0
    assert "finished" not in proc.stdout


def test_registry_lists_and_refuses():
    assert names() == sorted([*ALL, "nccl"])
    with pytest.raises(
        UserError, match=re.escape(f"unknown all-reduce algorithm 'nope'; choose one of: {', '.join(names())}")
    ):
        get("nope")
    with pytest.raises(UserError, match="unknown all-reduce algorithm 'nope'"):
        allreduce(np.zeros(3), "nope")


def test_library_algorithms_on_the_wrong_device_name_the_peer():
    from scalerepro.comm.algorithms import executor_for

    with pytest.raises(UserError, match="nccl sums CUDA buffers, but this one is on cpu; use gloo"):
        executor_for(get("nccl"), "cpu")
    with pytest.raises(UserError, match="gloo sums CPU buffers, but this one is on cuda; use nccl"):
        executor_for(get("gloo"), "cuda")
    assert executor_for(get("ring"), "cuda") == "torch"  # default: torch for CUDA tensors
    assert executor_for(get("ring"), "cpu") == "mpi"
    assert executor_for(get("ring"), "cpu", "torch") == "torch"
    assert executor_for(get("native"), "cpu", "torch") == "mpi"  # MPI_Allreduce is MPI's


def test_single_rank_is_identity():
    buf = np.arange(5, dtype=np.float32)
    assert allreduce(buf, "ring") is buf
    assert np.array_equal(buf, np.arange(5, dtype=np.float32))


def test_rejects_non_contiguous_and_foreign_buffers():
    with pytest.raises(UserError, match="C-contiguous"):
        as_array(np.zeros((4, 4), dtype=np.float32)[:, 1])
    with pytest.raises(UserError, match="NumPy array or a torch tensor"):
        as_array([1.0, 2.0])


def test_bfloat16_tensor_gets_a_clear_error_naming_the_fix():
    torch = pytest.importorskip("torch")
    with pytest.raises(UserError, match=r"not torch.bfloat16 .*t\.float\(\)"):
        as_array(torch.zeros(4, dtype=torch.bfloat16))
    assert as_array(torch.zeros(4, dtype=torch.float64)).dtype == np.float64


def test_out_of_place_leaves_input_and_checks_shape():
    src = np.arange(4, dtype=np.float32)
    out = np.zeros(4, dtype=np.float32)
    assert allreduce(src, "ring", out=out) is out
    assert np.array_equal(out, src)
    with pytest.raises(UserError, match="must match the input"):
        allreduce(src, "ring", out=np.zeros(3, dtype=np.float32))


def test_bad_params_name_the_key():
    from scalerepro.comm.context import CommParams

    with pytest.raises(UserError, match="comm.colors"):
        CommParams(colors=0)
    with pytest.raises(UserError, match="comm.tree_arity=0: must be >= 1"):
        CommParams(tree_arity=0)
    with pytest.raises(UserError, match="comm.timeout_s"):
        CommParams(timeout_s=0)
    with pytest.raises(UserError, match="comm.executor='nccl': choose one of auto, mpi, torch"):
        CommParams(executor="nccl")


def test_multicolor_ring_orders_differ_and_plan_scales():
    from scalerepro.comm.multicolor import MIN_COLOR_BYTES
    from scalerepro.comm.multicolor_ring import orders, plan

    o = orders(5, 4)
    assert len(set(o)) == 4
    assert all(sorted(x) == list(range(5)) for x in o)
    two_nodes = orders(8, 4, [(0, 1, 2, 3), (4, 5, 6, 7)])
    assert two_nodes[0] == (0, 1, 2, 3, 4, 5, 6, 7)
    assert two_nodes[1] == tuple(reversed(two_nodes[0]))
    assert two_nodes[2] == (1, 2, 3, 0, 5, 6, 7, 4)  # color pair 1 enters and leaves each node at other ranks
    crossings = {(o[i], o[(i + 1) % 8]) for o in two_nodes for i in range(8) if o[i] // 4 != o[(i + 1) % 8] // 4}
    assert len(crossings) == 8  # 4 colors x 2 inter-node hops, no two on the same pair of ranks
    assert plan(8192, 4, 1 << 20, p=4) == (1, 1)
    assert plan(64 * MIN_COLOR_BYTES, 4, 1 << 20, p=4)[0] == 4
    assert plan(64 * MIN_COLOR_BYTES, 4, 1 << 20, p=3) == (4, 1)
    assert plan(64 << 20, 4, 1 << 20, p=2) == (1, 1)  # one peer: every color is the same exchange


def test_harness_pattern_and_sizes():
    assert sizes(8, 64) == [8, 16, 32, 64]
    assert bus_factor(1) == 0.0
    assert bus_factor(4) == 1.5
    buf = np.empty(20, dtype=np.float32)
    total = np.zeros(20, dtype=np.float32)
    for rank in range(3):
        fill(buf, rank, it=2)
        total += buf
    assert np.array_equal(total, expected(20, 3, 2, np.float32))


@pytest.mark.mpi
def test_bench_cli_writes_checked_json(run_mpi, tmp_path):
    out = tmp_path / "bench.json"
    proc = run_mpi(
        3,
        ["-m", "scalerepro.cli", "bench", "--set", "bench.max_bytes=4096", "--set", "bench.iters=3", "--out", str(out)],
    )
    record = json.loads(out.read_text())
    assert record["world_size"] == 3
    assert len(record["hosts"]) == 3
    assert "MPICH" in record["mpi_library"]
    assert record["params"] == {
        "timeout_s": 300,
        "colors": 2,
        "chunk_bytes": 0,
        "grid": [],
        "dim_algorithms": [],
        "executor": "auto",
        "tuning": "",
        "tree_arity": 2,
    }
    assert {r["algorithm"] for r in record["rows"]} == {"native", "ring"}
    assert [r["bytes"] for r in record["rows"] if r["algorithm"] == "ring"] == sizes(8, 4096)
    assert all(r["wrong"] == 0 and r["time_us"] > 0 for r in record["rows"])
    assert all(3 <= r["iters"] <= 1000 for r in record["rows"])  # min_time_s extends the fast sizes
    assert [r["algorithm"] for r in record["rows"][:2]] == ["native", "ring"]  # sizes outer: peers back to back
    assert record["ranks_per_node"] == 3
    assert record["cores_per_node"] >= 1
    assert "out-of-place" in proc.stderr  # the table for people (both placements: test_harness.py)
    assert all(r["oop_wrong"] == 0 and r["oop_time_us"] > 0 for r in record["rows"])


def test_timed_iterations_stretch_fast_sizes_within_bounds():
    spec = SweepSpec((select("ring"),), 8, 8, iters=20, min_time_s=0.05, max_iters=1000)
    assert timed_iterations(spec, warmup_s=1e-3) == 50
    assert timed_iterations(spec, warmup_s=1e-2) == 20  # already long enough: iters
    assert timed_iterations(spec, warmup_s=1e-6) == 1000  # capped
    exact = SweepSpec((select("ring"),), 8, 8, iters=20)
    assert timed_iterations(exact, warmup_s=1e-6) == 20  # min_time_s 0: exactly iters
    assert timed_iterations(spec, warmup_s=0.0) == 20  # no warm-up to estimate from


def test_the_rendezvous_port_is_bound_before_it_is_announced():
    """Rank 0's store listens before the port goes out, so no other process can take it in between."""
    import datetime as dt

    from scalerepro.distributed import rendezvous

    class One:
        rank, size = 0, 1

        def bcast(self, value, root=0):  # noqa: ARG002 (MPI's signature; one rank is its own root)
            announced.append(value)
            with socket.create_connection(("127.0.0.1", value[1]), timeout=5):  # already accepting
                pass
            return value

    announced: list = []
    store = rendezvous(One(), "127.0.0.1", dt.timedelta(seconds=10))
    assert announced == [("127.0.0.1", store.port)]
