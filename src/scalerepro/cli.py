"""The one command line: ``scalerepro <command>``; each command parses, builds its config, calls the package."""

from __future__ import annotations

import argparse
import glob
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from scalerepro import __version__
from scalerepro.comm.costmodel import RESNET50_GRADIENT_BYTES
from scalerepro.errors import UserError
from scalerepro.netmod import choose as choose_netmod
from scalerepro.oversubscription import emulate_nodes, usable_cpus
from scalerepro.oversubscription import tune as tune_mpi_progress

if TYPE_CHECKING:
    from scalerepro.comm.benchfile import FlatRow
    from scalerepro.config import Config

CONFIG_HELP = "YAML config file (e.g. config/config.yaml); keys missing there take the schema's defaults"


def _progress(label: str, timed: bool = False) -> Callable[[int, int], None]:
    """A progress callback printing about every 10% (``timed``: every 1%, with the rate and time left) to stderr."""
    import time

    t0, last, first = time.monotonic(), -1, -1
    step = 1 if timed else 10

    def report(done: int, total: int) -> None:
        nonlocal last, first
        pct = done * 100 // max(1, total)
        if first < 0:
            first = done - 1  # work kept from an earlier attempt is not this attempt's rate
        if pct // step != last // step or done == total:
            last = pct
            line = f"{label}: {done}/{total} ({pct}%)"
            elapsed = time.monotonic() - t0
            if timed and elapsed > 0 and done > first:
                rate = (done - first) / elapsed
                line += f", {rate:.0f}/s, {(total - done) / rate / 60:.1f} min left"
            print(line, file=sys.stderr, flush=True)

    return report


def _parse_set(items: list[str]) -> dict[str, dict[str, Any]]:
    """``--set section.key=value`` pairs as sections of keys (values parsed as YAML)."""
    out: dict[str, dict[str, Any]] = {}
    for item in items:
        key, sep, value = item.partition("=")
        section, dot, name = key.partition(".")
        if not sep or not dot or not section or not name:
            raise UserError(f"--set {item!r}: expected SECTION.KEY=VALUE, e.g. --set train.epochs=2")
        out.setdefault(section, {})[name] = yaml.safe_load(value)
    return out


def _root_printer(comm: Any) -> Callable[[str], None]:
    """A progress callback printing each line to stderr on rank 0 only."""

    def emit(line: str) -> None:
        if comm.rank == 0:
            print(line, file=sys.stderr, flush=True)

    return emit


def _expand(patterns: list[str]) -> list[Path]:
    """The files matching any of the glob ``patterns``, sorted, each once."""
    return sorted({Path(p) for pattern in patterns for p in glob.glob(pattern)})  # noqa: PTH207 (patterns may be absolute; Path.glob takes relative ones)


def _config(args: argparse.Namespace) -> Config:
    """The validated, frozen Config from --config, --config-json and --set (later wins), merged and validated once."""
    from scalerepro.config import load

    overrides = _parse_set(args.set)
    for section, values in _settings(args).items():
        overrides.setdefault(section, {}).update(values)
    return load(args.config, args.config_json, overrides)


def _add_config_flags(p: argparse.ArgumentParser) -> None:
    """The config flags every command shares."""
    p.add_argument("--config", metavar="FILE", help=CONFIG_HELP)
    p.add_argument(
        "--config-json", metavar="JSON", help="config sections as one JSON object (used by the Snakemake rules)"
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.KEY=VALUE",
        help="override one key, e.g. --set train.epochs=2 (repeatable)",
    )


def _setting(s: argparse.ArgumentParser, flag: str, key: str, help: str, listed: bool = False, **kw: Any) -> None:
    """A flag that sets config key ``key`` as ``--set key=VALUE`` would (after --set): the schema checks it, and
    unset, the command takes the configuration's value, the schema's default where the config has none. So no
    default is written here; ``listed``: comma-separated values of a list key."""
    dest = flag.removeprefix("--").replace("-", "_")
    sets = f"sets {key}{', comma-separated' if listed else ''}; default: the config's"
    s.add_argument(flag, dest=dest, default=None, help=f"{help} ({sets})", **kw)
    s.set_defaults(settings={**(s.get_default("settings") or {}), dest: (key, listed)})


