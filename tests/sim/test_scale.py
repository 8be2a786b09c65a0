"""ResNet-50 at scale: the simulated buckets, steps with bands over the ranges, and claims judged against the bands."""

from __future__ import annotations

import dataclasses

import pytest

from scalerepro.sim.claims import judge, judged, sensitivity
from scalerepro.sim.platforms import Platform
from scalerepro.sim.scale import Projection, interpolate_seconds, points, simulated_sizes, steps, variants
from scalerepro.sim.timeline import resnet50

PLAT = Platform(
    "x",
    "fattree",
    64,
    10.0,
    1.0,
    4e-12,  # gamma: the optimizer's bytes at 750 GB/s
    ranks_per_node=4,
    intra_GBps=20.0,
    images_per_s_per_accelerator=100.0,
    overlap="none",
    ranges={"link_GBps": [5.0, 10.0], "images_per_s_per_accelerator": [80.0, 120.0], "overlap": ["none", "buckets"]},
)


def fake_rows(found, per_byte=1e-9, base=1e-3, ring_factor=2):
    """Simulated rows for ``found``: a linear all-reduce, the ring's ``ring_factor`` x the bytes, everything twice
    as slow on the slow network corner (and with the link alone at its slow end)."""
    rows = []
    for p in found:
        slow = 2.0 if p.platform.variant in ("slow network", "link_GBps=5.0") else 1.0
        rows.append(
            {
                "platform": p.platform.name,
                "variant": p.platform.variant,
                "algorithm": p.algorithm,
                "ranks": p.ranks,
                "bytes": p.nbytes,
                "simulated_s": slow * (base + per_byte * p.nbytes * (ring_factor if p.algorithm == "ring" else 1)),
            }
        )
    return rows


def test_only_the_smallest_and_largest_bucket_of_each_type_are_simulated_on_each_corner():
    found = points(PLAT, ["ring"], [8], ["float32", "bfloat16"], 25.0, {"colors": 2})
    sizes = set(simulated_sizes("float32", 25.0)) | set(simulated_sizes("bfloat16", 25.0))
    assert {p.nbytes for p in found} == sizes
    assert {p.platform.variant for p in found} == {"", "slow network", "fast network"}
    assert len(found) == 3 * len(sizes)


def test_a_platform_without_network_ranges_is_simulated_once():
    bare = dataclasses.replace(PLAT, ranges={})
    assert [v.variant for v in variants(bare)] == [""]


def test_interpolation_is_exact_at_simulated_sizes_and_linear_between():
    known = {100: 1.0, 300: 2.0}
    assert interpolate_seconds(known, 100) == 1.0
    assert interpolate_seconds(known, 200) == pytest.approx(1.5)
    assert interpolate_seconds(known, 400) == pytest.approx(2.5)


def test_steps_carry_the_timeline_and_a_band_over_every_range():
    rows = fake_rows(points(PLAT, ["ring"], [8], ["float32"], 25.0, {"colors": 2}))
    (row,) = steps(Projection(rows, PLAT, 25.0, 32))
    whole = 32 / 100.0  # the single-node rate times the whole step: the optimizer comes out of it
    assert row["compute_s"] + row["optimizer_s"] == pytest.approx(whole)
    assert 0 < row["optimizer_s"] < whole / 10
    assert row["step_s"] == pytest.approx(whole + row["allreduce_s"])  # overlap none: nothing hides
    assert row["efficiency"] == pytest.approx(whole / row["step_s"])
    assert row["images_per_s_low"] < row["images_per_s"] < row["images_per_s_high"]
    described = [r for r in rows if r["variant"] == ""]
    (narrow,) = steps(Projection(described, PLAT, 25.0, 32))  # the band without the network's corners
    assert row["images_per_s_low"] < narrow["images_per_s_low"]  # the slow corner widens it
    assert row["band_spans_network"]
    assert not narrow["band_spans_network"]
    assert row["time_90_epochs_s"] == pytest.approx(90 * 1_281_167 / row["images_per_s"])
    assert row["buckets"] == 5
    assert row["gradient_bytes"] == resnet50().parameters * 4


def claim(**over):
    base = {
        "id": "a",
        "paper": "A",
        "claim": "eff",
        "cite": "c",
        "platform": "x",
        "algorithm": "torus2d",
        "ranks": 8,
        "dtype": "float32",
        "metric": "efficiency",
        "published": 0.95,
        "if_off": "the links",
    }
    return base | over


@pytest.mark.parametrize(
    ("published", "low", "high", "verdict"),
    [
        (1.0, 0.9, 1.1, "consistent"),
        (1.0, 0.5, 1.1, "undetermined"),
        (1.0, 1.3, 1.5, "inconsistent"),
        (None, 1.1, 1.5, "for reference"),
        (0.93, 0.90, 0.92, "consistent"),  # just outside a narrow band, within the tolerance
        (1.25, 0.9, 1.1, "undetermined"),  # beyond the band, but within 20% of its edge
        (2.0, 1.0, 1.1, "inconsistent"),
    ],
)
def test_verdicts_from_the_band_within_twenty_percent(published, low, high, verdict):
    assert judge(published, (low + high) / 2, low, high, "images_per_s")[0] == verdict


