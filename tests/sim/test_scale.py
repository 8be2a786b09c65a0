"""ResNet-50 at scale: buckets as training cuts them, the step projection, published against simulated."""

from __future__ import annotations

import pytest

from scalerepro.sim.papers import compare
from scalerepro.sim.platforms import Platform
from scalerepro.sim.scale import RESNET50_PARAMETERS, buckets, points, steps

PLAT = Platform("x", "torus", 64, 10.0, 1.0, 0.0, images_per_s_per_accelerator=100.0, overlap=0.5)


@pytest.mark.parametrize(("itemsize", "mib"), [(4, 25.0), (2, 25.0), (4, 1.0), (4, 1000.0)])
def test_buckets_cover_every_gradient_once(itemsize, mib):
    sizes = buckets(RESNET50_PARAMETERS, itemsize, mib)
    assert sum(size * n for size, n in sizes.items()) == RESNET50_PARAMETERS * itemsize
    assert max(sizes) <= max(mib * 2**20, RESNET50_PARAMETERS * itemsize)


def test_a_full_bucket_both_types_cut_is_simulated_once():
    found = points(PLAT, ["ring"], [8], ["float32", "bfloat16"], 25.0, 2)
    assert len(found) == 3  # 25 MiB (both), the float32 remainder, the bfloat16 remainder
    assert len({p.nbytes for p in found}) == 3


def test_step_hides_overlap_x_compute_and_counts_the_rest():
    found = points(PLAT, ["ring"], [8], ["float32"], 25.0, 2)
    rows = [{"platform": "x", "algorithm": "ring", "ranks": 8, "bytes": p.nbytes, "simulated_s": 0.1} for p in found]
    step = steps(rows, PLAT, 25.0, 32)[0]
    compute = 32 / 100.0
    allreduce = 0.1 * sum(buckets(RESNET50_PARAMETERS, 4, 25.0).values())
    assert step["allreduce_s"] == pytest.approx(allreduce)
    assert step["step_s"] == pytest.approx(compute + allreduce - 0.5 * compute)
    assert step["efficiency"] == pytest.approx(compute / step["step_s"])
    assert step["time_90_epochs_s"] == pytest.approx(90 * 1_281_167 / (8 * 32 / step["step_s"]))


def test_claims_against_steps_name_the_assumption_when_off():
    claims = [
        {
            "id": "a",
            "paper": "A",
            "claim": "eff",
            "cite": "c",
            "platform": "x",
            "algorithm": "ring",
            "ranks": 8,
            "dtype": "float32",
            "metric": "efficiency",
            "published": 0.95,
            "if_off": "the links",
        },
        {
            "id": "b",
            "paper": "B",
            "claim": "2-D vs 1-D",
            "cite": "c",
            "platform": "x",
            "algorithm": "torus2d",
            "ranks": 8,
            "dtype": "float32",
            "metric": "speedup_over",
            "over": "ring",
            "published": None,
            "if_off": "hops",
        },
    ]
    st = [
        {"platform": "x", "algorithm": "ring", "ranks": 8, "dtype": "float32", "efficiency": 0.5, "allreduce_s": 2.0},
        {
            "platform": "x",
            "algorithm": "torus2d",
            "ranks": 8,
            "dtype": "float32",
            "efficiency": 0.9,
            "allreduce_s": 1.0,
        },
    ]
    eff, speed = compare(claims, st)
    assert eff["simulated"] == 0.5
    assert eff["within_20pct"] is False
    assert eff["assumption_to_revisit"] == "the links"
    assert speed["simulated"] == 2.0
    assert speed["within_20pct"] is None
    assert speed["assumption_to_revisit"] == ""
