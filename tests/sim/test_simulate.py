"""SimGrid runs of the algorithms' schedules: exact where the alpha-beta-gamma formula is, topology where it is not."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace

import pytest

from scalerepro.comm.costterms import Network, profile, schedules
from scalerepro.comm.placement import Placement
from scalerepro.errors import UserError
from scalerepro.sim import simulate
from scalerepro.sim.engine import Point
from scalerepro.sim.platforms import Platform
from tests.support import REPO

pytestmark = pytest.mark.usefixtures("needs_simgrid")


def one_node(p: int, alpha_us: float = 2.0, gbps: float = 12.5, gamma: float = 1e-11) -> Platform:
    """p ranks on one node, each with its own port (out: latency alpha; in) of ``gbps``."""
    return Platform(
        "node", "fattree", p, gbps, 0.0, gamma, ranks_per_node=p, intra_GBps=gbps, intra_latency_us=alpha_us
    )


@pytest.mark.parametrize(("p", "nbytes"), [(4, 1_000_000), (3, 4_000_004)])
def test_ring_on_its_ports_matches_the_formula(p, nbytes):
    """One message per link per stage, no sharing: t = 2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma exactly."""
    alpha, link, gamma = 2e-6, 12.5, 1e-11
    row = simulate([Point("ring", p, nbytes, one_node(p, alpha * 1e6, link, gamma))])[0]
    n = nbytes // 4 * 4
    want = 2 * (p - 1) * alpha + 2 * n * (p - 1) / p / (link * 1e9) + n * (p - 1) / p * gamma
    assert row["simulated_s"] == pytest.approx(want, rel=1e-3)


@pytest.mark.parametrize("gamma", [1e-11, 2e-10])
def test_streamed_sums_cost_the_longer_of_transfer_and_sum_per_stage(gamma):
    """Summing as the bytes arrive (from the stage's start): a reduce-scatter stage takes max(alpha + c beta,
    c gamma) and an all-gather stage alpha + c beta, c = n/p; a slow sum (2e-10 s/B against 8e-11 s/B of link)
    sets the stage."""
    p, nbytes, alpha, link = 4, 4_000_000, 2e-6, 12.5
    plat = replace(one_node(p, alpha * 1e6, link, gamma), reduction="streamed")
    got = simulate([Point("ring", p, nbytes, plat)])[0]["simulated_s"]
    c, beta = nbytes / p, 1 / (link * 1e9)
    stage = alpha + c * beta
    assert got == pytest.approx((p - 1) * (stage + max(stage, c * gamma)), rel=1e-3)
    after = simulate([Point("ring", p, nbytes, replace(plat, reduction="after"))])[0]["simulated_s"]
    assert got < after


@pytest.mark.parametrize("reduction", ["after", "streamed"])
@pytest.mark.parametrize(("algo", "p"), [("torus2d", 4), ("torus2d-4link", 16)])
def test_simulation_and_cost_model_agree_on_the_reduction(algo, p, reduction):
    """A sum slower than the links (gamma 2e-10 s/B, links 1e-10): simulator and cost model within 2% whether
    a rank sums after a stage's bytes arrive or as they stream in."""
    plat = replace(one_node(p, 5.0, 10.0, 2e-10), reduction=reduction)
    pt = Point(algo, p, 3 << 20, plat)
    got = simulate([pt])[0]["simulated_s"]
    prof = profile(schedules(algo, pt.spec()), p, 4, Placement(p))
    want = prof.cost(Network(5e-6, 1 / 10e9, 2e-10, reduction=reduction)).seconds
    assert got == pytest.approx(want, rel=0.02)


@pytest.mark.parametrize(("algo", "p"), [("multicolor-ring", 4), ("rabenseifner", 4), ("torus2d", 4), ("multiring", 6)])
def test_simulation_and_cost_model_agree_on_one_node(algo, p):
    """Same schedules, same links: the simulator and the closed-form profile give the same time (gamma 0)."""
    plat = one_node(p, 5.0, 10.0, 0.0)
    pt = Point(algo, p, 3 << 20, plat)
    got = simulate([pt])[0]["simulated_s"]
    prof = profile(schedules(algo, pt.spec()), p, 4, Placement(p))
    want = prof.cost(Network(5e-6, 1 / 10e9)).seconds
    assert got == pytest.approx(want, rel=0.02)


def test_torus2d_beats_the_ring_on_a_torus_at_64_ranks():
    torus = Platform("torus", "torus", 64, 12.5, 2.0, 0.0)
    rows = simulate([Point(a, 64, 16 << 20, torus) for a in ("ring", "torus2d")])
    ring, torus2d = (r["simulated_s"] for r in rows)
    assert torus2d < 0.6 * ring