@pytest.mark.parametrize(
    ("published", "low", "high", "verdict"),
    [
        (0.95, 0.92, 0.99, "consistent"),
        (0.95, 0.66, 0.99, "undetermined"),
        (0.95, 0.79, 0.85, "inconsistent"),  # within 20% as a ratio (0.95 / 1.2 = 0.79), ten points off
        (0.95, 0.91, 0.93, "consistent"),  # two points below, within five
        (0.90, 0.92, 0.95, "consistent"),
        (0.90, 0.96, 0.99, "inconsistent"),
    ],
)
def test_efficiency_is_judged_within_five_percentage_points(published, low, high, verdict):
    assert judge(published, (low + high) / 2, low, high, "efficiency")[0] == verdict


@pytest.mark.parametrize(
    ("bound", "low", "high", "verdict"),
    [
        ("floor", 1.2e6, 2.0e6, "consistent"),  # far above "over 1.05 M" still agrees
        ("floor", 0.9e6, 1.3e6, "consistent"),  # 0.9 M is within 20% of the floor
        ("floor", 0.5e6, 1.3e6, "undetermined"),
        ("floor", 0.5e6, 0.8e6, "inconsistent"),
        ("ceiling", 0.2e6, 1.0e6, "consistent"),  # steps well inside a whole run's time
        ("ceiling", 1.0e6, 1.5e6, "undetermined"),
        ("ceiling", 1.4e6, 1.5e6, "inconsistent"),
        ("point", 1.2e6, 2.0e6, "undetermined"),
    ],
)
def test_a_floor_or_a_ceiling_is_judged_on_its_side_only(bound, low, high, verdict):
    assert judge(1.05e6, (low + high) / 2, low, high, "images_per_s", bound)[0] == verdict


def test_inconsistent_says_by_how_much_beyond_the_edge():
    assert judge(1.0, 1.4, 1.25, 1.5, "images_per_s") == ("inconsistent", pytest.approx(1 / 1.25 - 1))
    assert judge(0.95, 0.8, 0.75, 0.85, "efficiency") == ("inconsistent", pytest.approx(0.10))


@pytest.mark.parametrize(("low", "high", "verdict"), [(1.1, 1.6, "separated"), (0.9, 1.2, "not separated")])
def test_a_ratio_with_nothing_published_says_whether_the_band_separates_the_two(low, high, verdict):
    assert judge(None, 1.2, low, high, "step_speedup_over")[0] == verdict


def test_claims_are_judged_on_their_band_and_name_the_assumption_when_outside():
    rows = fake_rows(points(PLAT, ["ring", "torus2d"], [8], ["float32"], 25.0, {"colors": 2}))
    proj = {"x": Projection(rows, PLAT, 25.0, 32)}
    far = claim(published=0.10)
    ratio = claim(id="b", metric="step_speedup_over", over="ring", published=None)
    eff, speed = judged([far, ratio], proj)
    assert eff["simulated_low"] <= eff["simulated"] <= eff["simulated_high"]
    assert eff["verdict"] == "inconsistent"
    assert eff["assumption_to_revisit"] == "the links"
    assert speed["simulated"] > 1  # the ring moves twice the bytes here
    assert speed["simulated_low"] < 1 < speed["simulated_high"]  # but hides behind the backward pass with overlap
    assert speed["verdict"] == "not separated"
    missing = judged([claim(ranks=16)], proj)[0]
    assert missing["verdict"] == "not simulated"


def test_a_ratio_band_is_the_outer_bound_and_separates_what_no_setting_confuses():
    ratio = claim(id="b", metric="speedup_over", over="ring", published=None)
    rows = fake_rows(points(PLAT, ["ring", "torus2d"], [8], ["float32"], 25.0, {"colors": 2}), ring_factor=20)
    (row,) = judged([ratio], {"x": Projection(rows, PLAT, 25.0, 32)})
    # outer bound: the ring's fastest all-reduce over torus2d's slowest (the slow corner, twice as slow)
    assert row["simulated_low"] == pytest.approx(row["simulated"] / 2, rel=0.05)
    assert row["simulated_low"] > 1
    assert row["verdict"] == "separated"


def test_sensitivity_moves_each_ranged_number_alone():
    rows = fake_rows(points(PLAT, ["torus2d"], [8], ["float32"], 25.0, {"colors": 2}, sensitivity=True))
    table = {r["assumption"]: r for r in sensitivity([claim()], {"x": Projection(rows, PLAT, 25.0, 32)})}
    assert set(table) == {"link_GBps", "images_per_s_per_accelerator", "overlap"}
    rate = table["images_per_s_per_accelerator"]
    assert rate["at_slow_end"] > rate["at_fast_end"]  # a slower accelerator hides more of the same all-reduce
    assert table["overlap"]["at_fast_end"] > table["overlap"]["at_slow_end"]  # hiding the all-reduce pays
    link = table["link_GBps"]
    assert link["at_fast_end"] > link["at_slow_end"]  # the link alone at its slow end: every all-reduce twice as slow