def _settings(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """The setting flags given (see :func:`_setting`), as sections of keys; text parsed as YAML, as --set's."""
    out: dict[str, dict[str, Any]] = {}
    for dest, (key, listed) in (getattr(args, "settings", None) or {}).items():
        value = getattr(args, dest)
        if value is None:
            continue
        if isinstance(value, str):
            value = [yaml.safe_load(v) for v in value.split(",") if v] if listed else yaml.safe_load(value)
        section, _, name = key.partition(".")
        out.setdefault(section, {})[name] = value
    return out


def cmd_make_dataset(args: argparse.Namespace) -> None:
    """Generate the synthetic dataset."""
    from dataclasses import fields

    from scalerepro.data.synth import SynthSpec, generate

    ds = _config(args).dataset
    spec = SynthSpec(**{f.name: getattr(ds, f.name) for f in fields(SynthSpec) if hasattr(ds, f.name)})
    root = Path(args.out) if args.out else Path(ds.root)
    path = generate(spec, root, _progress("make-dataset"))
    print(path)


def cmd_shard(args: argparse.Namespace) -> None:
    """Shard the train and/or val split."""
    from scalerepro.data.pack import describe_rate, shard_split

    cfg = _config(args)
    source = Path(args.dataset) if args.dataset else cfg.dataset.path
    if not source.is_dir():
        raise UserError(
            f"dataset folder {source} not found; set dataset.root/dataset.name (or --dataset), "
            "or generate the laptop dataset with `scalerepro make-dataset`"
        )
    splits = ["train", "val"] if args.split == "all" else [args.split]
    counts = {"train": cfg.shard.train_shards, "val": cfg.shard.val_shards}
    for split in splits:
        m = shard_split(
            source,
            split,
            Path(args.out) / split,
            counts[split],
            cfg.shard.seed,
            args.skip_bad,
            _progress(f"shard {split}", timed=True),
            args.threads,
            max_pixels=cfg.shard.max_pixels,
        )
        print(
            f"{split}: {m['samples']} samples in {len(m['shards'])} shards ({m['kept_from_earlier_attempt']} kept "
            f"from an earlier attempt), {m['bytes'] / 2**20:.1f} MiB, converted {m['converted']}, skipped "
            f"{len(m['skipped'])}, row-indexed {m['row_index']['images']}"
            + (
                ""
                if m["row_index"]["tool"]
                else " (install jpegtran, Debian's libjpeg-turbo-progs, and re-shard "
                "for the loader to decode only the rows each crop needs)"
            ),
            file=sys.stderr,
        )
        print(describe_rate(m["rate"]), file=sys.stderr)


def cmd_stage(args: argparse.Namespace) -> None:
    """Stage shards into node memory (first rank per node copies)."""
    from scalerepro.data.stage import clean_on_nodes, describe, stage_on_nodes
    from scalerepro.io import write_json_atomic
    from scalerepro.mpi import on_root, world

    root = args.root or _config(args).stage.root
    comm = world()
    if args.clean:
        only = [f for f in args.only.split(",") if f] if args.only else None
        removed = clean_on_nodes(comm, root, only)
        on_root(
            comm,
            lambda: print(
                f"removed {len(removed)} staged folder(s) under {root}: {', '.join(removed)}", file=sys.stderr
            ),
        )
        return
    record = stage_on_nodes(comm, [Path(d) for d in args.shards], root)

    def report() -> None:
        if args.log:
            write_json_atomic(args.log, record)
        print(describe(record), file=sys.stderr)

    on_root(comm, report)


def cmd_clean_stage(args: argparse.Namespace) -> None:
    """Remove a sweep's staged shards on the nodes that staged them, unless the config keeps them."""
    from scalerepro.data.stage import clean_sweep
    from scalerepro.io import write_json_atomic

    stage = _config(args).stage
    records = [json.loads(Path(r).read_text()) for r in args.records]
    outcome = clean_sweep(records, stage.kept(args.launcher), args.launcher)
    write_json_atomic(Path(args.out), outcome)
    if outcome["kept"]:
        print(
            "staged shards kept (stage.keep, or off SLURM by default); `make clean-stage` removes them", file=sys.stderr
        )
    for item in outcome["cleaned"]:
        print(f"cleaned {', '.join(item['nodes'])} under {item['root']}", file=sys.stderr)
    for item in outcome["failed"] + outcome["unreachable"]:
        print(f"warning: not cleaned: {item}", file=sys.stderr)


def _staged_dir(shards: Path, split: str, stage_root: str, direct: bool) -> Path:
    """The folder training reads a split from: the staged copy, or the shard folder itself."""
    from scalerepro.data.shards import read_manifest
    from scalerepro.data.stage import staged_folder
    from scalerepro.mpi import this_node

    source = shards / split
    if direct:
        return source
    dest = staged_folder(stage_root, read_manifest(source), this_node())
    if not (dest / "manifest.json").is_file():
        raise UserError(
            f"{split} shards are not staged in {dest}; run `scalerepro stage --shards {source}` "
            "in the same allocation first (or pass --no-stage to read the shard folder)"
        )
    return dest


def _check_out_folder(out: Path) -> None:
    """A UserError unless ``out`` is a folder or can be made one (no file in its place or above it)."""
    for at in (out, *out.parents):
        if at.exists():
            if not at.is_dir():
                what = "is a file" if at == out else f"lies under {at}, a file"
                raise UserError(f"--out {out} {what}, not a folder; give a folder for the run (made if absent)")
            return


def cmd_train(args: argparse.Namespace) -> int:
    """Run (or resume) one training run on all ranks; 128 + signal after a preemption checkpoint (a finished
    run's ranks exit here, see :func:`scalerepro.mpi.exit_now`)."""
    cfg = _config(args).for_variant(args.variant)
    _check_out_folder(Path(args.out))
    emulate_nodes(cfg.train.emulate_nodes)  # before MPI starts (the import below)
    from scalerepro.mpi import block_ordered, exit_now, on_root, world
    from scalerepro.train.checkpoint import Preempted
    from scalerepro.train.loop import RunSpec, run

    shards = Path(args.shards)
    if args.no_stage:
        from scalerepro.data.stage import verify_on_nodes

        verify_on_nodes(world(), [shards / "train", shards / "val"], args.trust_shards)
    spec = RunSpec(
        config=cfg,
        algorithm=args.algo,
        train_dir=_staged_dir(shards, "train", cfg.stage.root, args.no_stage),
        val_dir=_staged_dir(shards, "val", cfg.stage.root, args.no_stage),
        out=Path(args.out),
        repetition=args.rep,
    )
    try:
        record = run(spec, block_ordered(world()) if cfg.train.emulate_nodes > 1 else world())
    except Preempted as exc:
        message = f"scalerepro train: {exc}"
        on_root(world(), lambda: print(message, file=sys.stderr, flush=True))
        return 128 + exc.signum
    final = record["final"] or {}
    on_root(
        world(),
        lambda: print(
            f"train {spec.algorithm} x{record['world_size']}: top-1 {final.get('top1', float('nan')):.3f} after "
            f"{record['config']['train']['epochs']} epochs, {record['seconds']:.1f} s, status {record['status']}",
            file=sys.stderr,
        ),
    )
    return exit_now(0)  # the run's files are written and closed: skip tearing torch down on every rank


def _count(minimum: int) -> Callable[[str], int]:
    """An argparse type: a whole number at least ``minimum`` (argparse names the flag in its error)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{text}: give a whole number of at least {minimum}")
        return value

    return parse


def _positive_float(text: str) -> float:
    """An argparse type: a number above zero."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number above 0")
    return value


def cmd_supervise(args: argparse.Namespace) -> int:
    """Run the launcher line; on failure, name the rank that died first, the last step and checkpoint."""
    from scalerepro.train.supervise import supervise

    cmd = args.cmd[1:] if args.cmd[:1] == ["--"] else args.cmd
    if not cmd:
        raise UserError(
            "no command given; e.g. scalerepro supervise --run-dir DIR -- mpiexec -n 2 scalerepro train ..."
        )
    try:
        return supervise(cmd, Path(args.run_dir), args.start_timeout)
    except FileNotFoundError:
        raise UserError(
            f"{cmd[0]}: command not found; is the launcher on PATH (mpiexec from the mpich wheel, or srun)?"
        ) from None


def cmd_bench(args: argparse.Namespace) -> None:
    """All-reduce sweep with correctness check; JSON for analysis, a table for people."""
    from scalerepro.comm.algorithms import get
    from scalerepro.comm.benchfile import total_wrong
    from scalerepro.comm.harness import SweepSpec, benchmark
    from scalerepro.io import write_json_atomic
    from scalerepro.mpi import on_root, world

    cfg = _config(args)
    b = cfg.bench
    algos = tuple(args.algos.split(",")) if args.algos else b.algorithms
    for a in algos:
        get(a)
    fields = (b.min_bytes, b.max_bytes, b.dtype, b.warmup, b.iters, b.check, b.min_time_s, b.max_iters)
    spec = SweepSpec(algos, *fields, device=args.device, threads=0, rounds=b.rounds)
    comm = world()
    peers = [p for p in (args.compare or "").split(",") if p]
    result = benchmark(comm, cfg.comm.params(), spec, peers, lambda text: print(text, file=sys.stderr, flush=True))
    result["params"] = cfg.to_dict()["comm"]
    on_root(comm, lambda: write_json_atomic(args.out, result))
    wrong = total_wrong(result["rows"])
    if wrong:
        raise UserError(f"{wrong} wrong elements in the all-reduce results (see #wrong in {args.out})")


