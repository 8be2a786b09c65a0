"""Bad input named with its fix: one line naming the input (file and line, key, flag), exit 2, no traceback.

The README's table of bad inputs ("What a bad input gets") lists these cases; each test here keeps one true.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from scalerepro.analysis.reproduce import TABLES, load_cards, read_analysis
from scalerepro.data.shards import ShardReader
from scalerepro.errors import UserError
from scalerepro.sim.platforms import load_platforms
from tests.support import cli, paper_folder, refused, train_args

pytestmark = pytest.mark.faults


@pytest.mark.parametrize(
    ("flag", "named"),
    [
        ("--colors=0", "argument --colors: 0: give a whole number of at least 1"),
        ("--colors=-2", "argument --colors: -2: give a whole number of at least 1"),
        ("--jobs=-3", "argument --jobs: -3: give a whole number of at least 0"),
        ("--bucket-mib=0", "argument --bucket-mib: '0': give a number above 0"),
    ],
)
def test_simulate_flags_out_of_range_are_named(tmp_path, flag, named):
    refused(cli("simulate-scale", "--platform", "kumar-minsky", flag, "--out", str(tmp_path)), named)


def platforms_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "platforms.yaml"
    path.write_text(text)
    return path


def test_a_platforms_file_that_is_not_yaml_is_named_with_its_line(tmp_path):
    path = platforms_file(tmp_path, "platforms:\n  p:\n    shape: torus\n    link_GBps: [83\n")
    with pytest.raises(UserError, match=rf"{path}, line 5, column 1: not valid YAML"):
        load_platforms(path)


def test_a_platform_number_that_is_not_a_number_is_named_with_its_line(tmp_path):
    body = "platforms:\n  p:\n    shape: torus\n    max_ranks: 16\n    link_GBps: fast\n"
    path = platforms_file(tmp_path, body + "    latency_us: 1.0\n    gamma_s_per_byte: 0.0\n")
    with pytest.raises(UserError, match=rf"{path}, line 5: platform 'p': link_GBps 'fast' is not a number"):
        load_platforms(path)


def claims_file(tmp_path: Path, measure: dict) -> Path:
    claim = {"id": "c", "claim": "c", "source": "ying2018#result", "scope": "network", "measure": measure}
    return paper_folder(tmp_path, [claim])


@pytest.mark.parametrize(
    ("measure", "named"),
    [
        (
            {"kind": "busbw_ratio", "algorithm": "torus9d", "over": "ring"},
            "claim 'c': measure.algorithm 'torus9d' is not an algorithm; known:",
        ),
        ({"kind": "busbw_ratio", "over": "ring"}, "claim 'c': measure busbw_ratio needs `algorithm:`"),
        ({"kind": "accuracy_agreement"}, "measure accuracy_agreement needs `algorithm:`"),
    ],
)
def test_a_claim_with_a_bad_measure_is_named(tmp_path, measure, named):
    with pytest.raises(UserError, match=named):
        load_cards(claims_file(tmp_path, measure))


def test_empty_tables_read_as_no_rows_and_a_table_without_a_column_is_named(tmp_path):
    for name in TABLES:
        (tmp_path / f"{name}.csv").write_text("")
    tables = read_analysis(tmp_path)
    assert all(frame.empty and set(TABLES[name]) <= set(frame.columns) for name, frame in tables.items())
    pd.DataFrame({"algorithm": ["ring"], "world_size": [4]}).to_csv(tmp_path / "busbw.csv", index=False)
    with pytest.raises(UserError, match=r"busbw.csv: no column 'bytes', which `scalerepro analyze` writes"):
        read_analysis(tmp_path)


def test_reproduce_on_empty_tables_writes_cards_saying_not_in_this_run(tmp_path):
    analysis = tmp_path / "analysis"
    analysis.mkdir()
    for name in TABLES:
        (analysis / f"{name}.csv").write_text("")
    out = tmp_path / "r.md"
    proc = cli(
        "reproduce", "--analysis", str(analysis), "--out", str(out), "--csv", str(tmp_path / "r.csv"),
        "--json", str(tmp_path / "r.json"),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert "not in this run" in out.read_text()


def test_train_out_that_is_a_file_is_named(tmp_path):
    out = tmp_path / "run"
    out.write_text("not a folder")
    proc = cli("train", "--algo", "ring", "--shards", str(tmp_path / "none"), "--out", str(out))
    refused(proc, f"--out {out} is a file, not a folder")
    proc = cli("train", "--algo", "ring", "--shards", str(tmp_path / "none"), "--out", str(out / "sub"))
    refused(proc, f"--out {out / 'sub'} lies under {out}, a file")
    proc = cli("train", "--algo", "ring", "--shards", str(tmp_path / "none"), "--out", "/sys/scalerepro-x")
    refused(proc, "--out /sys/scalerepro-x: cannot make the folder /sys/scalerepro-x (Operation not permitted)")


def test_supervise_run_dir_that_cannot_be_written_is_named_before_the_launch(tmp_path):
    launched = tmp_path / "launched"
    for run_dir, named in (
        ("/sys/scalerepro-x", "--run-dir /sys/scalerepro-x: cannot make the folder"),
        (str(launched), f"--run-dir {launched} is a file, not a folder"),
    ):
        launched.write_text("")
        proc = cli(
            "supervise", "--run-dir", run_dir, "--", sys.executable, "-c", f"open({str(tmp_path / 'ran')!r}, 'w')"
        )
        refused(proc, named)
        assert not (tmp_path / "ran").exists()


@pytest.mark.mpi
def test_a_grid_that_fits_the_launched_ranks_is_benched_whatever_bench_ranks_says(run_mpi, tmp_path):
    """bench.ranks ([2, 4] by default) is the sweep's; one launch at 4 ranks checks comm.grid against 4."""
    out = tmp_path / "bench.json"
    settings = ["--set", "comm.grid=[4,1]", "--set", "bench.max_bytes=4096", "--set", "bench.iters=2"]
    run_mpi(4, ["-m", "scalerepro.cli", "bench", *settings, "--algos", "torus2d", "--out", str(out)])
    assert out.is_file()
    proc = run_mpi(
        2, ["-m", "scalerepro.cli", "bench", *settings, "--algos", "torus2d", "--out", str(out)], check=False
    )
    refused(proc, "torus2d: grid [4, 1] has 4 ranks but the job has 2")


