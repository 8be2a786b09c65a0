"""The simulator against others' published all-reduce times: the measurements load, name bad entries, never feed
a platform, and (SimGrid) the clusters the README names stay within the tolerance at ResNet-50's bucket sizes."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml

from scalerepro.errors import UserError
from scalerepro.sim import simulate
from scalerepro.sim.engine import Point
from scalerepro.sim.platforms import load_platforms
from scalerepro.sim.validate import (
    PUBLISHED_TOLERANCE,
    bar_sizes,
    load_measurements,
    published_summary,
    published_table,
)
from tests.support import REPO

SHIPPED = REPO / "config" / "platforms.yaml"
MIB = 1 << 20


def _facts(entry: dict) -> set[str]:
    refs = entry.get("from", [])
    return set([refs] if isinstance(refs, str) else refs)


def test_shipped_measurements_load_each_on_a_platform_of_the_file():
    platforms = load_platforms(SHIPPED)
    measured = load_measurements(SHIPPED, platforms)
    assert len({m["platform"] for m in measured}) >= 2
    assert all(m["cite"] for m in measured)


def test_no_platform_number_cites_the_measurements_it_is_checked_against():
    raw = yaml.safe_load(SHIPPED.read_text())
    checked = {m["source"] for m in raw["measurements"]}
    for name, body in raw["platforms"].items():
        for key, entry in body["sources"].items():
            assert not _facts(entry) & checked, (name, key)


def test_the_bar_holds_at_the_sizes_of_resnet50s_float32_buckets():
    assert bar_sizes("float32", 25.0) == (8 * MIB, 32 * MIB)
    lo, hi = bar_sizes("bfloat16", 25.0)
    assert 8 * MIB <= lo <= hi <= 32 * MIB  # buckets are cut by bytes, so their sizes barely depend on the type


def _copy(tmp_path: Path, change) -> Path:
    doc = yaml.safe_load(SHIPPED.read_text())
    change(doc["measurements"][0])
    path = tmp_path / "platforms.yaml"
    path.write_text(yaml.safe_dump(doc))
    shutil.copy(REPO / "config" / "sources.yaml", tmp_path / "sources.yaml")
    return path


@pytest.mark.parametrize(
    ("change", "named"),
    [
        (lambda m: m.pop("ranks"), r"measurements\[0\] lacks key 'ranks'"),
        (lambda m: m.update(platform="nowhere"), r"platform 'nowhere' is not in"),
        (lambda m: m.update(algorithm="torus9d"), r"algorithm 'torus9d'"),
        (lambda m: m.update(source="abci2-benchmark#nothing"), r"measurements\[0\].*nothing"),
        (lambda m: m.update(time_us={1024: -3.0}), r"time_us 1024: -3.0"),
        (lambda m: m.update(dtype="int8"), r"dtype 'int8'"),
        (lambda m: m.update(ranks=6), r"6 ranks do not fill nodes of 4"),
    ],
)
def test_bad_measurements_are_named(tmp_path, change, named):
    path = _copy(tmp_path, change)
    with pytest.raises(UserError, match=named):
        load_measurements(path, load_platforms(path))


def test_a_measurement_id_used_twice_is_refused(tmp_path):
    doc = yaml.safe_load(SHIPPED.read_text())
    doc["measurements"].append(dict(doc["measurements"][0]))
    path = tmp_path / "platforms.yaml"
    path.write_text(yaml.safe_dump(doc))
    shutil.copy(REPO / "config" / "sources.yaml", tmp_path / "sources.yaml")
    with pytest.raises(UserError, match="is used twice"):
        load_measurements(path, load_platforms(path))


def test_table_sets_each_published_time_against_its_simulated_band():
    m = {"id": "x", "platform": "p", "algorithm": "nccl", "ranks": 8, "dtype": "float32", "cite": "c"}
    m["time_us"] = {MIB: 120.0, 16 * MIB: 1000.0}
    sim = [
        {"platform": "p", "variant": v, "ranks": 8, "bytes": b, "simulated_s": s}
        for v, scale in (("", 1.0), ("fast network", 0.5), ("slow network", 3.0))
        for b, s in ((MIB, 200e-6 * scale), (16 * MIB, 1100e-6 * scale))
    ]
    rows = published_table([m], sim, 25.0)
    assert [r["bar_size"] for r in rows] == [False, True]
    assert rows[1]["ratio"] == pytest.approx(1.1)
    assert rows[1]["within"]
    assert rows[1]["in_band"]
    assert not rows[0]["within"]
    assert rows[0]["in_band"]
    (summary,) = published_summary(rows)
    assert summary["bar_points"] == 1
    assert summary["within"]
    assert summary["max_abs_error"] == pytest.approx(0.1)


@pytest.mark.usefixtures("needs_simgrid")
@pytest.mark.parametrize("ident", ["abci-v-2-nodes", "azure-ndm-a100-v4-2-vms"])
def test_published_clusters_the_readme_names_stay_within_the_tolerance(ident):
    platforms = load_platforms(SHIPPED)
    (m,) = [m for m in load_measurements(SHIPPED, platforms) if m["id"] == ident]
    lo, hi = bar_sizes(m["dtype"], 25.0)
    sizes = [b for b in m["time_us"] if lo <= b <= hi]
    rows = simulate(Point("nccl", m["ranks"], b, platforms[m["platform"]], executor="torch") for b in sizes)
    for b, row in zip(sizes, rows, strict=True):
        error = row["simulated_s"] / (m["time_us"][b] * 1e-6) - 1
        assert abs(error) <= PUBLISHED_TOLERANCE, (ident, b, error)