def cmd_bench_loader(args: argparse.Namespace) -> None:
    """Shard loader vs torchvision ImageFolder + DataLoader on the same JPEGs, same run; JSON + table, then the
    loader workers per accelerator that the published and measured training rates need."""
    from scalerepro.baselines import default_path
    from scalerepro.data import feed
    from scalerepro.data import loaderbench as lb
    from scalerepro.data.shards import read_manifest
    from scalerepro.io import write_json_atomic
    from scalerepro.provenance import record

    scale = tuple(float(x) for x in args.scale.split(","))
    if len(scale) != 2 or not 0 < scale[0] <= scale[1] <= 1:
        raise UserError(f"--scale {args.scale}: give MIN,MAX with 0 < MIN <= MAX <= 1 (ImageNet standard 0.08,1)")
    spec = lb.LoaderBenchSpec(
        images=args.images,
        size=args.size,
        batch=args.batch,
        workers=_int_list(args.workers, "--workers"),
        reps=args.reps,
        scale=scale,
        seed=args.seed,
    )
    baselines = Path(args.baselines) if args.baselines else default_path()
    wanted = feed.rates(args.model, baselines, Path(args.train_json) if args.train_json else None)  # bad files: now
    work = Path(args.work)
    print(f"# {spec.images} JPEGs (400-500 px, quality 90) in {work}", file=sys.stderr)
    dataset = lb.bench_dataset(work, spec.images, spec.seed)
    staged = lb.staged_shards(dataset, work, args.stage_root, spec.seed, row_index=not args.no_row_index)
    row_index = read_manifest(staged).get("row_index", {"tool": None, "images": 0})
    print(
        f"# shards row-indexed: {row_index['images']} images ({row_index['tool'] or 'no jpegtran: decoded whole'})",
        file=sys.stderr,
    )
    rows = lb.run(spec, dataset, staged, lambda line: print(line, file=sys.stderr, flush=True))
    summary = lb.summarise(rows)
    needed = feed.table(feed.slowest_worker(summary), spec.size, args.model, baselines, wanted)
    write_json_atomic(
        args.out,
        {
            **record(),
            "cpus": len(usable_cpus()),
            "spec": {**spec.__dict__},
            "dataset": str(dataset),
            "staged": str(staged),
            "row_index": row_index,
            "rows": rows,
            "summary": summary,
            "workers_needed": needed,
        },
    )
    print(lb.format_summary(summary), file=sys.stderr)
    print(feed.format_table(needed), file=sys.stderr)


def cmd_bench_train(args: argparse.Namespace) -> None:
    """Our training loop vs PyTorch DDP, same model, batch and data, same run (under mpiexec/srun); JSON + table."""
    from scalerepro.baselines import published_per_accelerator
    from scalerepro.io import write_json_atomic
    from scalerepro.mpi import on_root, world
    from scalerepro.provenance import record
    from scalerepro.train import bench
    from scalerepro.train.trainer import check_algorithm

    cfg = _config(args)
    check_algorithm(args.algo)
    if min(args.steps, args.reps) < 1 or args.warmup < 0:
        raise UserError(
            f"--steps {args.steps} --reps {args.reps} --warmup {args.warmup}: steps and reps must be >= 1, warmup >= 0"
        )
    spec = bench.TrainBenchSpec(args.algo, args.steps, args.warmup, args.reps, args.classes)
    comm = world()
    result = bench.run(cfg, spec, comm, _root_printer(comm))
    out = {**record(comm), "spec": spec.__dict__, "config": cfg.to_dict(), **result}
    if args.baselines:
        out["published_per_accelerator"] = published_per_accelerator(Path(args.baselines), cfg.train.model)
    on_root(comm, lambda: write_json_atomic(args.out, out))
    on_root(
        comm,
        lambda: print(
            bench.format_summary(result["summary"])
            + "".join(
                f"\npublished {b['work']}: {b['images_per_s_per_accelerator']:.0f} images/s per accelerator "
                f"({b['hardware']})"
                for b in out.get("published_per_accelerator", [])
            ),
            file=sys.stderr,
        ),
    )


def _int_list(text: str, flag: str) -> tuple[int, ...]:
    """'1,2' -> (1, 2), with an error naming the flag."""
    try:
        values = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise UserError(f"{flag} {text}: give comma-separated integers, e.g. 1,2") from None
    if any(v < 0 for v in values):
        raise UserError(f"{flag} {text}: counts must be >= 0")
    return values


def cmd_cost_model(args: argparse.Namespace) -> None:
    """Fit alpha/beta/gamma per algorithm from bench JSONs; print residuals; project ResNet-50 gradients."""
    from scalerepro.comm.costmodel import fit_regimes, for_projection, format_fits, format_projection
    from scalerepro.io import write_json_atomic
    from scalerepro.sim.platforms import project

    cfg = _config(args)
    paths, rows, gamma = _bench_rows(args.bench)
    # auto is not one schedule (it picks per size), so it has no alpha-beta of its own
    algos = args.algos.split(",") if args.algos else sorted({r["algorithm"] for r in rows} - {"auto"})
    fits = fit_regimes(algos, rows, gamma)
    chosen = for_projection(fits)
    platforms = _platforms(args, cfg.simulate.platforms)
    topos = [plat.topology() for plat in platforms]
    ranks = list(cfg.simulate.ranks)
    proj = project(chosen, platforms, ranks, args.bytes, cfg.comm.colors)
    print(format_fits(fits), file=sys.stderr)
    print(format_projection(chosen, topos, ranks, proj, args.bytes), file=sys.stderr)
    write_json_atomic(
        args.out,
        {
            "gamma_s_per_byte": gamma,
            "fits": [f.__dict__ for f in fits],
            "projection": proj,
            "topologies": [t.__dict__ for t in topos],
            "platforms_file": args.platforms,
            "bytes": args.bytes,
            "colors": cfg.comm.colors,
            "sources": [str(p) for p in paths],
        },
    )


def _bench_rows(patterns: list[str]) -> tuple[list[Path], list[FlatRow], float]:
    """The bench JSONs matching ``patterns``, every row of them, and their median measured gamma (s/byte)."""
    from scalerepro.comm.benchfile import read_rows

    paths = _expand(patterns)
    if not paths:
        raise UserError(f"no bench JSON matches {' '.join(patterns) or '(none given)'}; run `scalerepro bench` first")
    return (paths, *read_rows(paths))


