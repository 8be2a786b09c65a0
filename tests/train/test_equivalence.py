"""One step on N ranks with batch b == one rank with batch N*b (BN group = world), for every algorithm."""

from __future__ import annotations

from pathlib import Path

import pytest

CHECK = str(Path(__file__).with_name("equivalence_check.py"))
EVERY = "native,gloo,ring,rabenseifner,multicolor,multiring,torus2d,torus2d-3phase,hierarchical"
TORCH = "ring@torch,multicolor@torch,torus2d@torch,hierarchical@torch"  # the torch executor (gloo on the CPU)


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("ranks", "algos", "optimizer", "overlap"),
    [
        (1, "ring,native", "sgd", "0"),
        (2, f"{EVERY},{TORCH}", "sgd", "0"),
        (3, f"{EVERY},{TORCH}", "lars", "0"),
        (4, EVERY, "sgd", "0"),
        (4, "ring,multicolor,gloo,multicolor@torch", "lars", "1"),
    ],
)
def test_n_ranks_equal_one_rank_with_the_whole_batch(run_mpi, ranks, algos, optimizer, overlap):
    assert "OK" in run_mpi(ranks, [CHECK, algos, optimizer, overlap], timeout=600).stdout


EXECUTORS = str(Path(__file__).with_name("executor_check.py"))


@pytest.mark.mpi
@pytest.mark.parametrize(("ranks", "algo"), [(2, "multicolor"), (3, "torus2d")])
def test_torch_executor_trains_to_the_mpi_executors_parameters(run_mpi, ranks, algo):
    assert "OK" in run_mpi(ranks, [EXECUTORS, algo, "20"], timeout=600).stdout
