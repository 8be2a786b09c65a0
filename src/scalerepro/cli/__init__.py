"""The one command line, ``scalerepro <command>``: a table of commands, one module each.

Each module of this package holds one command: ``DESCRIPTION``, its
flags (``arguments(parser)``) and what it does (``command(args)``), which
builds its config and calls the package; :mod:`scalerepro.cli.common`
holds what several share. ``main`` imports only the module of the command
it runs, and only after :func:`scalerepro.distributed.prepare_environment`
has set MPI's environment: a command module may import MPI at its top, and
MPI reads its settings once, when it starts (:mod:`scalerepro.distributed`
holds the whole order). So ``scalerepro --help`` and the supervisor start
without MPI or torch.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from types import ModuleType

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
    p = argparse.ArgumentParser(prog="scalerepro", description=DESCRIPTION)
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
    """Entry point: run the command; bad input exits 2 with one clear message and no traceback."""
    argv = sys.argv[1:] if argv is None else argv
    named = next((a for a in argv if not a.startswith("-")), "")
    try:
        prepare_environment()  # before any command's module is imported: it may start MPI (scalerepro.distributed)
        args = parser([named] if named in COMMANDS else []).parse_args(argv)
        code = args.fn(args)
    except SystemExit:
        raise
    except UserError as exc:
        print(f"scalerepro {named}: error: {exc}", file=sys.stderr, flush=True)
        _abort_world(2)
        return 2
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        _abort_world(1)
        raise
    return int(code or 0)


def _abort_world(code: int) -> None:
    """Under MPI with several ranks, end them all so no rank waits forever in a collective, after the message
    this rank printed has reached the launcher (:func:`scalerepro.mpi.abort_job`)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.size > 1:
        from scalerepro.mpi import abort_job  # MPI is running already: importing it starts nothing

        abort_job(code)