def _platforms(args: argparse.Namespace, named: Sequence[str]) -> list[Any]:
    """The platforms ``named`` (or all) from --platforms; this-machine fitted from --bench."""
    from scalerepro.sim.platforms import load, pick
    from scalerepro.sim.validate import MACHINE, machines

    names = list(named)
    chosen = []
    if MACHINE in names:
        if not args.bench:
            raise UserError(f"--platform {MACHINE} is fitted from this machine's bench: give --bench FILE...")
        fits = machines(*_bench_rows(args.bench)[1:])
        chosen.append(fits.get(("dedicated", "mpi")) or next(iter(fits.values())))
        names.remove(MACHINE)
    if names:
        path = Path(args.platforms)
        known = load(path)
        chosen += list(known.values()) if names == ["all"] else [pick(known, n, path) for n in names]
    return chosen


def _simulated(points: list[Any], label: str, jobs: int) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Simulate the points whose schedules exist, with progress on stderr; (rows, skipped)."""
    from scalerepro.sim import simulate_feasible

    return simulate_feasible(points, label, jobs, _progress(label))


def _write_tables(out: Path, tables: dict[str, list[dict[str, Any]]], record: dict[str, Any], name: str) -> None:
    """Each table as out/NAME.csv, and the record (every parameter, argv) as out/name."""
    import pandas as pd

    from scalerepro.io import write_json_atomic, write_text_atomic

    for table, rows in tables.items():
        write_text_atomic(out / f"{table}.csv", pd.DataFrame(rows).to_csv(index=False))
    write_json_atomic(out / name, {"argv": sys.argv, **record, **tables})


def cmd_simulate(args: argparse.Namespace) -> None:
    """Simulate the algorithms' schedules on described platforms in SimGrid; write simulation.csv and .json."""
    from scalerepro.comm.algorithms import get
    from scalerepro.sim.engine import Point, load_simgrid

    load_simgrid()  # absent: one line naming the install command, before any work
    algos = [a for a in args.algos.split(",") if a]
    for algo in algos:
        if get(algo) is None:
            raise UserError("simulate --algos auto: auto picks per size on a measured machine; name the algorithms")
    colors = _config(args).comm.colors
    platforms = _platforms(args, [n for n in args.platform.split(",") if n])
    points = [
        Point(algo, p, n, plat, colors)
        for plat in platforms
        for p in _int_list(args.ranks, "--ranks")
        for n in _int_list(args.bytes, "--bytes")
        for algo in algos
    ]
    rows, skipped = _simulated(points, "simulate", args.jobs)
    _write_tables(
        Path(args.out),
        {"simulation": rows},
        {"platforms": [p.as_dict() for p in platforms], "colors": colors, "skipped": skipped},
        "simulation.json",
    )
    print(
        f"{'platform':>14} {'algorithm':>15} {'ranks':>6} {'bytes':>11} {'simulated ms':>13} {'busbw GB/s':>11} "
        f"{'wall s':>7}",
        file=sys.stderr,
    )
    for r in rows:
        print(
            f"{r['platform']:>14} {r['algorithm']:>15} {r['ranks']:>6} {r['bytes']:>11} "
            f"{r['simulated_s'] * 1e3:>13.3f} {r['busbw_GBps']:>11.2f} {r['wall_s']:>7.1f}",
            file=sys.stderr,
        )


def cmd_simulate_validate(args: argparse.Namespace) -> None:
    """The simulator against measurements: this machine's bench (--bench), or others' clusters (--published)."""
    from scalerepro.sim.engine import load_simgrid

    if bool(args.bench) == bool(args.published):
        raise UserError("simulate-validate: give --bench FILE... (this machine) or --published (others' clusters)")
    load_simgrid()
    if args.published:
        _validate_published(args)
    else:
        _validate_bench(args)


def _validate_bench(args: argparse.Namespace) -> None:
    """Fit this machine from its bench, simulate every measured point; write validation.csv and its summary."""
    from scalerepro.sim import validate

    _, rows, gamma = _bench_rows(args.bench)
    machines = validate.machines(rows, gamma)
    kept = validate.measured(rows)
    simulated, skipped = _simulated(validate.points(kept, machines), "simulate-validate", args.jobs)
    if skipped:
        raise UserError(
            f"simulate-validate: {skipped[0]['algorithm']} at {skipped[0]['ranks']} ranks has no "
            f"schedule: {skipped[0]['why']}"
        )
    table = validate.table(kept, simulated)
    summary = validate.summary(table)
    _write_tables(
        Path(args.out),
        {"validation": table, "validation_summary": summary},
        {"platforms": [v.as_dict() for v in machines.values()], "bar_bytes": validate.BAR_BYTES},
        "validation.json",
    )
    for s in summary:
        big = s["median_abs_error_64KiB_up"]
        print(
            f"{s['ranks']} ranks ({s['regime']}): median |simulated/measured - 1| "
            f"{'n/a' if big is None else f'{big:.1%}'} over {s['points_64KiB_up']} points >= 64 KiB, "
            f"{s['median_abs_error_all']:.1%} over all {s['points']}",
            file=sys.stderr,
        )


def _validate_published(args: argparse.Namespace) -> None:
    """Simulate the all-reduce times others published; write published.csv and published_summary.csv."""
    from scalerepro.sim import validate
    from scalerepro.sim.platforms import load

    bucket_mib = _config(args).train.bucket_mib
    path = Path(args.platforms)
    platforms = load(path)
    measurements = validate.load_measurements(path, platforms)
    points = validate.published_points(measurements, platforms)
    simulated, skipped = _simulated(points, "simulate-validate", args.jobs)
    if skipped:
        raise UserError(f"simulate-validate: {skipped[0]['algorithm']} has no schedule: {skipped[0]['why']}")
    table = validate.published_table(measurements, simulated, bucket_mib)
    summary = validate.published_summary(table)
    used = {m["platform"] for m in measurements}
    _write_tables(
        Path(args.out),
        {"published": table, "published_summary": summary},
        {
            "platforms": [platforms[n].as_dict() for n in sorted(used)],
            "tolerance": validate.PUBLISHED_TOLERANCE,
            "bucket_mib": bucket_mib,
        },
        "published.json",
    )
    for s in summary:
        print(
            f"{s['id']} ({s['ranks']} ranks): |simulated/published - 1| median {s['median_abs_error']:.1%}, "
            f"max {s['max_abs_error']:.1%} over {s['bar_points']} sizes of ResNet-50's buckets: "
            f"{'within' if s['within'] else 'not within'} {validate.PUBLISHED_TOLERANCE:.0%}",
            file=sys.stderr,
        )