@pytest.fixture
def shards_copy(tiny_shards, tmp_path) -> Path:
    """A copy of the tiny shards to damage."""
    dst = tmp_path / "shards"
    shutil.copytree(tiny_shards, dst)
    return dst


def train_no_stage(shards: Path, out: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    """One rank of `scalerepro train --no-stage` for one short epoch."""
    args = train_args(shards, out, "train.epochs=1", "train.width=8", "train.batch_per_rank=8", "loader.workers=1")
    return subprocess.run(
        [sys.executable, *args, *flags],
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
    )


def test_no_stage_checks_each_shard_against_the_manifest(shards_copy, tmp_path):
    manifest = json.loads((shards_copy / "train" / "manifest.json").read_text())
    manifest["shards"][1]["sha256"] = "0" * 64
    (shards_copy / "train" / "manifest.json").write_text(json.dumps(manifest))
    refused(
        train_no_stage(shards_copy, tmp_path / "run"),
        f"{shards_copy / 'train'}: 1 shard(s) differ from the sha256 in its manifest.json "
        f"({manifest['shards'][1]['file']})",
        "--trust-shards",
    )
    victim = shards_copy / "val" / "shard-00000.srs"
    victim.write_bytes(victim.read_bytes()[:-100])
    refused(train_no_stage(shards_copy, tmp_path / "run", "--trust-shards"), "differ in size from its manifest.json")


def test_a_record_that_does_not_decode_is_named_with_its_shard_record_and_source(shards_copy, tmp_path):
    shard = shards_copy / "train" / "shard-00000.srs"
    reader = ShardReader(shard)
    offset, length, _ = reader.index[3]
    data = bytearray(shard.read_bytes())
    data[int(offset) : int(offset) + int(length)] = bytes(int(length))  # same size: only a decode can tell
    shard.write_bytes(bytes(data))
    proc = train_no_stage(shards_copy, tmp_path / "run", "--trust-shards")
    refused(proc, f"shard {shard}, record 3 (source {reader.names()[3]}) cannot be decoded", "scalerepro stage")
    assert proc.stderr.count("\n") <= 3  # the message, not a worker's traceback


FAILING_LAUNCHES = {
    # before MPI starts on the ranks: configuration refused
    "config": (["bench", "--set", "bench.iters=0"], "bench.iters"),
    # after MPI started, on every rank, ended by MPI_Abort
    "grid": (["bench", "--set", "comm.grid=[4,1]", "--algos", "torus2d"], "grid [4, 1] has 4 ranks but the job has 2"),
}


@pytest.mark.mpi
@pytest.mark.parametrize("case", sorted(FAILING_LAUNCHES))
def test_a_failing_launch_always_prints_its_reason_and_leaves_nothing_in_dev_shm(run_mpi, tmp_path, case):
    """20 launches: the reason on stderr every time (a rank's message flushed and forwarded before MPI_Abort),
    and no segment left (no_segment_left_behind)."""
    args, reason = FAILING_LAUNCHES[case]
    silent = 0
    for _ in range(20):
        proc = run_mpi(2, ["-m", "scalerepro.cli", *args, "--out", str(tmp_path / "b.json")], check=False, timeout=60)
        assert proc.returncode != 0
        silent += reason not in proc.stderr
    assert silent == 0, f"{silent} of 20 launches printed no reason"


@pytest.mark.mpi
def test_a_running_job_maps_its_node_segment_but_has_unlinked_its_name(run_mpi):
    """So the memory goes with the job's last rank, however the job ends."""
    check = (
        "from scalerepro import mpi, shm\n"
        "held = shm.mapped()\n"
        "assert held and not any(p.exists() for p in held), held\n"
        "mpi.world().Barrier()\n"
        "print('released')\n"
    )
    assert run_mpi(3, ["-c", check]).stdout.count("released") == 3


def test_a_set_value_with_a_key_twice_is_named(tmp_path):
    proc = cli(
        "train",
        "--algo",
        "ring",
        "--shards",
        str(tmp_path),
        "--out",
        str(tmp_path / "o"),
        "--set",
        "train.epochs={a: 1, a: 2}",
    )
    refused(proc, "--set train.epochs={a: 1, a: 2}: key a is given twice")


def test_bench_loader_scale_that_is_not_numbers_is_named(tmp_path):
    proc = cli("bench-loader", "--scale", "0.08,abc", "--work", str(tmp_path / "w"), "--out", str(tmp_path / "b.json"))
    refused(proc, "--scale 0.08,abc: give MIN,MAX with 0 < MIN <= MAX <= 1")
