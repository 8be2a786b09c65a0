"""The bench file: its format versions, the one flattener, which algorithm a row measured, its footer's numbers."""

from __future__ import annotations

import json

import pytest

from scalerepro.comm import benchfile
from scalerepro.errors import UserError
from tests.comm.test_harness import row

PLACEMENT = {"world_size": 4, "hosts": ["a", "a", "b", "b"], "nodes": ["a", "a", "b", "b"], "ranks_per_node": 2}


def write(path, record):
    path.write_text(json.dumps(record))
    return path


def test_a_format_1_file_reads_with_nothing_measured_out_of_place(tmp_path):
    in_place_only = {k: v for k, v in row("ring", 8, 1.0, 2.0, wrong=1).items() if not k.startswith("oop_")}
    record = benchfile.read(write(tmp_path / "old.json", PLACEMENT | {"rows": [in_place_only]}))
    (r,) = record["rows"]
    assert all(r["oop_" + k] is None for k in benchfile.RESULTS)
    assert r["busbw_GBps"] == 2.0
    assert benchfile.total_wrong(record["rows"]) == 1
    assert benchfile.averages(record["rows"])["avg_busbw_GBps"] == {"ring": 2.0}  # in place only: nothing to halve


def test_a_current_file_reads_unchanged(tmp_path):
    record = PLACEMENT | {"format": benchfile.FORMAT, "rows": [row("ring", 8, 1.0, 2.0)]}
    assert benchfile.read(write(tmp_path / "b.json", record)) == record


@pytest.mark.parametrize(
    ("content", "says"),
    [
        ("{not json", "not a readable `scalerepro bench` JSON"),
        (json.dumps({"world_size": 2}), r"not a `scalerepro bench` JSON \(missing rows\)"),
        (json.dumps([1, 2]), r"missing world_size, rows"),
        (json.dumps(PLACEMENT | {"rows": [], "format": "2"}), r"format '2' is no bench format number"),
        (json.dumps(PLACEMENT | {"rows": [], "format": benchfile.FORMAT + 1}), "newer than this scalerepro reads"),
    ],
)
def test_a_file_it_cannot_read_is_named_with_what_is_wrong(tmp_path, content, says):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(UserError, match=f"{path}: .*{says}"):
        benchfile.read(path)


def test_flattened_rows_carry_their_record_placement_and_parameters():
    record = PLACEMENT | {"cores_per_node": 4, "params": {"colors": 3}, "rows": [row("ring", 8, 1.0, 2.0)] * 2}
    flat = benchfile.flatten(record)
    assert len(flat) == 2
    assert {(r["world_size"], r["hosts"], r["ranks_per_core"], r["comm"]["colors"]) for r in flat} == {(4, 2, 0.5, 3)}
    assert flat[0]["nodes"] == PLACEMENT["nodes"]
    assert benchfile.flatten(PLACEMENT | {"hosts": [], "rows": [row("ring", 8, 1.0, 2.0)]})[0]["hosts"] == 2


@pytest.mark.parametrize(
    ("asked", "schedule", "measured"),
    [
        ("ring", {"algorithm": "ring"}, "ring"),
        ("multicolor", {"algorithm": "multicolor", "as": "ring"}, "ring"),  # multicolor on 2 ranks is the ring
        ("auto", {"algorithm": "rabenseifner"}, "rabenseifner"),  # auto's choice
        ("auto", {"algorithm": "torus2d", "as": "multicolor"}, "multicolor"),  # a choice that reduced to another
        ("ring", None, "ring"),
        ("torus2d", '{"algorithm": "torus2d", "as": "multicolor"}', "multicolor"),  # a CSV cell holds JSON text
        ("torus2d", float("nan"), "torus2d"),  # an empty CSV cell
    ],
)
def test_ran_names_the_schedule_a_row_measured(asked, schedule, measured):
    assert benchfile.ran({"algorithm": asked, "schedule": schedule}) == measured


def test_read_rows_gives_every_row_and_the_median_gamma(tmp_path):
    paths = [
        write(tmp_path / f"{k}.json", PLACEMENT | {"reduction_s_per_byte": g, "rows": [row("ring", 8 << k, 1.0, 2.0)]})
        for k, g in enumerate((1e-10, 3e-10, 2e-10))
    ]
    rows, gamma = benchfile.read_rows(paths)
    assert [r["bytes"] for r in rows] == [8, 16, 32]
    assert gamma == 2e-10
    with pytest.raises(UserError, match="no reduction_s_per_byte"):
        benchfile.read_rows([write(tmp_path / "none.json", PLACEMENT | {"rows": []})])
    with pytest.raises(UserError, match="no bench JSON given"):
        benchfile.read_rows([])


def test_compare_reads_only_the_in_place_results():
    rows = [row(a, 8, oop_busbw=9.0, busbw=b) for a, b in (("x", 2.0), ("y", 1.0))]
    (ratio,) = benchfile.compare(rows, "y")
    assert ratio["algorithm"] == "x"
    assert ratio["busbw_ratio"] == 2.0
    assert ratio["time_ratio"] == 1.0
