"""The one command line, ``scalerepro <command>``: a table of commands, one module each.

Each module of this package holds one command: ``DESCRIPTION``, its
flags (``arguments(parser)``) and what it does (``command(args)``), which
builds its config and calls the package; :mod:`scalerepro.cli.common`
holds what several share. ``main`` imports only the module of the command
it runs, and only after :func:`scalerepro.distributed.prepare_environment`
has set MPI's environment: a command module may import MPI at its top, and
MPI reads its settings once, when it starts (:mod:`scalerepro.distributed`
holds the whole order). So ``scalerepro --help`` and the supervisor start
without MPI or torch. A command launched on many ranks (``bench``,
``bench-train``, ``stage``, ``train``) imports MPI only once it starts it, so
that its argument and configuration errors, the same on every rank, come
before MPI and are printed once (:func:`main`).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
import time
from types import ModuleType
from typing import Any, NoReturn

from scalerepro import __version__
from scalerepro.distributed import prepare_environment
from scalerepro.errors import UserError

DESCRIPTION = (
    "Reproduce large-scale synchronous data-parallel ImageNet training (Ying et al. 2018, Kumar et al. 2017, "
    "Cho et al. 2017) and measure a cluster against the published results."
)
# command -> (its module in this package, one line for `scalerepro --help`)
COMMANDS: dict[str, tuple[str, str]] = {
    "make-dataset": ("make_dataset", "generate the deterministic synthetic ImageNet-layout dataset"),
    "shard": ("shard", "pack an ImageNet-layout folder into shards + manifest"),
    "stage": ("stage", "copy shards into node memory, verified (run under mpiexec/srun)"),
    "clean-stage": ("clean_stage", "remove what a sweep staged, on every node that staged it"),
    "train": ("train", "one data-parallel training run (every rank runs this)"),
    "supervise": ("supervise", "run a training launcher line; on failure name the rank that died and where"),
    "bench": ("bench", "all-reduce sweep, nccl-tests style (run under mpiexec/srun)"),
    "bench-train": ("bench_train", "training throughput: our loop vs PyTorch DDP, same run (under mpiexec/srun)"),
    "bench-loader": ("bench_loader", "shard loader vs torchvision ImageFolder+DataLoader, same JPEGs, same run"),
    "cost-model": ("cost_model", "fit alpha/beta/gamma per algorithm from bench JSONs; project to large scales"),
    "simulate": ("simulate", "the algorithms' schedules in SimGrid on described platforms, any rank count"),
    "simulate-validate": (
        "simulate_validate",
        "the simulator against this machine's bench, or against others' published all-reduce times",
    ),
    "simulate-scale": ("simulate_scale", "ResNet-50's gradient buckets at the papers' scale, against the papers"),
    "collect": ("collect", "logs -> tidy tables (runs, evals, steps, bench)"),
    "mlperf-log": ("mlperf_log", "run event logs -> MLPerf training logs (<run id>.txt, :::MLLOG lines)"),
    "analyze": ("analyze", "time-to-accuracy, throughput, scaling efficiency, baselines -> metrics.json"),
    "plot": ("plot", "seaborn figures from the analysis tables"),
    "algorithms": ("algorithms", "every all-reduce algorithm as its module describes itself, with its cost terms"),
    "reproduce": (
        "reproduce",
        "one reproduction card per paper: claims, their sources, measured and on what, simulated, verdict",
    ),
}


def module(command: str) -> ModuleType:
    """The module of ``command`` (imported now: see the package's docstring for why not earlier)."""
    return importlib.import_module(f"scalerepro.cli.{COMMANDS[command][0]}")


def parser(commands: list[str] | None = None) -> argparse.ArgumentParser:
    """The argument parser: every command listed, with the flags of ``commands`` (None: all of them)."""
    p = _Parser(prog="scalerepro", description=DESCRIPTION)
    p.add_argument("--version", action="version", version=f"scalerepro {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (_, help_line) in COMMANDS.items():
        if commands is not None and name not in commands:
            sub.add_parser(name, help=help_line)
            continue
        mod = module(name)
        s = sub.add_parser(name, help=help_line, description=mod.DESCRIPTION)
        mod.arguments(s)
        s.set_defaults(fn=mod.command)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the command; bad input exits 2 with one clear message and no traceback (under MPI, once
    where every rank has it: :func:`_say`)."""
    argv = sys.argv[1:] if argv is None else argv
    named = next((a for a in argv if not a.startswith("-")), "")
    try:
        prepare_environment()  # before any command's module is imported: it may start MPI (scalerepro.distributed)
        args = parser([named] if named in COMMANDS else []).parse_args(argv)
        code = args.fn(args)
    except SystemExit:
        raise
    except UserError as exc:
        said = _say(f"scalerepro {named}: error: {exc}", exc.shared)
        _abort_world(2, said)
        return 2
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        _abort_world(1, True)
        raise
    return int(code or 0)


class _Parser(argparse.ArgumentParser):
    """argparse's parser, whose usage errors are printed once under a launcher of many ranks (:func:`_say`)."""

    def error(self, message: str) -> NoReturn:
        """The usage and ``message``, as argparse prints them; exit 2."""
        _say(f"{self.format_usage()}{self.prog}: error: {message}", shared=True)
        sys.exit(2)


# the rank a launcher gives each process it starts, where it says (MPICH's hydra first: run inside a SLURM
# allocation, its processes also carry the allocation's SLURM_PROCID, 0 for all of them)
LAUNCHER_RANK = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def _launcher_rank() -> int:
    """This process's rank as its launcher set it in the environment (:data:`LAUNCHER_RANK`); 0 when none did."""
    for name in LAUNCHER_RANK:
        value = os.environ.get(name, "")
        if value.isdigit():
            return int(value)
    return 0


def _say(line: str, shared: bool) -> bool:
    """Print ``line`` on stderr, once per job where every rank has it; whether this rank printed it.

    Before MPI starts, an error comes from the arguments and the configuration, the same on every rank: the
    launcher's rank 0 prints it. Once MPI runs with several ranks, a ``shared`` error (raised alike on every
    rank after a collective, :class:`scalerepro.errors.UserError`) is printed by rank 0 alone; any other by
    each rank that has it, after its rank (:func:`_write_line`: ranks' lines never run together).
    """
    world = _running_world()
    if world is None:
        rank, shared = _launcher_rank(), True
    else:
        rank = world.rank
        line = line if shared else f"rank {rank}: {line}"
    if shared and rank != 0:
        return False
    _write_line(line.rstrip("\n") + "\n")
    return True


def _write_line(text: str) -> None:
    """``text`` on stderr in one ``os.write`` to its file descriptor (a pipe takes up to 4 KiB whole, so lines
    of several processes sharing it never interleave); where stderr has none (a test's capture), through it."""
    sys.stderr.flush()
    try:
        fd = sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # io.UnsupportedOperation: no descriptor behind it
        sys.stderr.write(text)
        sys.stderr.flush()
        return
    data = text.encode(errors="replace")
    while data:
        data = data[os.write(fd, data) :]


def _abort_world(code: int, said: bool) -> None:
    """Under MPI with several ranks, end them all so no rank waits forever in a collective, after the message
    this rank printed has reached the launcher (:func:`scalerepro.mpi.abort_job`). A rank that printed nothing
    first waits as long again, so that rank 0's line gets there before this rank's abort ends the job."""
    if _running_world() is not None:
        from scalerepro.mpi import ABORT_GRACE_S, abort_job  # MPI is running already: importing it starts nothing

        if not said:
            time.sleep(ABORT_GRACE_S)
        abort_job(code)


def _running_world() -> Any:
    """MPI's world communicator where MPI runs with several ranks; None otherwise (not started, ended, or one
    rank). Reads what is loaded, starting nothing."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.size > 1:
        return mpi.COMM_WORLD
    return None
