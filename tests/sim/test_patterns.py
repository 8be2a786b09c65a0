"""The fast path (a schedule's stages simulated once per pattern) against the full simulation of every stage."""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from scalerepro.comm.algorithms import names
from scalerepro.comm.schedule import Recv, Schedule, Send
from scalerepro.sim import simulate, simulate_feasible
from scalerepro.sim.engine import Point
from scalerepro.sim.patterns import (
    APPROXIMATE,
    OUT_OF_STEP,
    PIPELINED,
    SIZE_TOLERANCE,
    UNMATCHED,
    group_stages,
)
from scalerepro.sim.platforms import Platform, load_platforms
from tests.support import REPO

pytestmark = pytest.mark.usefixtures("needs_simgrid")

TORUS = Platform("torus", "torus", 64, 40.0, 1.0, 3e-12, reduction="streamed")
NODES = Platform(  # nodes of 4 ranks, 2 adapters each, a 2:1 core: messages share links inside a stage and across
    "nodes",
    "fattree",
    64,
    12.5,
    5.0,
    4e-12,
    ranks_per_node=4,
    intra_GBps=40.0,
    intra_latency_us=5.0,
    nics_per_node=2,
    oversubscription=2.0,
)
WIDE = Platform(  # nodes of 8 ranks on 8 adapters, a sum slower than the links
    "wide", "fattree", 64, 50.0, 3.0, 2e-10, ranks_per_node=8, intra_GBps=450.0, intra_latency_us=2.0, nics_per_node=8
)
PLATFORMS = {p.name: p for p in (TORUS, NODES, WIDE)}
ALGORITHMS = [a for a in names() if a != "auto"]
NBYTES = 4 * 1_000_003  # a prime count of floats: no rank count splits it evenly


CORE = ("gloo", "multicolor-ring", "nccl", "ring", "torus2d", "torus2d-4link")  # node-crossing rings share the core
IN_FULL = {  # besides the pipelined trees: what each platform's pattern runs find out of step
    ("torus", 16): (),
    ("torus", 24): ("native", "rabenseifner", "torus2d", "torus2d-4link"),  # 4 x 6: routes of several hops
    ("nodes", 16): CORE,
    ("nodes", 24): (*CORE, "hierarchical", "native", "rabenseifner"),
    ("wide", 16): ("nccl", "torus2d", "torus2d-4link"),  # sums slower than the links; halves apart
    ("wide", 24): ("nccl", "torus2d", "torus2d-4link"),
}


@pytest.mark.parametrize("platform", [TORUS, NODES, WIDE], ids=lambda p: p.name)
@pytest.mark.parametrize("ranks", [16, 24])
def test_every_algorithm_by_pattern_within_two_percent_of_every_stage(platform, ranks):
    """Every algorithm on a torus and on two fat trees, at rank counts whose grids are square and not: the fast
    result within 2% of the full simulation's; the full simulation runs for the pipelined trees and for what the
    pattern runs find out of step (:data:`IN_FULL`), and for nothing else."""
    points = [Point(a, ranks, NBYTES, platform, method=m) for a in ALGORITHMS for m in ("fast", "full")]
    rows, _ = simulate_feasible(points, "test", 0)
    assert len(rows) == 2 * len(ALGORITHMS)
    for fast, full in zip(rows[::2], rows[1::2], strict=True):
        assert (fast["algorithm"], full["method"]) == (full["algorithm"], "full")
        assert fast["simulated_s"] == pytest.approx(full["simulated_s"], rel=0.02), fast["algorithm"]
    in_full = {r["algorithm"]: r["why_full"] for r in rows[::2] if r["method"] == "full"}
    want = {"dbtree": PIPELINED, "multicolor": PIPELINED} | dict.fromkeys(IN_FULL[platform.name, ranks], OUT_OF_STEP)
    assert in_full == want


def test_ranks_out_of_step_over_a_shared_core_are_simulated_in_full():
    """The ring over Kumar et al.'s cluster at its slow corner (a 2:1 core) at 256 ranks: ranks at node borders end
    each stage late while the crossing messages share the core, which the sum over patterns makes 21% slow at
    26 MB; the pattern run sees it and the full simulation's number comes back, unless its 130,560 messages are
    over the limit, where the sum comes back marked approximate."""
    plat = load_platforms(REPO / "config" / "platforms.yaml")["kumar-minsky"].corner(False)
    point = Point("ring", 256, 26062752, plat)
    fast, full, over = simulate([point, replace(point, method="full"), replace(point, full_max_messages=130_559)])
    assert (fast["method"], fast["why_full"]) == ("full", OUT_OF_STEP)
    assert fast["simulated_s"] == full["simulated_s"]
    assert (over["method"], over["why_full"]) == (APPROXIMATE, f"{OUT_OF_STEP}, 130560 messages")
    assert 1.15 < over["simulated_s"] / full["simulated_s"] < 1.25