def cmd_simulate_scale(args: argparse.Namespace) -> None:
    """ResNet-50's gradient buckets on every platform and algorithm; projected steps with bands; claims judged."""
    from scalerepro.sim import papers, scale
    from scalerepro.sim.engine import load_simgrid

    load_simgrid()
    cfg = _config(args)
    sim, bucket_mib, colors = cfg.simulate, cfg.train.bucket_mib, cfg.comm.colors
    platforms = _platforms(args, sim.platforms)
    if list(sim.platforms) == ["all"]:  # the clusters kept to check the simulator against carry no ResNet-50 rate
        platforms = [p for p in platforms if p.images_per_s_per_accelerator]
    claims = papers.load_claims(Path(args.platforms))
    points = scale.unique(
        [
            pt
            for plat in platforms
            for pt in scale.points(
                plat,
                list(sim.algorithms),
                [p for p in sim.ranks if plat.holds(p)],
                list(sim.dtypes),
                bucket_mib,
                colors,
                sim.corners,
            )
        ]
        + scale.claim_points(claims, platforms, bucket_mib, colors, sim.claims_max_ranks, sim.sensitivity)
    )
    rows, skipped = _simulated(points, "simulate-scale", args.jobs)
    projections = {p.name: scale.Projection(rows, p, bucket_mib, sim.batch_per_rank) for p in platforms}
    steps = [s for proj in projections.values() for s in scale.steps(proj)]
    compared = papers.compare(claims, projections)
    _write_tables(
        Path(args.out),
        {
            "scale_points": rows,
            "scale": steps,
            "papers": compared,
            "sensitivity": papers.sensitivity(claims, projections),
        },
        {
            "platforms": [p.as_dict() for p in platforms],
            "bucket_mib": bucket_mib,
            "batch_per_rank": sim.batch_per_rank,
            "colors": colors,
            "corners": sim.corners,
            "sensitivity": sim.sensitivity,
            "skipped": skipped,
        },
        "scale.json",
    )
    for c in compared:
        print(f"{c['paper']}: {c['claim']}: {papers.describe(c)}", file=sys.stderr)


