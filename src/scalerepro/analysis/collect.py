"""Logs -> tidy tables: one row per run, per epoch, per eval, per step, per benchmark point.

Reads only machine-readable files: each run's ``run.json`` and the
``events.jsonl`` beside it, and the bench JSON files.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Mapping, Sequence
from itertools import pairwise
from pathlib import Path
from typing import Any

import pandas as pd

from scalerepro.comm import benchfile
from scalerepro.config import run_id
from scalerepro.errors import UserError
from scalerepro.io import read_json
from scalerepro.train.runfolder import finished_run

TABLES = ("runs", "epochs", "evals", "steps", "bench")


def grid_point(record: dict[str, Any]) -> dict[str, Any]:
    """A run's place in the experiment grid: variant, algorithm, ranks, BN group, seed, repetition, its setting."""
    train = record["config"]["train"]
    bn, seed, rep = train.get("bn_group", 1), train.get("seed", 0), record.get("repetition", 0)
    algo, world, variant = record["algorithm"], record["world_size"], train.get("variant", "base")
    setting = f"{algo}-g{bn}" if variant == "base" else f"{variant}-{algo}-g{bn}"
    return {
        "run": run_id(variant, algo, world, bn, seed, rep),
        "setting": setting,
        "variant": variant,
        "algorithm": algo,
        "world_size": world,
        "bn_group": str(bn),
        "seed": seed,
        "repetition": rep,
    }


def training_clock(events: list[dict[str, Any]]) -> tuple[Callable[[dict[str, Any]], float], float]:
    """Seconds since run_start counting training only, and the downtime left out.

    A resumed run's log holds its segments in order; the time from the last event of a segment
    (run_preempted, run_interrupted, or whatever it wrote before it died) to the next segment's
    run_resume is waiting (the queue, a restart), not training, so time-to-accuracy leaves it out.
    """
    t0 = next(e["time_ms"] for e in events if e["key"] == "run_start")
    gaps = [(e["time_ms"], e["time_ms"] - prev["time_ms"]) for prev, e in pairwise(events) if e["key"] == "run_resume"]

    def elapsed(e: dict[str, Any]) -> float:
        waited = sum(gap for at, gap in gaps if at <= e["time_ms"])
        return float((e["time_ms"] - t0 - waited) / 1000.0)

    return elapsed, sum(gap for _, gap in gaps) / 1000.0


def run_tables(run_json: Path) -> dict[str, list[dict[str, Any]]]:
    """Rows of every table for one training run."""
    run = finished_run(Path(run_json).parent)
    if run is None:
        raise UserError(f"{run_json}: no events.jsonl beside it; the run has not finished (rerun its train job)")
    record, events = run
    keys = grid_point(record)
    elapsed, downtime = training_clock(events)
    first_epoch = next((e for e in events if e["key"] == "epoch_start"), None)
    train = record["config"]["train"]
    out: dict[str, list[dict[str, Any]]] = {name: [] for name in TABLES}
    out["runs"].append(
        keys
        | {
            "status": record["status"],
            "seconds": record["seconds"],
            "model": train["model"],
            "dataset": record["config"].get("dataset", {}).get("name"),
            "synthetic": bool(record["config"].get("dataset", {}).get("generate", False)),
            "global_batch": train["batch_per_rank"] * record["world_size"],
            "optimizer": train["optimizer"],
            "epochs": train["epochs"],
            "target_top1": train["target_top1"],
            "final_top1": (record["final"] or {}).get("top1"),
            "startup_s": elapsed(first_epoch) if first_epoch else None,
            "hosts": len(set(record["hosts"])),
            "nodes": len(record.get("nodes") or []) or None,  # SLURM nodes (two slurmd on one host are two)
            "stage_s": stage_seconds(Path(run_json).parent / "stage.json"),
            "downtime_s": downtime,
        }
    )
    for e in events:
        m = e["metadata"]
        if e["key"] == "epoch_stop":
            out["epochs"].append(
                keys
                | {
                    "epoch": m["epoch_num"],
                    "seconds": m["seconds"],
                    "images": m["images"],
                    "images_per_s": m["images_per_s"],
                    "elapsed_s": elapsed(e),
                }
            )
        elif e["key"] == "eval_accuracy":
            out["evals"].append(
                keys
                | {
                    "epoch": m["epoch_num"],
                    "top1": e["value"],
                    "top5": m["top5"],
                    "samples": m.get("samples"),
                    "elapsed_s": elapsed(e),
                }
            )
        elif e["key"] == "step":
            out["steps"].append(
                keys
                | {
                    "step": e["value"],
                    "epoch": m["epoch_num"],
                    "batch": m["batch"],
                    "loss": m["loss"],
                    "data_s": m["data_s"],
                    "fwd_bwd_s": m["fwd_bwd_s"],
                    "allreduce_s": m["allreduce_s"],
                    "optimizer_s": m["optimizer_s"],
                    "allreduce_wait_s": m.get("allreduce_wait_s"),
                }
            )
    return out


