"""All-reduce under stress: 1,000 back-to-back mixed-size all-reduces per algorithm on 4 ranks, all checked, no leak."""

from __future__ import annotations

from pathlib import Path

import pytest

from scalerepro.comm.algorithms import names

STRESS = str(Path(__file__).with_name("stress_check.py"))
CPU = names("cpu")  # every algorithm that sums CPU buffers (nccl needs CUDA)


@pytest.mark.faults
@pytest.mark.mpi
def test_thousand_mixed_allreduces_per_algorithm_are_exact_and_rss_stable(run_mpi):
    """Sizes 0 to 1 MiB (log-uniform plus edge cases), float32/64, in place, out of place, torch tensors."""
    proc = run_mpi(4, [STRESS, "1000"], timeout=900)
    assert f"OK 4 ranks, 1000 all-reduces each: {', '.join(CPU)}" in proc.stdout, proc.stdout
    assert proc.stdout.count("wrong 0,") == len(CPU), proc.stdout