@pytest.mark.parametrize(("platform", "ranks"), [(p, n) for (p, n), algos in IN_FULL.items() if algos])
def test_out_of_step_over_the_limit_keeps_the_sum_within_its_stated_spread(platform, ranks):
    """What the pattern runs find out of step (:data:`IN_FULL`), with the full simulation's messages over
    ``full_max_messages``: the sum over patterns comes back marked approximate, between the 2% under and 22%
    over the full simulation that patterns.py and the config schema state."""
    algos = IN_FULL[platform, ranks]
    points = [Point(a, ranks, NBYTES, PLATFORMS[platform], method="full") for a in algos]
    rows = simulate([replace(pt, method="fast", full_max_messages=1) for pt in points] + points)
    for over, full in zip(rows[: len(algos)], rows[len(algos) :], strict=True):
        assert over["method"] == APPROXIMATE, over["algorithm"]
        assert 0.98 <= over["simulated_s"] / full["simulated_s"] <= 1.23, over["algorithm"]


@pytest.mark.parametrize("ranks", [8, 64])
def test_a_ring_is_two_patterns_at_any_rank_count(ranks):
    """The ring's 2(p-1) stages are one reduce-scatter pattern and one all-gather pattern, whatever p."""
    row = simulate([Point("ring", ranks, NBYTES, WIDE)])[0]
    assert (row["method"], row["patterns"], row["stages"]) == ("patterns", 2, 2 * (ranks - 1))


def test_lanes_out_of_step_are_simulated_in_full():
    """torus2d's halves on a fat tree, one inside its node while the other crosses the network: the pattern run
    shows the lanes ending apart, and the full simulation's number is what comes back."""
    fast, full = simulate([Point("torus2d", 16, NBYTES, NODES, method=m) for m in ("fast", "full")])
    assert (fast["method"], fast["why_full"]) == ("full", OUT_OF_STEP)
    assert fast["simulated_s"] == full["simulated_s"]


def test_pipelined_trees_are_simulated_in_full():
    """multicolor's pipelined trees overlap one stage with the next, so no stage is alone: the full simulation."""
    row = simulate([Point("multicolor", 16, 64 << 20, NODES, chunk_bytes=4 << 20)])[0]
    assert (row["method"], row["why_full"]) == ("full", PIPELINED)


def test_sizes_that_differ_by_an_element_share_a_pattern_and_err_upwards():
    """A ring of 7 over 1,000,003 floats: chunks of 142,857 and 142,858 floats, so no two stages are alike byte for
    byte; they share two patterns padded to the larger chunk, and the result is above the full one by less than
    the tolerance."""
    point = Point("ring", 7, NBYTES, TORUS)
    found = group_stages(point.read)
    assert not isinstance(found, str)
    assert found.counts == (6, 6)
    fast, full = simulate([point, replace(point, method="full")])
    assert 1 <= fast["simulated_s"] / full["simulated_s"] <= 1 + SIZE_TOLERANCE


def test_chunks_one_element_apart_share_a_pattern_however_small():
    """A ring of 7 over 1,003 floats: chunks of 143 and 144 floats, 0.7% apart, beyond the tolerance but one element
    apart, as the floor of n/p and one more always are: two patterns, above the full result by at most 1/143."""
    point = Point("ring", 7, 4 * 1003, TORUS)
    found = group_stages(point.read)
    assert not isinstance(found, str)
    assert found.counts == (6, 6)
    fast, full = simulate([point, replace(point, method="full")])
    assert 1 <= fast["simulated_s"] / full["simulated_s"] <= 1 + 1 / 143


def test_lanes_of_different_sizes_are_padded_each_to_its_own_largest():
    """torus2d on a 4 x 6 grid: one half rings over 4 ranks while the other rings over 6, so a stage holds chunks
    of two sizes, each lane's one element apart across ranks. Each lane padded to its own largest, its 16 stages
    are 6 patterns, as its phases are (one size range for the whole stage left most stages apart)."""
    found = group_stages(Point("torus2d", 24, NBYTES, NODES).read)
    assert not isinstance(found, str)
    assert (found.counts, found.stages) == ((3, 2, 3, 3, 2, 3), 16)


def test_stages_that_do_not_match_within_themselves_are_not_grouped():
    """Rank 0 sends in its first stage, rank 1 receives in its second: no stage runs alone, so no plan."""
    sender = Schedule((((Send(1, 0, 8),), ()),))
    receiver = Schedule(((((), (Recv(0, 0, 8),))),))
    assert group_stages(lambda: [sender, receiver]) == UNMATCHED


def test_a_long_point_is_said_as_it_ends_with_its_wall_time_and_method(monkeypatch, capsys):
    """A point that takes SAID_S or longer is said on stderr as it ends (here every point: SAID_S 0), naming the
    point, its network variant, its wall seconds and how it was simulated."""
    import scalerepro.sim as sim

    monkeypatch.setattr(sim, "SAID_S", 0.0)
    simulate([Point("ring", 8, NBYTES, TORUS), Point("ring", 8, NBYTES, replace(TORUS, variant="slow network"))])
    said = capsys.readouterr().err.splitlines()
    assert sorted(re.sub(r"[0-9.]+ s \(", "N s (", line) for line in said) == [
        f"simulated ring on 8 ranks of torus (slow network), {NBYTES} B: N s (patterns)",
        f"simulated ring on 8 ranks of torus, {NBYTES} B: N s (patterns)",
    ]
