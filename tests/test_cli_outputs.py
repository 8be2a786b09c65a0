"""Outputs checked before any work, and errors printed once per job.

Every command that writes checks each output path first
(:func:`scalerepro.cli.common.check_out`): an output that cannot be written
is one line naming the flag, the path, why and the fix, exit 2, no
traceback. Under a launcher of several ranks an error every rank has is
printed once, and the lines of errors each rank has on its own never run
together. (Tests run as root, which any folder lets in: a path under /sys
cannot be made, EPERM.)
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from scalerepro.cli.common import check_out
from scalerepro.errors import UserError
from scalerepro.sim.engine import load_simgrid
from tests.support import cli

pytestmark = pytest.mark.faults

UNWRITABLE = Path("/sys/scalerepro-x")  # mkdir there fails with EPERM, even for root


def one_line(proc: subprocess.CompletedProcess[str], *named: str) -> str:
    """Exit 2, stderr one line holding every ``named`` text, no traceback; the line."""
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.splitlines()
    assert len(lines) == 1, proc.stderr
    for text in named:
        assert text in lines[0], proc.stderr
    return lines[0]


def test_a_folder_is_made_and_left_without_the_probe(tmp_path):
    out = tmp_path / "a" / "b"
    assert check_out(out, "--out", folder=True) == out
    assert out.is_dir()
    assert not list(out.iterdir())
    assert check_out(tmp_path / "c" / "f.json", "--out", folder=False) == tmp_path / "c" / "f.json"
    assert (tmp_path / "c").is_dir()
    assert not list((tmp_path / "c").iterdir())


@pytest.mark.parametrize(
    ("where", "folder", "named"),
    [
        ("file", True, "is a file, not a folder; give a folder that can be written (made if absent)"),
        ("file/sub", True, "lies under {tmp}/file, a file"),
        ("file/sub/f.json", False, "lies under {tmp}/file, a file; give a file in a folder that can be written"),
        ("dir", False, "is a folder, not a file"),
        ("/sys/scalerepro-x", True, ": cannot make the folder /sys/scalerepro-x (Operation not permitted)"),
        ("/sys/scalerepro-x/f.json", False, ": cannot make the folder /sys/scalerepro-x (Operation not permitted)"),
    ],
)
def test_an_output_that_cannot_be_written_is_named_with_why_and_the_fix(tmp_path, where, folder, named):
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    path = tmp_path / where
    with pytest.raises(UserError, match="^--flag " + path.as_posix()) as caught:
        check_out(path, "--flag", folder=folder)
    assert named.format(tmp=tmp_path) in str(caught.value)
    assert "\n" not in str(caught.value)


def test_a_folder_that_takes_no_file_is_named(tmp_path, monkeypatch):
    """A folder that exists but refuses a new file (read-only, full of inodes): the probe names it."""

    def refuse(*_, **__):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.mkstemp", refuse)
    with pytest.raises(UserError, match=rf"--out {tmp_path}: cannot create a file in {tmp_path} \(Permission denied\)"):
        check_out(tmp_path, "--out", folder=True)


def simgrid() -> list[object]:
    """The marks of a command that needs SimGrid: skipped where it is not installed."""
    try:
        load_simgrid()
    except UserError as exc:
        return [pytest.mark.skip(reason=str(exc))]
    return []


# command -> (its arguments, the output flag given UNWRITABLE (a file under it where the flag names a file))
COMMANDS = {
    "shard": (["--dataset", "{tmp}"], "--out"),
    "make-dataset": ([], "--out"),
    "collect": ([], "--out"),
    "mlperf-log": (["--runs", "{tmp}"], "--out"),
    "clean-stage": ([], "--out"),
    "simulate": (["--platform", "kumar-minsky", "--ranks", "4", "--bytes", "1024"], "--out"),
    "simulate-scale": (["--platform", "kumar-minsky", "--ranks", "4"], "--out"),
    "simulate-validate": (["--published"], "--out"),
    "bench": ([], "--out"),
    "bench-train": ([], "--out"),
    "bench-loader": (["--work", "{tmp}/work"], "--out"),
    "cost-model": (["--bench", "{tmp}/none.json"], "--out"),
    "analyze": (["--tables", "{tmp}", "--baselines", "config/baselines.yaml", "--out", "{tmp}/a"], "--metrics"),
    "plot": (["--analysis", "{tmp}"], "--out"),
    "reproduce": (["--analysis", "{tmp}", "--out", "{tmp}/r.md", "--json", "{tmp}/r.json"], "--csv"),
    "stage": (["--shards", "{tmp}"], "--log"),
}
FOLDERS = {"shard", "make-dataset", "collect", "mlperf-log", "simulate", "simulate-scale", "simulate-validate", "plot"}


@pytest.mark.parametrize(
    "command",
    [pytest.param(c, marks=simgrid() if c.startswith("simulate") else []) for c in COMMANDS],
)
def test_every_command_names_an_output_it_cannot_write_before_any_work(tmp_path, command):
    args, flag = COMMANDS[command]
    out = UNWRITABLE if command in FOLDERS else UNWRITABLE / "out.json"
    proc = cli(command, *[a.format(tmp=tmp_path) for a in args], flag, str(out))
    line = one_line(proc, f"scalerepro {command}: error: {flag} {out}: cannot make the folder {UNWRITABLE}")
    assert "Operation not permitted" in line


def test_shard_threads_below_one_is_named(tmp_path):
    proc = cli("shard", "--threads", "-1", "--out", str(tmp_path))
    assert proc.returncode == 2, proc.stderr
    assert "argument --threads: -1: give a whole number of at least 1" in proc.stderr
    assert "Traceback" not in proc.stderr


def launch(run_mpi, ranks: int, *args: str) -> subprocess.CompletedProcess[str]:
    """``scalerepro ARGS`` on ``ranks`` ranks under mpiexec, expected to fail."""
    proc = run_mpi(ranks, ["-m", "scalerepro.cli", *args], check=False, timeout=120)
    assert proc.returncode != 0, proc.stderr
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


@pytest.mark.mpi
@pytest.mark.parametrize(
    ("args", "reason"),
    [
        (["bench", "--set", "bench.iters=0"], "bench.iters: 0 is less than the minimum of 1"),  # before MPI: config
        (["bench", "--algos"], "argument --algos: expected one argument"),  # before MPI: arguments
        (["bench", "--set", "bench.max_bytes=1024"], f"--out {UNWRITABLE}/b.json: cannot make the folder"),  # shared
    ],
)
def test_an_error_every_rank_has_is_printed_once(run_mpi, args, reason):
    proc = launch(run_mpi, 3, *args, "--out", str(UNWRITABLE / "b.json"))
    assert proc.stderr.count(reason) == 1, proc.stderr
    assert proc.stderr.count("error:") == 1, proc.stderr


@pytest.mark.mpi
def test_an_error_each_rank_has_on_its_own_is_one_whole_line_per_rank(run_mpi, tmp_path):
    """After MPI starts, an error not agreed through a collective: each rank's own line, naming the rank."""
    settings = ["--set", "comm.grid=[4,1]", "--set", "bench.max_bytes=1024", "--algos", "torus2d"]
    proc = launch(run_mpi, 3, "bench", *settings, "--out", str(tmp_path / "b.json"))
    reason = "scalerepro bench: error: torus2d: grid [4, 1] has 4 ranks but the job has 3"
    lines = [line for line in proc.stderr.splitlines() if "error:" in line]
    assert lines, proc.stderr
    assert all(line.startswith("rank ") and line.endswith("[3, 1]]") and reason in line for line in lines), lines