@pytest.mark.parametrize("colored", ["multicolor", "multicolor-ring"])
def test_a_second_adapter_per_node_serves_the_colors_not_the_ring(colored):
    """8 ranks on 2 nodes of 4: each ring crosses between nodes once per direction, so one adapter is enough for
    one ring, while two colors (trees or rings) cross on two different local ranks and use an adapter each."""

    def plat(nics: int) -> Platform:
        return Platform("two", "fattree", 8, 1.0, 0.0, 0.0, ranks_per_node=4, intra_GBps=1000.0, nics_per_node=nics)

    rows = simulate([Point(a, 8, 8 << 20, plat(n)) for a in ("ring", colored) for n in (1, 2)])
    ring1, ring2, mc1, mc2 = (r["simulated_s"] for r in rows)
    assert ring2 == pytest.approx(ring1, rel=1e-6)
    assert mc2 < 0.75 * mc1


def test_a_pipelined_tree_of_two_ranks_takes_its_chunks_plus_one_chunk_times():
    """Rank 1 sends each chunk up, rank 0 sends it back down: with c chunks in order that is c + 1 chunk times
    (latency included), where chunks sharing the links at once would take 2 whole-buffer times."""
    alpha, link, nbytes = 5e-6, 10.0, 1 << 22
    plat = one_node(2, alpha * 1e6, link, 0.0)
    piped = simulate([Point("multicolor", 2, nbytes, plat, colors=1, chunk_bytes=1 << 20)])[0]["simulated_s"]
    chunks = 4 * 1  # FILL chunks per level, one level; 1 MiB each
    assert piped == pytest.approx((chunks + 1) * (alpha + nbytes / chunks / (link * 1e9)), rel=1e-3)


def test_pipelined_trees_overlap_their_levels_where_the_uncut_ones_cannot():
    """Both colors of 16 ranks on 4 nodes: pipelined in chunks, in order, at most half the time of the trees
    with each part in one piece (every level waits for the whole part)."""
    plat = Platform("four", "fattree", 16, 12.5, 5.0, 4e-12, ranks_per_node=4, intra_GBps=40.0, nics_per_node=2)
    rows = simulate([Point("multicolor", 16, 26 << 20, plat, chunk_bytes=c) for c in (0, 1 << 62)])
    piped, uncut = (r["simulated_s"] for r in rows)
    assert piped < 0.5 * uncut


def test_colored_trees_on_kumars_cluster_carry_what_two_colors_promise():
    """kumar-minsky as described, 64 ranks (16 nodes), 25 MiB of float32: two colors at least 1.3x one color's bus
    bandwidth and 0.85x the ring's; at 256 KiB the trees' 2 x 7 stages finish before the ring's 126."""
    from scalerepro.sim.platforms import load_platforms

    plat = load_platforms(REPO / "config" / "platforms.yaml")["kumar-minsky"]
    big, small = 25 << 20, 256 << 10
    points = [Point("multicolor", 64, big, plat), Point("multicolor", 64, big, plat, colors=1)]
    points += [Point("ring", 64, big, plat), Point("multicolor", 64, small, plat), Point("ring", 64, small, plat)]
    two, one, ring, trees_small, ring_small = (r for r in simulate(points, jobs=2))
    assert two["busbw_GBps"] >= 1.3 * one["busbw_GBps"]
    assert two["busbw_GBps"] >= 0.85 * ring["busbw_GBps"]
    assert trees_small["simulated_s"] < ring_small["simulated_s"]


def test_points_that_do_not_fit_name_the_platform():
    with pytest.raises(UserError, match=r"platform 'node' holds 1..4 ranks, not 8"):
        Point("ring", 8, 1024, one_node(4))
    with pytest.raises(UserError, match=r"12 ranks do not fill nodes of 8"):
        Platform("n", "fattree", 64, 1.0, 0.0, 0.0, ranks_per_node=8, intra_GBps=1.0).ranks(12)


