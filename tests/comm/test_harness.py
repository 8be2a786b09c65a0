"""The bench harness: out-of-place and in-place measurements, the nccl-tests style table and footer, the JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from scalerepro.comm.benchfile import FORMAT, averages, total_wrong
from scalerepro.comm.benchtable import HEADER, format_footer, format_row
from scalerepro.comm.buffers import fill, send_changed
from scalerepro.comm.harness import sizes

CHECK = str(Path(__file__).with_name("harness_check.py"))
INPLACE = ("time_us", "min_us", "median_us", "algbw_GBps", "busbw_GBps", "wrong")  # the names readers use


def row(algo: str, nbytes: int, oop_busbw: float, busbw: float, wrong: int | None = 0, oop_wrong: int | None = 0):
    """A bench row as the harness makes it (in place under the old names, out of place as oop_*)."""
    return {
        "algorithm": algo,
        "bytes": nbytes,
        "count": nbytes // 4,
        "dtype": "float32",
        "iters": 5,
        "time_us": 10.0,
        "min_us": 9.0,
        "median_us": 9.5,
        "algbw_GBps": busbw / 1.5,
        "busbw_GBps": busbw,
        "wrong": wrong,
        "oop_time_us": 12.25,
        "oop_min_us": 11.0,
        "oop_median_us": 11.5,
        "oop_algbw_GBps": oop_busbw / 1.5,
        "oop_busbw_GBps": oop_busbw,
        "oop_wrong": oop_wrong,
        "oop_via": "copy + in place",
        "executor": "mpi",
        "schedule": {"algorithm": algo, "host_staged": False, "lanes": 1},
    }


def test_header_has_both_column_groups_like_nccl_tests():
    lines = HEADER.splitlines()
    assert len(lines) == 3
    assert all(line.startswith("#") for line in lines)
    assert lines[0].index("out-of-place") < lines[0].index("in-place")
    assert lines[1].split() == [
        "#",
        "algorithm",
        "size",
        "count",
        *["time", "algbw", "busbw", "#wrong"] * 2,
        "schedule",
    ]
    assert lines[2].split() == ["#", "(B)", "(elements)", *["(us)", "(GB/s)", "(GB/s)"] * 2]


def test_row_prints_out_of_place_then_in_place_under_their_headers():
    r = row("ring", 4096, oop_busbw=1.25, busbw=2.5, wrong=0, oop_wrong=7)
    line = format_row(r)
    assert line.split()[:11] == ["ring", "4096", "1024", "12.2", "0.833", "1.250", "7", "10.0", "1.667", "2.500", "0"]
    head = HEADER.splitlines()[1]
    for name, value, nth in (("time", "12.2", 0), ("busbw", "1.250", 0), ("time", "10.0", 1), ("busbw", "2.500", 1)):
        at = [i for i in range(len(head)) if head.startswith(name, i) and not head[i - 1].isalpha()][nth]
        end = at + len(name)  # right-aligned: the value ends where its column name ends
        assert line[end - len(value) : end] == value, (name, nth, line)
    unchecked = format_row(row("ring", 8, 0.0, 0.0, wrong=None, oop_wrong=None))
    assert unchecked.split()[6] == "N/A"
    assert unchecked.split()[10] == "N/A"


def test_average_busbw_is_over_all_sizes_and_both_placements():
    rows = [
        row("ring", 8, oop_busbw=1.0, busbw=3.0),
        row("native", 8, oop_busbw=10.0, busbw=10.0),
        row("ring", 16, oop_busbw=2.0, busbw=6.0),
    ]
    s = averages(rows)
    assert s["avg_busbw_GBps"] == {"ring": (1.0 + 3.0 + 2.0 + 6.0) / (2 * 2), "native": 10.0}
    assert s["out_of_bounds"] == 0
    footer = format_footer(rows).splitlines()
    assert footer[0] == "# Out of bounds values : 0 OK"
    assert footer[1] == "# Avg bus bandwidth    : 3 GB/s  ring"
    assert footer[2] == "# Avg bus bandwidth    : 10 GB/s  native"


def test_out_of_bounds_counts_both_placements_and_fails():
    rows = [row("ring", 8, 1.0, 1.0, wrong=2), row("ring", 16, 1.0, 1.0, oop_wrong=3)]
    assert total_wrong(rows) == 5
    assert averages(rows)["out_of_bounds"] == 5
    assert format_footer(rows).splitlines()[0] == "# Out of bounds values : 5 FAILED"
    unchecked = [row("ring", 8, 1.0, 1.0, wrong=None, oop_wrong=None)]
    assert averages(unchecked)["out_of_bounds"] is None
    assert format_footer(unchecked).splitlines()[0] == "# Out of bounds values : N/A (not checked)"


def test_send_changed_counts_overwritten_send_elements():
    send = np.empty(100, dtype=np.float32)
    fill(send, rank=2, it=5)
    assert send_changed(send, rank=2, it=5) == 0
    send[[3, 50]] = 0.5
    assert send_changed(send, rank=2, it=5) == 2
    assert send_changed(send, rank=1, it=5) == 100  # another rank's data: none is this rank's


def test_send_changed_and_fill_on_torch_tensors():
    torch = pytest.importorskip("torch")
    send = torch.empty(40, dtype=torch.float64)
    fill(send, rank=0, it=1)
    assert send_changed(send, rank=0, it=1) == 0
    send[7] = -1
    assert send_changed(send, rank=0, it=1) == 1


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 3])
def test_out_of_place_sums_random_floats_and_its_check_catches_faults(run_mpi, ranks):
    """Random float32/64 data: sum within tolerance, same bits, send untouched; a scribbled send or an unwritten
    receive buffer counts in oop_wrong (harness_check.py)."""
    proc = run_mpi(ranks, [CHECK], timeout=600)
    assert f"OK {ranks} ranks" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.mpi
@pytest.mark.parametrize("ranks", [1, 3])
def test_bench_prints_both_placements_and_records_them(run_mpi, tmp_path, ranks):
    out = tmp_path / "bench.json"
    args = ["-m", "scalerepro.cli", "bench", "--algos", "native,ring", "--set", "bench.max_bytes=1024"]
    proc = run_mpi(ranks, [*args, "--set", "bench.iters=3", "--set", "bench.min_time_s=0", "--out", str(out)])
    assert HEADER in proc.stderr
    table = [line for line in proc.stderr.splitlines() if line.split()[:1] in (["native"], ["ring"])]
    assert len(table) == 2 * len(sizes(8, 1024))
    assert all(line.split()[6] == line.split()[10] == "0" for line in table)  # #wrong: out of place, in place
    assert "# Out of bounds values : 0 OK" in proc.stderr
    assert proc.stderr.count("# Avg bus bandwidth    : ") == 2

    record = json.loads(out.read_text())
    assert record["format"] == FORMAT
    rows = record["rows"]
    assert [r["bytes"] for r in rows if r["algorithm"] == "ring"] == sizes(8, 1024)
    for r in rows:
        for key in INPLACE:
            assert r["oop_" + key] is not None
            assert r[key] is not None
        assert r["wrong"] == r["oop_wrong"] == 0
        assert r["time_us"] > 0
        assert r["oop_time_us"] > 0
        assert r["oop_via"] == ("MPI_Allreduce(send, recv)" if r["algorithm"] == "native" else "copy + in place")
    assert record["out_of_bounds"] == 0
    for algo in ("native", "ring"):
        mine = [r for r in rows if r["algorithm"] == algo]
        both = [r["oop_busbw_GBps"] for r in mine] + [r["busbw_GBps"] for r in mine]
        assert record["avg_busbw_GBps"][algo] == pytest.approx(sum(both) / (2 * len(mine)))
        assert f"# Avg bus bandwidth    : {record['avg_busbw_GBps'][algo]:.6g} GB/s  {algo}" in proc.stderr
    if ranks == 1:  # one rank moves nothing over a bus
        assert record["avg_busbw_GBps"] == {"native": 0.0, "ring": 0.0}


def test_collect_reads_bench_jsons_with_and_without_out_of_place(tmp_path):
    """analysis' bench table: old JSONs (in place only) and new ones side by side; oop_* columns, blank for old."""
    import pandas as pd

    from scalerepro.analysis.collect import collect

    base = {"world_size": 2, "hosts": ["a", "a"], "ranks_per_node": 2, "cores_per_node": 2, "nodes": ["a", "a"]}
    old = {**base, "rows": [{k: v for k, v in row("ring", 8, 1.0, 2.0).items() if not k.startswith("oop_")}]}
    new = {**base, "rows": [row("ring", 8, 1.0, 2.0)], **averages([row("ring", 8, 1.0, 2.0)])}
    paths = []
    for name, record in (("old", old), ("new", new)):
        paths.append(tmp_path / f"{name}.json")
        paths[-1].write_text(json.dumps(record))
    collect([], paths, tmp_path / "tables")
    bench = pd.read_csv(tmp_path / "tables" / "bench.csv")
    assert list(bench["busbw_GBps"]) == [2.0, 2.0]
    assert bench["oop_busbw_GBps"].isna().tolist() == [True, False]
    assert bench["oop_busbw_GBps"].iloc[1] == 1.0