def test_a_claim_left_out_is_not_simulated_and_says_why():
    """simulate.claims_left_out: the claim's points are not simulated, its row says which key left it out (and one
    above claims_max_ranks says that); an unknown id is an error naming the key and the ids there are."""
    from scalerepro.errors import UserError
    from scalerepro.sim.claims import check_left_out
    from scalerepro.sim.scale import claim_points

    kept, dropped = claim(id="kept"), claim(id="dropped", algorithm="ring")
    found = claim_points([kept, dropped], [PLAT], 25.0, {"colors": 2}, 256, left_out=["dropped"])
    assert {p.algorithm for p in found} == {"torus2d"}
    assert len(found) == len(claim_points([kept], [PLAT], 25.0, {"colors": 2}, 256))
    proj = {"x": Projection(fake_rows(found), PLAT, 25.0, 32)}
    too_big = claim(id="big", ranks=1024)
    rows = judged([kept, dropped, too_big], proj, 256, ["dropped"])
    assert [r["why_not"] for r in rows] == [
        "",
        "left out by simulate.claims_left_out",
        "1024 ranks is above simulate.claims_max_ranks",
    ]
    check_left_out([kept, dropped], ["dropped"])
    with pytest.raises(UserError, match=r"simulate.claims_left_out: 'nope' is not the id of a claim at scale"):
        check_left_out([kept, dropped], ["nope"])


def test_a_claim_row_names_what_it_rests_on_and_analyze_keeps_every_column():
    """The judged row names the ranged number that moves the claim's figure most alone (here the compute rate,
    which the sensitivity table also ranks first), with its ends and the figure at each; and analyze's papers table
    keeps every column the row has, so the card sees the claim's bound and what it rests on."""
    from scalerepro.analysis.analyze import PAPERS_COLUMNS

    rows = fake_rows(points(PLAT, ["torus2d"], [8], ["float32"], 25.0, {"colors": 2}, sensitivity=True))
    proj = {"x": Projection(rows, PLAT, 25.0, 32)}
    (row,) = judged([claim(bound="floor")], proj)
    table = sensitivity([claim()], proj)
    top = max(table, key=lambda r: r["swing"])
    assert row["rests_on"] == top["assumption"]
    assert (row["rests_on_low"], row["rests_on_high"]) == (top["at_slow_end"], top["at_fast_end"])
    assert row["rests_on_ends"] == f"{top['slow_end']} to {top['fast_end']}"
    assert set(row) <= set(PAPERS_COLUMNS)
    ratio = claim(id="r", metric="speedup_over", over="ring", published=None)
    rings = fake_rows(points(PLAT, ["torus2d", "ring"], [8], ["float32"], 25.0, {"colors": 2}))
    (alone,) = judged([ratio], {"x": Projection(rings, PLAT, 25.0, 32)})
    assert alone["rests_on"] == ""  # nothing varied moves an all-reduce ratio without the network's numbers alone


def test_a_number_citing_the_claims_own_source_makes_the_figure_not_independent():
    """Any number that sets a time and cites the source the claim comes from (a secondary one too) marks the claim's
    row not independent, naming the number; the run's size citing it does not."""
    from dataclasses import replace

    rows = fake_rows(points(PLAT, ["torus2d"], [8], ["float32"], 25.0, {"colors": 2}))
    mine = claim(source="ann#scaling")
    sized = replace(PLAT, source_ids={"max_ranks": ("ann",)})
    linked = replace(PLAT, source_ids={"max_ranks": ("ann",), "link_GBps": ("ann", "other")})
    (free,) = judged([mine], {"x": Projection(rows, sized, 25.0, 32)})
    (bound,) = judged([mine], {"x": Projection(rows, linked, 25.0, 32)})
    assert (free["independent"], free["depends_on"]) == (True, "")
    assert (bound["independent"], bound["depends_on"]) == (False, "link_GBps")


def test_a_step_names_the_network_variants_whose_all_reduce_is_a_sum_over_patterns_out_of_step():
    """Where the slow corner's points came back approximate (their full simulation over simulate.full_max_messages),
    the step's row says so and names that corner; every other row says nothing."""
    from scalerepro.sim.patterns import APPROXIMATE
    from scalerepro.sim.scale import steps

    rows = fake_rows(points(PLAT, ["ring", "torus2d"], [8], ["float32"], 25.0, {"colors": 2}))
    for r in rows:
        r["method"] = APPROXIMATE if (r["algorithm"], r["variant"]) == ("ring", "slow network") else "patterns"
    found = {
        r["algorithm"]: r["approximate"] for r in steps(Projection(rows, PLAT, 25.0, 32)) if r["dtype"] == "float32"
    }
    assert found == {"ring": "slow network", "torus2d": ""}
