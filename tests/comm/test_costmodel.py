"""Cost model: recovers known parameters, projects sensibly, CLI end to end."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from scalerepro.comm.costfit import Fit, fit, fit_regimes, for_projection, regime
from scalerepro.comm.costprojection import Topology, project_time, projection
from scalerepro.comm.costterms import terms
from scalerepro.comm.schedule import Spec
from scalerepro.errors import UserError

SCHEDULED = ["ring", "multicolor", "multicolor-ring", "torus2d", "multiring", "rabenseifner"]


def synthetic_rows(algo, alpha, beta, gamma):
    rows = []
    for p in (2, 3, 4, 8):
        for n in (8, 1024, 65536, 1 << 20, 1 << 24):
            a, b, g = terms(algo, Spec(p, 0, n // 4))
            rows.append(
                {"algorithm": algo, "world_size": p, "bytes": n, "time_us": (a * alpha + b * beta + g * gamma) * 1e6}
            )
    return rows


def test_terms_are_read_off_the_schedules():
    n, p = 1 << 20, 4
    a, b, g = terms("ring", Spec(p, 0, n // 4))
    assert (a, b, g) == (2 * (p - 1), pytest.approx(2 * n * (p - 1) / p), pytest.approx(n * (p - 1) / p))
    a, b, g = terms("rabenseifner", Spec(p, 0, n // 4))
    assert a == 2 * 2
    assert b == pytest.approx(2 * n * (p - 1) / p)
    assert terms("native", Spec(p, 0, n // 4)) == terms(
        "rabenseifner", Spec(p, 0, n // 4)
    )  # MPICH's large-message choice


@pytest.mark.parametrize(("kind", "rails"), [("fattree", 1), ("fattree", 2), ("torus2d", 1)])
def test_projections_differ_wherever_the_schedules_do(kind, rails):
    """Same fitted node for every algorithm: only their schedules can set the projected numbers apart."""
    topo = Topology(kind, ranks_per_node=4, rails=rails)
    ms = {
        algo: project_time(Fit(algo, "dedicated", 5e-6, 1e-10, 2e-11, 10, 0.0, 0.0, ()), topo, 102e6, 64, colors=4)
        for algo in SCHEDULED
    }
    assert len({round(v, 9) for v in ms.values()}) == len(SCHEDULED), ms
    if kind == "torus2d":
        assert ms["torus2d"] < ms["ring"]  # both dimensions' links at once, and sqrt(p)-long rings
    if rails == 2:
        assert ms["multicolor-ring"] < ms["ring"]  # the colors' inter-node hops use both rails


@pytest.mark.parametrize("algo", ["ring", "rabenseifner", "torus2d", "native"])
def test_fit_recovers_known_parameters(algo):
    f = fit(algo, synthetic_rows(algo, 5e-6, 1e-9, 3e-10), 3e-10)
    assert f.alpha_s == pytest.approx(5e-6, rel=1e-6)
    assert f.beta_s_per_byte == pytest.approx(1e-9, rel=1e-6)
    assert f.max_rel_residual < 1e-6
    assert f.points == 20


def test_fit_needs_points_and_known_algorithm():
    with pytest.raises(UserError, match="at least 2 benchmark points"):
        fit("ring", [], 1e-10)
    with pytest.raises(UserError, match="no cost model"):
        fit("carrier-pigeon", [], 1e-10)


def test_projection_where_colors_and_topology_pay():
    ring = fit("ring", synthetic_rows("ring", 5e-6, 1e-9, 3e-10), 3e-10)
    color = fit("multicolor-ring", synthetic_rows("multicolor-ring", 5e-6, 1e-9, 3e-10), 3e-10)
    one, two = Topology("fattree", rails=1, intra_GBps=150), Topology("fattree", rails=2, intra_GBps=150)
    n = 102e6
    assert project_time(color, one, n, 256) == pytest.approx(project_time(ring, one, n, 256))  # one adapter: no gain
    assert project_time(color, two, n, 256, colors=2) < project_time(ring, two, n, 256)
    rows = projection([ring], [one, Topology("torus2d")], [64, 256, 1024], n, 2)
    assert len(rows) == 6
    assert all(r["source"] == "projected" and r["ms"] > 0 for r in rows)
    assert [r["ms"] for r in rows if r["topology"] == "fattree"] == sorted(
        r["ms"] for r in rows if r["topology"] == "fattree"
    )


def test_regimes_are_fitted_apart_and_the_dedicated_one_projects():
    """Oversubscribed points (10x alpha, 2x beta) would spoil a joint fit; per regime both are exact."""
    fast = [r | {"ranks_per_core": 1.0} for r in synthetic_rows("ring", 5e-6, 1e-9, 3e-10)]
    slow = [r | {"ranks_per_core": 2.0} for r in synthetic_rows("ring", 5e-5, 2e-9, 3e-10)]
    fits = fit_regimes(["ring"], fast + slow, 3e-10)
    by = {f.regime: f for f in fits}
    assert set(by) == {"dedicated", "oversubscribed"}
    assert by["dedicated"].alpha_s == pytest.approx(5e-6, rel=1e-6)
    assert by["dedicated"].max_rel_residual < 1e-6
    assert by["oversubscribed"].beta_s_per_byte == pytest.approx(2e-9, rel=1e-6)
    assert fit("ring", fast + slow, 3e-10).median_rel_residual > 0.05  # the joint fit explains neither
    assert for_projection(fits) == [by["dedicated"]]
    assert for_projection([by["oversubscribed"]]) == [by["oversubscribed"]]
    assert regime({}) == "unknown"
    assert regime({"ranks_per_core": 0.5}) == "dedicated"


def test_bad_topology_is_named():
    with pytest.raises(UserError, match="fattree or torus2d"):
        Topology("dragonfly")


def test_cli_fits_and_projects(tmp_path):
    bench = {
        "world_size": 2,
        "hosts": ["h", "h"],
        "reduction_s_per_byte": 3e-10,
        "ranks_per_node": 2,
        "cores_per_node": 2,
        "rows": [r for r in synthetic_rows("ring", 5e-6, 1e-9, 3e-10) if r["world_size"] == 2],
    }
    (tmp_path / "n2.json").write_text(json.dumps(bench))
    bench4 = dict(
        bench, world_size=4, rows=[r for r in synthetic_rows("ring", 5e-6, 1e-9, 3e-10) if r["world_size"] == 4]
    )
    (tmp_path / "n4.json").write_text(json.dumps(bench4))
    out = tmp_path / "cm.json"
    args = ["cost-model", "--bench", str(tmp_path / "n*.json"), "--ranks", "64,256,1024", "--out", str(out)]
    proc = subprocess.run(
        [sys.executable, "-m", "scalerepro.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert "median|res|" in proc.stderr
    assert "projected ms per all-reduce of 102.2 MB" in proc.stderr
    doc = json.loads(out.read_text())
    assert doc["fits"][0]["alpha_s"] == pytest.approx(5e-6, rel=1e-6)
    assert doc["fits"][0]["regime"] == "dedicated"
    assert {r["fit_regime"] for r in doc["projection"]} == {"dedicated"}
    assert {r["ranks"] for r in doc["projection"]} == {64, 256, 1024}
