"""Loader workers, and CPUs per rank, that one accelerator needs to be fed at a given training rate.

The per-worker rate is what one loader worker process builds (images/s), as
``scalerepro bench-loader`` measures it on the cluster's CPUs. The training
rates are the published ones per accelerator (config/baselines.yaml) and our
loop's measured rate per rank (a ``scalerepro bench-train`` JSON). Workers
needed = ceil(rate per accelerator / rate per worker); CPUs per task = the
workers + 1 for the rank itself.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from scalerepro.baselines import published_per_accelerator
from scalerepro.errors import UserError
from scalerepro.io import read_json


def workers_needed(images_per_s: float, per_worker: float) -> int:
    """Loader workers that build ``images_per_s`` at ``per_worker`` images/s each."""
    if per_worker <= 0:
        raise UserError(f"loader rate {per_worker} images/s per worker: it must be positive")
    return math.ceil(round(images_per_s / per_worker, 9))  # round: 2.1 / 0.3 is 7.000000000000001


def need(rate: dict[str, Any], per_worker: float) -> dict[str, Any]:
    """A rate per accelerator with the loader workers it needs and the CPUs per task (the workers + the rank)."""
    workers = workers_needed(rate["images_per_s_per_accelerator"], per_worker)
    return {**rate, "workers": workers, "cpus_per_task": workers + 1}


def published(path: Path, model: str) -> list[dict[str, Any]]:
    """The published per-accelerator rates of ``model`` in the baselines file, each with its source."""
    return [
        {"source": f"{b['work']} ({b['hardware']})", "images_per_s_per_accelerator": b["images_per_s_per_accelerator"]}
        for b in published_per_accelerator(path, model)
    ]


def most_demanding(path: Path, model: str, per_worker: float) -> dict[str, Any] | None:
    """The published rate of ``model`` that needs the most workers, sized (None when the file gives none)."""
    rates = published(path, model)
    return need(max(rates, key=lambda r: r["images_per_s_per_accelerator"]), per_worker) if rates else None


def bench_train(path: Path) -> dict[str, Any]:
    """A ``scalerepro bench-train`` JSON, with an error naming the file and what it lacks."""
    record = read_json(path)
    summary = record.get("summary") if isinstance(record, dict) else None
    wanted = ("ours_images_per_s", "world_size", "algorithm")
    missing = [k for k in wanted if not isinstance(summary, dict) or k not in summary]
    if missing:
        raise UserError(
            f"{path} is not a bench-train result: it has no summary.{', summary.'.join(missing)}; "
            "give the --out file of `scalerepro bench-train`"
        )
    return record


def measured_rate(path: Path) -> dict[str, Any]:
    """Our loop's measured images/s per rank from a bench-train JSON, with its source."""
    record = bench_train(path)
    s, train = record["summary"], record.get("config", {}).get("train", {})
    model = f"{train['model']} {train['image_size']} px, " if {"model", "image_size"} <= set(train) else ""
    return {
        "source": f"bench-train ours ({model}{s['algorithm']}, {s['world_size']} ranks; {path})",
        "images_per_s_per_accelerator": float(s["ours_images_per_s"]) / int(s["world_size"]),
    }


def rates(model: str, baselines: Path, train_json: Path | None) -> list[dict[str, Any]]:
    """The published rates of ``model`` and, given a bench-train JSON, our measured rate per rank."""
    return published(baselines, model) + ([measured_rate(train_json)] if train_json else [])


def slowest_worker(summary: list[dict[str, Any]], loader: str = "shards") -> dict[str, Any]:
    """The lowest per-worker rate of ``loader`` over bench-loader's measured worker counts, and that count."""
    rows = [r for r in summary if r["loader"] == loader]
    if not rows:
        raise UserError(f"no {loader!r} loader rows in the bench-loader summary")
    low = min(rows, key=lambda r: r["images_per_s_per_worker"])
    return {"loader": loader, "workers": low["workers"], "images_per_s_per_worker": low["images_per_s_per_worker"]}


def needed_workers(
    per_worker: dict[str, Any], size: int, model: str, baselines: Path, wanted: list[dict[str, Any]]
) -> dict[str, Any]:
    """The rates in ``wanted`` sized at ``per_worker``'s images/s per worker (``size``-px crops), for JSON and table."""
    rate = float(per_worker["images_per_s_per_worker"])
    rows = [need(r, rate) for r in wanted]
    return {"model": model, "size": size, "baselines": str(baselines), "per_worker": per_worker, "rows": rows}


def format_table(t: dict[str, Any]) -> str:
    """The table for people."""
    w, n = t["per_worker"], t["per_worker"]["workers"]
    head = (
        f"# loader workers per accelerator to feed {t['model']}: one builds {w['images_per_s_per_worker']:.1f} "
        f"images/s of {t['size']}-px crops (the lowest per-worker rate measured, at {n} worker{'s' * (n != 1)}); "
        "CPUs per task = workers + 1 for the rank"
    )
    lines = [head, f"{'images/s per accel':>18} {'workers':>7} {'CPUs/task':>9}  source"]
    lines.extend(
        f"{r['images_per_s_per_accelerator']:>18.1f} {r['workers']:>7} {r['cpus_per_task']:>9}  {r['source']}"
        for r in t["rows"]
    )
    if not t["rows"]:
        lines.append(f"(no published images/s for {t['model']} in {t['baselines']})")
    return "\n".join(lines)
