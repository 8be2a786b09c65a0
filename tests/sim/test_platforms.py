"""config/platforms.yaml: every platform loads, every number is sourced, bad files are named precisely."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from scalerepro.errors import UserError
from scalerepro.papers import files
from scalerepro.sim.claims import load_claims
from scalerepro.sim.platforms import NUMBERS, RANGED, Platform, load_platforms, pick
from tests.support import REPO

SHIPPED = REPO / "config" / "platforms.yaml"


def test_shipped_platforms_load_with_a_source_for_every_number():
    platforms = load_platforms(SHIPPED)
    assert {"tpu-v3-pod", "minsky-ddl", "kumar-minsky", "h100-cluster"} <= set(platforms)
    raw = yaml.safe_load(SHIPPED.read_text())["platforms"]
    for name, plat in platforms.items():
        given = [k for k in NUMBERS if k in raw[name]]
        assert len(given) >= 6
        for key in given:
            assert plat.sources.get(key), (name, key)
    assert platforms["tpu-v3-pod"].ranks(1024) == ((32, 32), ())
    assert platforms["minsky-ddl"].ranks(8) == ((), (0, 0, 0, 0, 1, 1, 1, 1))


def test_every_paper_has_a_claim_at_its_scale_on_a_shipped_platform():
    papers = REPO / "config" / "papers"
    claims = load_claims(papers, load_platforms(SHIPPED))  # a platform not in the file is an error
    assert {c["where"].split(":")[0] for c in claims} == {str(path) for path in files(papers)}


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
    "sources": {
        "max_ranks": {"assumed": "test"},
        "link_GBps": {"assumed": "test", "range": [5.0, 10.0]},
        "latency_us": {"assumed": "test", "range": [0.5, 2.0]},
        "gamma_s_per_byte": {"assumed": "test", "range": [0.0, 0.0]},
    },
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
        (
            {"reduction": "eager", "sources": {**GOOD["sources"], "reduction": {"assumed": "t", "range": ["eager"]}}},
            "give the modes reduction may take, of after, streamed",
        ),
        (
            {"reduction": "after", "sources": {**GOOD["sources"], "reduction": {"assumed": "t", "range": ["soon"]}}},
            "range ['soon']; give the modes reduction may take, of after, streamed",
        ),
        (
            {
                "reduction": "after",
                "sources": {**GOOD["sources"], "reduction": {"assumed": "t", "range": ["streamed"]}},
            },
            "reduction 'after' is not among its range ['streamed']",
        ),
    ],
)
def test_bad_platform_is_named_with_its_key(tmp_path, change, named):
    body = {k: v for k, v in (GOOD | change).items() if v is not None}
    with pytest.raises(UserError) as err:
        load_platforms(write(tmp_path, body))
    assert named in str(err.value)


def test_unknown_platform_lists_the_known(tmp_path):
    path = write(tmp_path, GOOD)
    with pytest.raises(UserError, match=r"no platform 'q'; there are: p"):
        pick(load_platforms(path), "q", path)


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


def test_no_number_that_sets_a_time_comes_from_a_claims_source_or_a_reproduced_paper():
    """Only the size of the papers' runs (ranks, GPUs per node) may cite the papers themselves; no number that sets a
    time cites a paper or any source a claim at scale cites (the announcement behind Cho et al.'s 95% included): a
    compute rate or a link from them would make the simulated figure agree with the claim by construction."""
    shipped = load_platforms(SHIPPED)
    claimed = {c["source"].partition("#")[0] for c in load_claims(REPO / "config" / "papers", shipped)}
    assert "ibm-ddl-announcement" in claimed
    for name, plat in shipped.items():
        assert plat.resting_on(claimed) == [], name
    assert shipped["minsky-ddl"].primary == {"cho2017"}  # the run's size cites the paper, and counts as its own


def test_every_assumed_number_that_sets_a_time_has_a_range_around_its_value():
    raw = yaml.safe_load(SHIPPED.read_text())["platforms"]
    for name, plat in load_platforms(SHIPPED).items():
        for key, entry in raw[name]["sources"].items():
            if key in RANGED and "assumed" in entry:
                assert key in plat.ranges, (name, key)


def test_an_assumed_timing_number_without_a_range_is_refused(tmp_path):
    body = {**GOOD, "sources": {**GOOD["sources"], "link_GBps": {"assumed": "test"}}}
    with pytest.raises(UserError, match=r"sources.link_GBps: an assumed number needs range"):
        load_platforms(write(tmp_path, body))


@pytest.mark.parametrize(
    ("entry", "named"),
    [
        ({"assumed": "t", "range": [20.0, 5.0]}, "give \\[low, high\\]"),
        ({"assumed": "t", "range": ["a", 5.0]}, "give \\[low, high\\]"),
        ({"assumed": "t", "range": [1.0, 5.0]}, "link_GBps 10.0 lies outside its range"),
    ],
)
def test_bad_ranges_are_named(tmp_path, entry, named):
    sources = {**GOOD["sources"], "link_GBps": entry}
    with pytest.raises(UserError, match=named):
        load_platforms(write(tmp_path, {**GOOD, "sources": sources}))


def test_corners_move_every_ranged_network_number_to_one_end():
    plat = load_platforms(SHIPPED)["minsky-ddl"]
    slow, fast = plat.corner(False), plat.corner(True)
    assert (slow.link_GBps, fast.link_GBps) == tuple(plat.ranges["link_GBps"])
    assert (slow.latency_us, fast.latency_us) == tuple(reversed(plat.ranges["latency_us"]))
    assert slow.images_per_s_per_accelerator == plat.images_per_s_per_accelerator  # the step's, not the network's


def test_a_mode_outside_its_choices_is_named():
    with pytest.raises(UserError, match=r"platform 'p': reduction 'eager'; choose one of after, streamed"):
        Platform("p", "torus", 4, 1.0, 0.0, 0.0, reduction="eager")


def test_the_fast_corner_streams_the_sums_where_the_range_allows():
    plat = load_platforms(SHIPPED)["tpu-v3-pod"]
    assert plat.ranges["reduction"] == ["after", "streamed"]
    assert (plat.corner(False).reduction, plat.corner(True).reduction) == ("after", "streamed")
    assert plat.topology().reduction == plat.reduction
    assert load_platforms(SHIPPED)["minsky-ddl"].corner(True).reduction == "after"  # not ranged: as described


def test_a_platform_added_to_the_file_is_projected_on_its_own_numbers(tmp_path):
    """One machine description: the cost model's topology is built from the platform the simulator runs on."""
    from scalerepro.comm.costfit import Fit
    from scalerepro.comm.costterms import Network, profile, schedules
    from scalerepro.sim.platforms import project

    body = {**GOOD, "shape": "fattree", "max_ranks": 16, "ranks_per_node": 4, "intra_GBps": 40.0}
    body["sources"] = {
        **GOOD["sources"],
        "ranks_per_node": {"assumed": "t"},
        "intra_GBps": {"assumed": "t", "range": [40.0, 40.0]},
    }
    plat = load_platforms(write(tmp_path, body))["p"]
    topo = plat.topology()
    assert (topo.name, topo.link_GBps, topo.intra_GBps, topo.ranks_per_node) == ("p", 10.0, 40.0, 4)
    fit = Fit("ring", "dedicated", 9e-6, 9e-10, 9e-11, 10, 0.0, 0.0, ())  # the measured machine's: not used
    rows = project([fit], [plat], [8, 32], 4e6, 2)
    assert [(r["topology"], r["ranks"]) for r in rows] == [("p", 8)]  # 32 ranks do not fit its 16
    spec = topo.spec("ring", 8, 1_000_000, 2)
    net = Network(0.0, 1 / 40e9, 0.0, 1e-6, 1 / 10e9)  # the platform's links, latencies and gamma
    want = profile(schedules("ring", spec), 8, 4, topo.placement(8)).cost(net).seconds
    assert rows[0]["ms"] == pytest.approx(want * 1e3)


def test_every_shipped_platform_is_written_as_json_with_its_sources():
    """A platform's record (scale.json, simulation.json) holds every field, the sources it cites included."""
    import json

    for name, plat in load_platforms(SHIPPED).items():
        back = json.loads(json.dumps(plat.as_dict()))
        assert back["name"] == name
        assert back["primary"] == sorted(plat.primary)
        assert set(back["source_ids"]) == set(plat.source_ids)
