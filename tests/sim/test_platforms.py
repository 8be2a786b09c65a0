"""config/platforms.yaml: every platform loads, every number is sourced, bad files are named precisely."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scalerepro.errors import UserError
from scalerepro.sim.papers import compare, load_claims
from scalerepro.sim.platforms import NUMBERS, load, pick
from tests.support import REPO

SHIPPED = REPO / "config" / "platforms.yaml"


def test_shipped_platforms_load_with_a_source_for_every_number():
    platforms = load(SHIPPED)
    assert {"tpu-v3-pod", "minsky-ddl", "kumar-minsky", "h100-cluster"} <= set(platforms)
    raw = yaml.safe_load(SHIPPED.read_text())["platforms"]
    for name, plat in platforms.items():
        given = [k for k in NUMBERS if k in raw[name]]
        assert len(given) >= 6
        for key in given:
            assert plat.sources.get(key), (name, key)
    assert platforms["tpu-v3-pod"].ranks(1024) == ((32, 32), ())
    assert platforms["minsky-ddl"].ranks(8) == ((), (0, 0, 0, 0, 1, 1, 1, 1))


def test_shipped_claims_name_platforms_that_exist():
    names = set(load(SHIPPED))
    claims = load_claims(SHIPPED)
    assert {c["paper"] for c in claims} == {"Cho et al. 2017", "Kumar et al. 2017", "Ying et al. 2018"}
    assert all(c["platform"] in names for c in claims)


def write(tmp_path: Path, body: dict) -> Path:
    path = tmp_path / "platforms.yaml"
    path.write_text(yaml.safe_dump({"platforms": {"p": body}}))
    return path


GOOD = {
    "shape": "torus",
    "max_ranks": 16,
    "link_GBps": 10.0,
    "latency_us": 1.0,
    "gamma_s_per_byte": 0.0,
    "sources": {key: {"assumed": "test"} for key in ("max_ranks", "link_GBps", "latency_us", "gamma_s_per_byte")},
}


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"link_GBps": None}, "platform 'p' lacks key 'link_GBps'"),
        ({"sources": {}}, "give sources.max_ranks"),
        ({"sources": {**GOOD["sources"], "max_ranks": "a vendor"}}, "sources.max_ranks: give {from:"),
        ({"sources": {**GOOD["sources"], "max_ranks": {"from": "x#y"}}}, "cites registered sources but"),
        ({"nics": 2}, "unknown key(s) ['nics']"),
        ({"shape": "dragonfly"}, "shape 'dragonfly'; choose one of torus, fattree"),
        ({"link_GBps": 0}, "link_GBps must be > 0"),
    ],
)
def test_bad_platform_is_named_with_its_key(tmp_path, change, named):
    body = {k: v for k, v in (GOOD | change).items() if v is not None}
    with pytest.raises(UserError) as err:
        load(write(tmp_path, body))
    assert named in str(err.value)


def test_unknown_platform_lists_the_known(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(UserError, match=r"no platform 'q'; there are: p"):
        pick(load(path), "q", path)


def test_simulation_rules_follow_enabled_and_simgrid(monkeypatch, capsys):
    import scalerepro.sim as sim

    def absent() -> None:
        raise UserError("SimGrid's Python module is not installed; run: sudo apt-get install python3-simgrid")

    monkeypatch.setattr(sim, "load_simgrid", absent)
    assert sim.enabled(False) is False
    assert sim.enabled("auto") is False
    assert "left out (simulate.enabled: auto)" in capsys.readouterr().err
    with pytest.raises(UserError, match=r"simulate\.enabled is true but .*apt-get install python3-simgrid"):
        sim.enabled(True)
    monkeypatch.setattr(sim, "load_simgrid", lambda: None)
    assert sim.enabled("auto") is True
    assert sim.enabled(True) is True


def test_a_compute_rate_from_a_reproduced_papers_results_marks_its_projections_dependent():
    """The shipped paper platforms take their ResNet-50 rate from the papers' own at-scale runs: a simulated
    time or efficiency there is not independent of the claims, and the papers table says so."""
    platforms = load(SHIPPED)
    assert {n for n, p in platforms.items() if p.rate_from_papers()} == {"tpu-v3-pod", "minsky-ddl", "kumar-minsky"}
    claims = {c["id"]: c for c in load_claims(SHIPPED)}
    step = {"platform": "kumar-minsky", "ranks": 256, "dtype": "float32", "allreduce_s": 1.0}
    steps = [step | {"algorithm": a, "time_90_epochs_s": 3000.0} for a in ("multicolor", "native")]
    steps += [
        {
            "platform": "tpu-v3-pod",
            "ranks": 1024,
            "dtype": "bfloat16",
            "algorithm": a,
            "allreduce_s": t,
            "images_per_s": 1e6,
        }
        for a, t in (("torus2d", 1.0), ("ring", 9.0))
    ]
    rows = {r["id"]: r for r in compare(list(claims.values()), steps, platforms)}
    assert rows["kumar-48min"]["independent"] is False
    assert rows["ying-torus-vs-ring"]["independent"] is True  # an all-reduce time ratio needs no compute rate
    assert rows["ying-torus-vs-ring"]["simulated"] == 9.0