def test_missing_simgrid_is_one_line_naming_the_install(tmp_path):
    (tmp_path / "simgrid.py").write_text("raise ImportError('not here')\n")
    proc = subprocess.run(
        [sys.executable, "-m", "scalerepro.cli", "simulate", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode != 0
    assert "apt-get install python3-simgrid" in proc.stderr, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr


def test_cli_writes_rows_and_parameters(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "scalerepro.cli",
            "simulate",
            "--platform",
            "minsky-ddl",
            "--algos",
            "ring,multicolor",
            "--ranks",
            "8",
            "--bytes",
            "65536",
            "--out",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    csv = (tmp_path / "simulation.csv").read_text().splitlines()
    assert csv[0].startswith("platform,variant,algorithm,ranks,bytes")
    assert len(csv) == 3
    doc = json.loads((tmp_path / "simulation.json").read_text())
    assert doc["platforms"][0]["nics_per_node"] == 2
    assert doc["platforms"][0]["sources"]["link_GBps"]


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--platform", "dgx-a100"], "no platform 'dgx-a100'; there are: tpu-v3-pod, minsky-ddl"),
        (["--algos", "ring,tree"], "unknown all-reduce algorithm 'tree'; choose one of: auto,"),
        (["--ranks", "4,x"], "--ranks 4,x: give comma-separated integers"),
        (["--platform", "minsky-ddl", "--ranks", "4", "--out", "/sys/scalerepro-x"], "--out /sys/scalerepro-x: cannot"),
    ],
)
def test_a_bad_input_is_the_one_line_on_stderr(tmp_path, flags, named):
    """Nothing before it: SimGrid's configuration log, printed as its module loads, is held back."""
    proc = subprocess.run(
        [sys.executable, "-m", "scalerepro.cli", "simulate", "--out", str(tmp_path), *flags],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [proc.stderr.strip()], proc.stderr
    assert proc.stderr.startswith("scalerepro simulate: error: "), proc.stderr
    assert named in proc.stderr, proc.stderr


@pytest.mark.parametrize("algo", ["multicolor", "native"])
def test_bucket_times_between_the_simulated_sizes_interpolate_within_a_percent(algo):
    """simulate-scale simulates the smallest and largest bucket only; a middle bucket interpolated agrees."""
    from scalerepro.sim.scale import interpolate_seconds

    plat = Platform(
        "two", "fattree", 16, 12.5, 5.0, 4e-12, ranks_per_node=4, intra_GBps=40.0, intra_latency_us=5.0, nics_per_node=2
    )
    sizes = [8_665_344, 17_850_368, 26_062_752]  # ResNet-50's float32 buckets at 25 MiB: smallest, middle, largest
    t = {r["bytes"]: r["simulated_s"] for r in simulate([Point(algo, 16, n, plat) for n in sizes], jobs=2)}
    known = {sizes[0]: t[sizes[0]], sizes[2]: t[sizes[2]]}
    assert interpolate_seconds(known, sizes[1]) == pytest.approx(t[sizes[1]], rel=0.01)


def test_a_claims_published_number_moves_no_simulated_number(tmp_path):
    """Every claim run at 8 ranks twice, its published figure changed the second time: every simulated number,
    band and step stays the same; only the published column and the verdicts may move."""
    import pandas as pd
    import yaml

    outs = []
    for factor in (1.0, 1.37):
        config = shutil.copytree(REPO / "config", tmp_path / f"config-{factor}")
        for path in sorted((config / "papers").glob("*.yaml")):
            doc = yaml.safe_load(path.read_text())
            for claim in doc["claims"]:
                if "at_scale" in claim:
                    claim["at_scale"]["ranks"] = 8
                    if claim["at_scale"]["published"] is not None:
                        claim["at_scale"]["published"] *= factor
            path.write_text(yaml.safe_dump(doc))
        out = tmp_path / f"out-{factor}"
        args = ["simulate-scale", "--platforms", str(config / "platforms.yaml"), "--papers", str(config / "papers")]
        args += ["--platform", "all", "--algos", "ring"]
        args += ["--ranks", "8", "--claims-max-ranks", "8", "--no-corners", "--jobs", "2", "--out", str(out)]
        proc = subprocess.run(
            [sys.executable, "-m", "scalerepro.cli", *args], capture_output=True, text=True, timeout=600, cwd=REPO
        )
        assert proc.returncode == 0, proc.stderr
        outs.append(out)
    for table in ("scale_points", "scale", "sensitivity"):
        a, b = (pd.read_csv(o / f"{table}.csv") for o in outs)
        timing = ["wall_s"]
        pd.testing.assert_frame_equal(a.drop(columns=timing, errors="ignore"), b.drop(columns=timing, errors="ignore"))
    first, second = (pd.read_csv(o / "papers.csv") for o in outs)
    simulated = ["simulated", "simulated_low", "simulated_high"]
    assert first[simulated].notna().all().all()
    pd.testing.assert_frame_equal(first[simulated], second[simulated])
    assert (second["published"].dropna() != first["published"].dropna()).all()
