"""SimGrid runs of the algorithms' schedules: exact where the alpha-beta-gamma formula is, topology where it is not."""

from __future__ import annotations

import subprocess
import sys

import pytest

from scalerepro.errors import UserError
from scalerepro.sim import simulate
from scalerepro.sim.engine import Point, load_simgrid


@pytest.fixture(scope="module", autouse=True)
def _simgrid():
    try:
        load_simgrid()
    except UserError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("p, nbytes", [(4, 1_000_000), (3, 4_000_004)])
def test_ring_on_a_ring_of_links_matches_the_formula(p, nbytes):
    """One hop per message, no sharing: t = 2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma exactly."""
    alpha, link, gamma = 2e-6, 12.5, 1e-11
    row = simulate([Point("ring", p, nbytes, (p,), link, alpha * 1e6, gamma)])[0]
    n = nbytes // 4 * 4
    want = 2 * (p - 1) * alpha + 2 * n * (p - 1) / p / (link * 1e9) + n * (p - 1) / p * gamma
    assert row["simulated_s"] == pytest.approx(want, rel=1e-3)


def test_torus2d_beats_the_ring_on_a_torus_at_64_ranks():
    rows = simulate([Point(a, 64, 16 << 20, (8, 8)) for a in ("ring", "torus2d")])
    ring, torus = (r["simulated_s"] for r in rows)
    assert torus < 0.6 * ring


def test_point_errors_name_the_field():
    with pytest.raises(UserError, match=r"torus dims \[3, 3\] hold 9 ranks, not 8"):
        Point("ring", 8, 1024, (3, 3))


def test_missing_simgrid_is_one_line_naming_the_install(tmp_path):
    (tmp_path / "simgrid.py").write_text("raise ImportError('not here')\n")
    proc = subprocess.run([sys.executable, "-m", "scalerepro.cli", "simulate", "--out", str(tmp_path / "out")],
                          capture_output=True, text=True, env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
                          timeout=120)
    assert proc.returncode != 0
    assert "apt-get install python3-simgrid" in proc.stderr and "Traceback" not in proc.stderr, proc.stderr


def test_cli_writes_rows_and_parameters(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "scalerepro.cli", "simulate", "--algos", "ring,multicolor",
                           "--ranks", "4", "--bytes", "65536", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    csv = (tmp_path / "simulation.csv").read_text().splitlines()
    assert csv[0].startswith("algorithm,ranks,bytes") and len(csv) == 3
    assert '"link_GBps": 70.0' in (tmp_path / "simulation.json").read_text()