def cmd_collect(args: argparse.Namespace) -> None:
    """Logs -> tidy CSV tables."""
    from scalerepro.analysis.collect import collect

    def progress(done: int, total: int) -> None:
        if done == total or done % max(1, total // 20) == 0:
            print(f"collect: {done}/{total} runs", file=sys.stderr, flush=True)

    counts = collect(_expand(args.runs), _expand(args.bench), Path(args.out), progress)
    for name, rows in counts.items():
        print(f"{name}: {rows} rows", file=sys.stderr)


def cmd_mlperf_log(args: argparse.Namespace) -> None:
    """One MLPerf training log (:::MLLOG lines) per run folder."""
    from scalerepro.analysis.mlperf import write_mllog

    runs = [Path(p).parent if Path(p).name == "run.json" else Path(p) for p in _expand(args.runs)]
    if not runs:
        raise UserError(f"no run folder matches {args.runs}; give run folders or their run.json files")
    for run in runs:
        print(f"{write_mllog(run, Path(args.out), args.org, args.status)}: from {run}", file=sys.stderr)


def cmd_analyze(args: argparse.Namespace) -> None:
    """Tables -> metrics.json and analysis tables."""
    from scalerepro.analysis.analyze import analyze

    metrics = analyze(
        Path(args.tables),
        Path(args.baselines),
        Path(args.metrics),
        Path(args.out),
        Path(args.costmodel) if args.costmodel else None,
        Path(args.simulation) if args.simulation else None,
    )
    print(json.dumps(metrics["summary"], indent=2), file=sys.stderr)


def cmd_plot(args: argparse.Namespace) -> None:
    """Analysis tables -> figures."""
    from scalerepro.analysis.plots import plot_all

    for path in plot_all(Path(args.analysis), Path(args.out)):
        print(path, file=sys.stderr)


def cmd_reproduce(args: argparse.Namespace) -> None:
    """Analysis tables + the papers' claims -> one reproduction card per paper."""
    from scalerepro.analysis.reproduce import reproduce, tally

    command = (
        "scalerepro reproduce " + " ".join(sys.argv[2:]) if sys.argv[1:2] == ["reproduce"] else "scalerepro reproduce"
    )
    table = reproduce(Path(args.analysis), Path(args.claims), Path(args.out), Path(args.csv), Path(args.json), command)
    print(f"{len(table)} claims: {tally(table)} -> {args.out}", file=sys.stderr)


def _platform_args(s: argparse.ArgumentParser, default: str | None) -> None:
    """--platform (``default`` None: it sets simulate.platforms), --platforms, --bench and --colors, shared by the
    simulate commands."""
    what = "platform names of --platforms, `all`, or this-machine (fitted from --bench)"
    if default is None:
        _setting(s, "--platform", "simulate.platforms", what, listed=True)
    else:
        s.add_argument("--platform", default=default, help=f"comma-separated {what} (default {default})")
    s.add_argument(
        "--platforms",
        default="config/platforms.yaml",
        metavar="FILE",
        help="platform descriptions (default config/platforms.yaml)",
    )
    s.add_argument("--bench", nargs="*", default=[], metavar="GLOB", help="bench JSONs to fit this-machine from")
    _setting(s, "--colors", "comm.colors", "multicolor colors, at least 1", type=_count(1))
    _jobs_arg(s)


def _bucket_mib_arg(s: argparse.ArgumentParser, what: str) -> None:
    """--bucket-mib: ResNet-50's gradient buckets as training cuts them (train.bucket_mib)."""
    _setting(s, "--bucket-mib", "train.bucket_mib", what, type=_positive_float)


def _jobs_arg(s: argparse.ArgumentParser) -> None:
    """--jobs: simulations at once, each on its own core."""
    s.add_argument(
        "--jobs",
        type=_count(0),
        default=0,
        help="simulations at once, one core each (default: every core this process may use)",
    )


def parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    p = argparse.ArgumentParser(prog="scalerepro", description=__doc__)
    p.add_argument("--version", action="version", version=f"scalerepro {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")

    s = sub.add_parser(
        "make-dataset",
        help="generate the deterministic synthetic ImageNet-layout dataset",
        description="Write <root>/<name>/{train,val}/<wnid>/*.JPEG; same seed, same bytes.",
    )
    _add_config_flags(s)
    s.add_argument("--out", metavar="ROOT", help="folder to write <name>/ into (default: dataset.root)")
    s.set_defaults(fn=cmd_make_dataset)

    s = sub.add_parser(
        "shard",
        help="pack an ImageNet-layout folder into shards + manifest",
        description="Shards of RGB JPEG bytes with labels; grayscale/CMYK/PNG inputs are re-encoded.",
    )
    _add_config_flags(s)
    s.add_argument("--dataset", metavar="DIR", help="ImageNet-layout folder (default: dataset.root/dataset.name)")
    s.add_argument("--split", choices=["train", "val", "all"], default="all", help="which split (default: all)")
    s.add_argument("--out", metavar="DIR", required=True, help="write <split>/shard-*.srs and manifest.json here")
    s.add_argument(
        "--skip-bad",
        action="store_true",
        help="leave undecodable files and images above shard.max_pixels out (listed in the manifest) instead "
        "of failing",
    )
    s.add_argument(
        "--threads",
        type=int,
        metavar="N",
        help="packing threads (default: the CPUs this process may use, e.g. its SLURM allocation)",
    )
    s.set_defaults(fn=cmd_shard)

    s = sub.add_parser(
        "stage",
        help="copy shards into node memory, verified (run under mpiexec/srun)",
        description="The first rank of each node copies; others wait. Verified shards already there are kept.",
    )
    _add_config_flags(s)
    s.add_argument("--shards", nargs="*", default=[], metavar="DIR", help="shard folders (with manifest.json) to stage")
    s.add_argument("--root", help="node-memory folder (default: stage.root)")
    s.add_argument("--log", metavar="FILE", help="write a JSON record of what was staged, per node, with timings")
    s.add_argument(
        "--clean",
        action="store_true",
        help="remove what this node staged (<root>/<node>/) instead; on every node when launched on each",
    )
    s.add_argument("--only", metavar="FOLDERS", help="with --clean: only these dataset folders (comma-separated)")
    s.set_defaults(fn=cmd_stage)

    s = sub.add_parser(
        "clean-stage",
        help="remove what a sweep staged, on every node that staged it",
        description="Reads the sweep's stage records (stage.json) and removes the staged dataset "
        "folders on each node named there: one srun task per node under SLURM (--launcher "
        "srun ...), else on this node. Kept when stage.keep is true, or by default off "
        "SLURM. Nodes that could not be cleaned are listed in --out, not raised.",
    )
    _add_config_flags(s)
    s.add_argument("--records", nargs="*", default=[], metavar="FILE", help="the sweep's stage.json files")
    s.add_argument("--launcher", default="", help="the training launcher (srun: clean through SLURM)")
    s.add_argument("--out", required=True, metavar="FILE", help="JSON record of what was staged and removed")
    s.set_defaults(fn=cmd_clean_stage)

    s = sub.add_parser(
        "train",
        help="one data-parallel training run (every rank runs this)",
        description="Synchronous SGD over the chosen all-reduce; JSON-lines events + run.json in --out.",
    )
    _add_config_flags(s)
    s.add_argument("--algo", required=True, help="all-reduce algorithm for the gradients")
    s.add_argument("--shards", required=True, metavar="DIR", help="folder with train/ and val/ shard folders")
    s.add_argument(
        "--out",
        required=True,
        metavar="DIR",
        help="run directory (events.jsonl, run.json, checkpoint.pt); a checkpoint there is resumed from",
    )
    s.add_argument(
        "--no-stage",
        action="store_true",
        help="read the shard folder directly instead of the staged copy (each shard checked against the manifest "
        "first: size and footer, and sha256 unless --trust-shards)",
    )
    s.add_argument(
        "--trust-shards",
        action="store_true",
        help="with --no-stage: skip the sha256 of every shard (a damaged record is still named when it is read)",
    )
    s.add_argument(
        "--variant",
        default="base",
        metavar="NAME",
        help="train recipe from train.variants to lay over the train section (default base: as written)",
    )
    s.add_argument(
        "--rep",
        type=int,
        default=0,
        metavar="K",
        help="repetition index of this run among runs with the same settings (recorded; default 0)",
    )
    s.set_defaults(fn=cmd_train)

    s = sub.add_parser(
        "supervise",
        help="run a training launcher line; on failure name the rank that died and where",
        description="Runs CMD (e.g. mpiexec -n 2 scalerepro train ... --out DIR) and passes its exit "
        "status through. If it fails, prints which rank on this host exited first (pid, "
        "host), the last step logged and the last checkpoint, and how to resume. With --start-timeout, "
        "a launch whose ranks never start (MPI_Init stuck) is stopped and reported.",
    )
    s.add_argument("--run-dir", required=True, metavar="DIR", help="the training run's --out folder")
    s.add_argument(
        "--start-timeout",
        type=_positive_float,
        metavar="S",
        help="stop the launcher (exit 124) when its ranks have not started, i.e. rank 0 wrote no ranks.json, "
        "within S seconds (the train rule passes comm.timeout_s; default: wait as long as the launcher runs)",
    )
    s.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD", help="the launcher line to run")
    s.set_defaults(fn=cmd_supervise)

    s = sub.add_parser(
        "bench",
        help="all-reduce sweep, nccl-tests style (run under mpiexec/srun)",
        description="Sizes by doubling; each size out of place (result in a separate buffer, the send buffer checked "
        "unchanged) and in place, as nccl-tests' two column groups, then its # Avg bus bandwidth footer; "
        "t = max over ranks of the mean; busbw = algbw*2(p-1)/p; checked. "
        "Each row records the executor (--set comm.executor=mpi|torch) and the schedule "
        "that ran (colors, orders, grid, or what the algorithm reduced to).",
    )
    _add_config_flags(s)
    s.add_argument("--algos", help="comma-separated algorithms (default: bench.algorithms)")
    s.add_argument(
        "--compare",
        metavar="PEERS",
        help="comma-separated peers (e.g. native,gloo, or nccl on a GPU): "
        "print and record every other algorithm's busbw and time as ratios to each, from this same run",
    )
    s.add_argument(
        "--device",
        choices=["cpu", "cuda"],
        default="cpu",
        help="where the buffers live (default cpu); cuda: each rank's GPU, and comm.executor=auto then "
        "runs the schedules with torch.distributed (NCCL)",
    )
    s.add_argument("--out", required=True, metavar="FILE", help="JSON result file")
    s.set_defaults(fn=cmd_bench)

    s = sub.add_parser(
        "bench-train",
        help="training throughput: our loop vs PyTorch DDP, same run (under mpiexec/srun)",
        description="Same model, seed, batch and in-memory batches on both sides; repetitions "
        "interleaved; medians of images/s (max over ranks), their ratio, and our all-reduce "
        "time per step. Batch norm is local on both sides.",
    )
    _add_config_flags(s)
    s.add_argument("--algo", default="ring", help="our gradient all-reduce (default ring)")
    s.add_argument("--out", required=True, metavar="FILE", help="JSON result file")
    s.add_argument("--steps", type=int, default=20, help="timed steps per repetition and side (default 20)")
    s.add_argument("--warmup", type=int, default=3, help="untimed steps per side first (default 3)")
    s.add_argument("--reps", type=int, default=5, help="repetitions (default 5; medians reported)")
    s.add_argument("--classes", type=int, default=10, help="classes of the synthetic labels (default 10)")
    s.add_argument(
        "--baselines",
        metavar="FILE",
        help="also print the published images/s per accelerator from this "
        "file (config/baselines.yaml) for the configured model",
    )
    s.set_defaults(fn=cmd_bench_train)

    s = sub.add_parser(
        "bench-loader",
        help="shard loader vs torchvision ImageFolder+DataLoader, same JPEGs, same run",
        description="Generates ImageNet-sized JPEGs once (400-500 px, quality 90), shards and stages "
        "them, then times both loaders with the same RandomResizedCrop + flip + normalise "
        "and worker count: images/s (per worker) and start-up, medians over "
        "repetitions, then peak RSS/PSS of the process tree, the median of as many passes again, each "
        "in a fresh process (the PSS page walk would slow the timed passes).",
    )
    s.add_argument(
        "--work",
        required=True,
        metavar="DIR",
        help="folder for the generated JPEGs and their shards (reused when present)",
    )
    s.add_argument("--out", required=True, metavar="FILE", help="JSON result file")
    s.add_argument("--images", type=int, default=2000, help="JPEGs to generate (default 2000)")
    s.add_argument("--size", type=int, default=224, help="crop size in pixels (default 224)")
    s.add_argument("--batch", type=int, default=64, help="images per batch (default 64)")
    s.add_argument("--workers", default="1,2", help="comma-separated worker counts to measure (default 1,2)")
    s.add_argument("--reps", type=int, default=3, help="repetitions per worker count (default 3; medians reported)")
    s.add_argument("--scale", default="0.08,1", help="RandomResizedCrop scale MIN,MAX (default 0.08,1)")
    s.add_argument("--seed", type=int, default=0, help="seed of the images and of the shuffles (default 0)")
    s.add_argument(
        "--no-row-index",
        action="store_true",
        help="shard without jpegtran's row index even where it is installed (a machine without "
        "libjpeg-turbo-progs: every JPEG decoded whole)",
    )
    s.add_argument(
        "--stage-root",
        default="/dev/shm/scalerepro-bench",
        help="node-memory folder to stage into "
        "(default /dev/shm/scalerepro-bench; remove with `scalerepro stage --clean --root ...`)",
    )
    s.add_argument(
        "--baselines",
        metavar="FILE",
        help="published results whose images/s per accelerator the workers-needed table sizes for "
        "(default config/baselines.yaml of the working directory, else of the checkout)",
    )
    s.add_argument(
        "--model",
        default="resnet50",
        help="model of the published rates in --baselines to size for (default resnet50)",
    )
    s.add_argument(
        "--train-json",
        metavar="FILE",
        help="a `scalerepro bench-train` JSON: also size for its measured images/s per rank (ours)",
    )
    s.set_defaults(fn=cmd_bench_loader)

    s = sub.add_parser(
        "cost-model",
        help="fit alpha/beta/gamma per algorithm from bench JSONs; project to large scales",
        description="Least squares on relative error; prints residuals; projects one all-reduce of "
        "ResNet-50's gradients onto a fat tree and a 2-D torus.",
    )
    _add_config_flags(s)
    s.add_argument("--bench", nargs="+", required=True, metavar="GLOB", help="bench JSON files (globs allowed)")
    s.add_argument("--algos", help="comma-separated algorithms to fit (default: all in the files)")
    s.add_argument("--out", required=True, metavar="FILE", help="JSON with fits, residuals and projection")
    _setting(s, "--ranks", "simulate.ranks", "rank counts to project to, each on the platforms that hold it", True)
    s.add_argument(
        "--bytes",
        type=_positive_float,
        default=RESNET50_GRADIENT_BYTES,
        help="bytes per all-reduce (default: ResNet-50, 102 MB)",
    )
    _setting(s, "--colors", "comm.colors", "multicolor colors in the projection, at least 1", type=_count(1))
    _setting(s, "--platform", "simulate.platforms", "platform names of --platforms to project onto, or all", True)
    s.add_argument(
        "--platforms",
        default="config/platforms.yaml",
        metavar="FILE",
        help="platform descriptions, the simulator's (default config/platforms.yaml)",
    )
    s.set_defaults(fn=cmd_cost_model)

    s = sub.add_parser(
        "simulate",
        help="the algorithms' schedules in SimGrid on described platforms, any rank count",
        description="Runs every rank's schedule (the same one the executors run) in SimGrid on a "
        "platform of config/platforms.yaml (or this machine, fitted from --bench), one "
        "process per point. Needs SimGrid's Python module: "
        "sudo apt-get install python3-simgrid.",
    )
    _add_config_flags(s)
    _platform_args(s, "tpu-v3-pod")
    s.add_argument("--algos", default="ring,torus2d", help="comma-separated algorithms (default ring,torus2d)")
    s.add_argument("--ranks", default="16,64", help="comma-separated rank counts (default 16,64)")
    s.add_argument(
        "--bytes",
        default=str(RESNET50_GRADIENT_BYTES),
        help="comma-separated bytes per all-reduce, float32 (default: ResNet-50's gradients, 102 MB)",
    )
    s.add_argument("--out", required=True, metavar="DIR", help="folder for simulation.csv and simulation.json")
    s.set_defaults(fn=cmd_simulate)

    s = sub.add_parser(
        "simulate-validate",
        help="the simulator against this machine's bench, or against others' published all-reduce times",
        description="With --bench: fits one latency and bandwidth for this machine from the bench JSONs "
        "(per regime: a core per rank, or oversubscribed), simulates every measured "
        "(algorithm, ranks, size) with the schedule it ran, and writes validation.csv, "
        "validation_summary.csv and validation.json. With --published: simulates the all-reduce "
        "times others measured on the clusters of --platforms (its measurements:), each as "
        "described and at its network corners, and writes published.csv, published_summary.csv "
        "and published.json.",
    )
    _add_config_flags(s)
    s.add_argument("--bench", nargs="+", metavar="GLOB", help="bench JSON files (globs allowed)")
    s.add_argument("--published", action="store_true", help="check against the measurements: of --platforms instead")
    s.add_argument(
        "--platforms",
        default="config/platforms.yaml",
        metavar="FILE",
        help="platforms and published measurements, for --published (default config/platforms.yaml)",
    )
    _bucket_mib_arg(s, "gradient bucket size whose sizes the --published bar holds at")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for the validation tables")
    _jobs_arg(s)
    s.set_defaults(fn=cmd_simulate_validate)

    s = sub.add_parser(
        "simulate-scale",
        help="ResNet-50's gradient buckets at the papers' scale, against the papers",
        description="Simulates ResNet-50's gradient buckets (as training cuts them) for every "
        "algorithm and rank count on each platform, projects images/s, scaling "
        "efficiency and 90-epoch time from each platform's per-accelerator rate (`--platform all`: "
        "every platform with one), and sets the published claims of config/platforms.yaml against "
        "them. Writes "
        "scale_points.csv, scale.csv, papers.csv and scale.json.",
    )
    _add_config_flags(s)
    _platform_args(s, None)
    _setting(s, "--algos", "simulate.algorithms", "algorithms", listed=True)
    _setting(s, "--ranks", "simulate.ranks", "rank counts; those a platform cannot hold are left out", listed=True)
    _setting(
        s,
        "--dtypes",
        "simulate.dtypes",
        "gradient types of the --ranks grid, float32 and/or bfloat16 (a claim's own type is always simulated for it)",
        listed=True,
    )
    _bucket_mib_arg(s, "gradient bucket size as training cuts it")
    _setting(
        s,
        "--claims-max-ranks",
        "simulate.claims_max_ranks",
        "also simulate the points the published claims of --platforms need, up to this many ranks (at 1,024 the "
        "1-D ring takes minutes)",
        type=_count(1),
    )
    _setting(
        s,
        "--batch",
        "simulate.batch_per_rank",
        "images per rank per step (Goyal et al. and Ying et al.: 32, so 32,768 on 1,024 chips)",
        type=_count(1),
    )
    _setting(
        s,
        "--corners",
        "simulate.corners",
        "simulate the grid of --ranks at the network corners too, so its bands span the network's ranges "
        "(three times the simulations; without, the grid's bands span the rate and overlap only; the claims' "
        "points are always simulated at the corners)",
        action=argparse.BooleanOptionalAction,
    )
    _setting(
        s,
        "--sensitivity",
        "simulate.sensitivity",
        "also simulate the claims with each ranged network number alone at either end of its range, for "
        "the sensitivity table (two more simulations per number; the compute rate and overlap need none)",
        action=argparse.BooleanOptionalAction,
    )
    s.add_argument("--out", required=True, metavar="DIR", help="folder for the tables")
    s.set_defaults(fn=cmd_simulate_scale)

    s = sub.add_parser("collect", help="logs -> tidy tables (runs, evals, steps, bench)")
    s.add_argument("--runs", nargs="*", default=[], metavar="GLOB", help="run.json files (globs allowed)")
    s.add_argument("--bench", nargs="*", default=[], metavar="GLOB", help="bench JSON files (globs allowed)")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for the CSV tables")
    s.set_defaults(fn=cmd_collect)

    s = sub.add_parser(
        "mlperf-log",
        help="run event logs -> MLPerf training logs (<run id>.txt, :::MLLOG lines)",
        description="Writes one MLPerf log per run (open division, benchmark resnet) that "
        "`python -m mlperf_logging.compliance_checker --usage training --ruleset 4.0.0` "
        "checks.",
    )
    s.add_argument(
        "--runs", nargs="+", required=True, metavar="GLOB", help="run folders or run.json files (globs allowed)"
    )
    s.add_argument(
        "--out", required=True, metavar="DIR", help="folder for one <run id>.txt per run, e.g. ring-n2-g1-s0-r0.txt"
    )
    s.add_argument("--org", default="scalerepro", help="submission_org (default scalerepro)")
    s.add_argument(
        "--status",
        default="research",
        choices=["cloud", "onprem", "preview", "research"],
        help="submission_status (default research)",
    )
    s.set_defaults(fn=cmd_mlperf_log)

    s = sub.add_parser("analyze", help="time-to-accuracy, throughput, scaling efficiency, baselines -> metrics.json")
    s.add_argument("--tables", required=True, metavar="DIR", help="folder written by `collect`")
    s.add_argument("--baselines", required=True, metavar="FILE", help="published results (config/baselines.yaml)")
    s.add_argument("--metrics", required=True, metavar="FILE", help="metrics JSON to write (DVC metrics)")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for analysis CSVs (DVC plots)")
    s.add_argument(
        "--costmodel",
        metavar="FILE",
        help="cost-model JSON (`scalerepro cost-model`): its projections to "
        "the papers' scales join comparison.csv as 'projected' rows",
    )
    s.add_argument(
        "--simulation",
        metavar="DIR",
        help="folder of `scalerepro simulate-validate` and `simulate-scale`: "
        "simulated rows join comparison.csv; simulated.csv, papers.csv and validation.csv are written",
    )
    s.set_defaults(fn=cmd_analyze)

    s = sub.add_parser("plot", help="seaborn figures from the analysis tables")
    s.add_argument("--analysis", required=True, metavar="DIR", help="folder written by `analyze`")
    s.add_argument("--out", required=True, metavar="DIR", help="folder for PNG figures")
    s.set_defaults(fn=cmd_plot)

    s = sub.add_parser(
        "reproduce",
        help="one reproduction card per paper: claims, their sources, measured and on what, simulated, verdict",
        description="Each claim names its source fact (config/sources.yaml) or is unverified, and has a scope: "
        "paper-scale, network (a verdict needs two or more hosts at one rank per core), numerics (any run), "
        "recipe (a real dataset). Verdicts: reproduced; not reproduced; undetermined (the interval holds no "
        "difference); indicative only (measured outside the scope); not measurable here (what it would take); "
        "not in this run (the sweep lacks the runs); unverified claim. Measures: busbw_ratio (paired per round "
        "at sizes from 1 MiB: median and 10-90th percentile), accuracy_agreement (final top-1 against ring's "
        "within the resolution: seed range or two standard errors at the eval size), recipe_delta (top-1 of one "
        "recipe minus another's), scaling_efficiency (never judged on CPU ranks), not_measurable.",
    )
    s.add_argument("--analysis", required=True, metavar="DIR", help="folder written by `analyze`")
    s.add_argument(
        "--claims",
        default="config/reproduction.yaml",
        metavar="FILE",
        help="the papers' claims and how each is measured (default config/reproduction.yaml)",
    )
    s.add_argument("--out", required=True, metavar="FILE", help="the cards as Markdown, e.g. results/reproduction.md")
    s.add_argument("--csv", required=True, metavar="FILE", help="the same rows as CSV (the HTML report's table)")
    s.add_argument(
        "--json",
        required=True,
        metavar="FILE",
        help="per claim id: value, interval or resolution, reproduced (1/0) and verdict, for DVC",
    )
    s.set_defaults(fn=cmd_reproduce)
    return p


def main(argv: list[str] | None = None) -> int:
    """Entry point: run the command; bad input exits 2 with one clear message and no traceback."""
    args = parser().parse_args(argv)
    try:
        tune_mpi_progress()  # before any command imports mpi4py.MPI (MPI reads its settings once, when it starts)
        choose_netmod()  # under srun --mpi=pmi2: OFI, whose addresses SLURM's PMI-2 server passes intact
        code = args.fn(args)
    except UserError as exc:
        print(f"scalerepro {args.command}: error: {exc}", file=sys.stderr, flush=True)
        _abort_world(2)
        return 2
    except BaseException:
        import traceback

        traceback.print_exc()
        sys.stderr.flush()
        _abort_world(1)
        raise
    return code or 0


def _abort_world(code: int) -> None:
    """Under MPI with several ranks, end them all so no rank waits forever in a collective, after the message
    this rank printed has reached the launcher (:func:`scalerepro.mpi.abort_job`)."""
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None and mpi.Is_initialized() and not mpi.Is_finalized() and mpi.COMM_WORLD.size > 1:
        from scalerepro.mpi import abort_job  # MPI is running already: importing it starts nothing

        abort_job(code)


if __name__ == "__main__":
    sys.exit(main())
