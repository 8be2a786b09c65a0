"""this-machine fitted from a bench and simulated beside it: exact when the bench is the model's own numbers."""

from __future__ import annotations

import random

import pytest

from scalerepro.comm.costfit import row_terms
from scalerepro.errors import UserError
from scalerepro.sim import simulate
from scalerepro.sim.validate import error_summary, machines, measured, table, validation_points

pytestmark = pytest.mark.usefixtures("needs_simgrid")


def synthetic_bench(alpha: float, beta: float, gamma: float) -> list[dict]:
    """Bench rows whose times are the cost model's for (alpha, beta, gamma), with 1% noise."""
    rng = random.Random(3)
    rows = []
    for algo in ("ring", "rabenseifner", "multicolor-ring"):  # unpipelined: the model's closed form is exact
        for p in (2, 3):
            for nbytes in (4096, 65536, 1 << 20):
                row = {
                    "algorithm": algo,
                    "world_size": p,
                    "bytes": nbytes,
                    "dtype": "float32",
                    "executor": "mpi",
                    "ranks_per_core": 0.5,
                    "comm": {"colors": 2},
                    "time_us": 1.0,
                }
                a, b, g = row_terms(row)
                row["time_us"] = (a * alpha + b * beta + g * gamma) * 1e6 * rng.uniform(0.99, 1.01)
                rows.append(row)
    return rows


def test_a_bench_made_of_the_model_validates_within_a_few_percent():
    rows = synthetic_bench(8e-6, 1 / 3e9, 1 / 5e9)
    fitted = machines(rows, 1 / 5e9)
    plat = fitted["dedicated", "mpi"]
    assert plat.intra_latency_us == pytest.approx(8.0, rel=0.1)
    assert plat.intra_GBps == pytest.approx(3.0, rel=0.05)
    kept = measured(rows)
    got = table(kept, simulate(validation_points(kept, fitted)))
    assert max(abs(r["ratio"] - 1) for r in got) < 0.05
    (two, three) = error_summary(got)
    assert two["ranks"] == 2
    assert two["points_64KiB_up"] == 6
    assert two["median_abs_error_64KiB_up"] < 0.03
    assert three["ranks"] == 3


def test_no_multi_rank_point_is_a_clear_error():
    with pytest.raises(UserError, match="no run at 2 or more ranks"):
        machines([{"algorithm": "ring", "world_size": 1, "bytes": 8, "time_us": 1.0}], 1e-10)