def stage_seconds(path: Path) -> float | None:
    """Staging time of a run (the slowest node, all splits), logged apart from training; None if not staged."""
    if not path.is_file():
        return None
    nodes = read_json(path).get("nodes", [])
    per_node = [sum(split.get("seconds", 0.0) for split in node.get("splits", [])) for node in nodes]
    return max(per_node) if per_node else None


def _cell(value: Any) -> Any:
    """A CSV cell: nested values (a schedule, comm parameters, a node map) as JSON."""
    return json.dumps(value, sort_keys=True) if isinstance(value, (dict, list, tuple)) else value


class _Table:
    """One CSV table written row by row under a temporary name, renamed into place when complete."""

    def __init__(self, path: Path) -> None:
        """Open ``path``'s temporary sibling; the header comes with the first row."""
        self.path, self.rows = path, 0
        self.tmp = path.with_name(f".{path.name}.partial")
        self.fh = self.tmp.open("w", newline="")  # stays open across write(); close() closes it
        self.writer: csv.DictWriter[str] | None = None

    def write(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Append ``rows``; the first call's keys (in order, across its rows) are the table's columns."""
        if not rows:
            return
        if self.writer is None:
            columns = list(dict.fromkeys(k for row in rows for k in row))
            self.writer = csv.DictWriter(self.fh, fieldnames=columns, restval="")
            self.writer.writeheader()
        writer = self.writer
        for row in rows:
            writer.writerow({k: _cell(v) for k, v in row.items()})
        self.rows += len(rows)

    def close(self, done: bool) -> None:
        """Rename into place when ``done``; else drop the partial file (the previous table stays)."""
        self.fh.close()
        if done:
            self.tmp.replace(self.path)
        else:
            self.tmp.unlink(missing_ok=True)


def collect(
    runs: list[Path], benches: list[Path], out: Path, progress: Callable[[int, int], None] | None = None
) -> dict[str, int]:
    """Write runs/epochs/evals/steps/bench CSVs to ``out``, one run in memory at a time; return the row counts.

    A sweep's step logs outgrow memory (millions of steps at 256 ranks); each run's events are read,
    turned into rows and written before the next run is read. ``progress(done, total)`` after each run.
    """
    out.mkdir(parents=True, exist_ok=True)
    tables = {name: _Table(out / f"{name}.csv") for name in TABLES}
    done = False
    try:
        for i, path in enumerate(runs, 1):
            for name, part in run_tables(path).items():
                tables[name].write(part)
            if progress:
                progress(i, len(runs))
        tables["bench"].write([r for path in benches for r in benchfile.flatten(benchfile.read(path))])  # small
        done = True
    finally:
        for table in tables.values():
            table.close(done)
    return {name: table.rows for name, table in tables.items()}


def read_csv(path: Path, writer: str) -> pd.DataFrame:
    """A CSV table (an empty file is an empty frame); a missing one names the command that writes it."""
    if not Path(path).is_file():
        raise UserError(f"{path} missing; run `scalerepro {writer}` first")
    try:
        return pd.read_csv(path)
    except pd.errors.EmptyDataError:
        return pd.DataFrame()


def read_tables(folder: Path) -> dict[str, pd.DataFrame]:
    """The tables written by :func:`collect`."""
    return {name: read_csv(Path(folder) / f"{name}.csv", "collect") for name in TABLES}
