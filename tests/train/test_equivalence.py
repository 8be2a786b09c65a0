"""One step on N ranks with batch b == one rank with batch N*b (BN group = world), for every algorithm."""

from __future__ import annotations

from pathlib import Path

import pytest

CHECK = str(Path(__file__).with_name("equivalence_check.py"))
EVERY = "native,gloo,nccl,ring,rabenseifner,multicolor,multiring,torus2d,torus2d-3phase,hierarchical"


@pytest.mark.mpi
@pytest.mark.parametrize("ranks, algos, optimizer, overlap", [
    (1, "ring,native", "sgd", "0"),
    (2, EVERY, "sgd", "0"),
    (3, EVERY, "lars", "0"),
    (4, EVERY, "sgd", "0"),
    (4, "ring,multicolor,nccl", "lars", "1"),
])
def test_n_ranks_equal_one_rank_with_the_whole_batch(run_mpi, ranks, algos, optimizer, overlap):
    assert "OK" in run_mpi(ranks, [CHECK, algos, optimizer, overlap], timeout=600).stdout
