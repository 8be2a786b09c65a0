"""``scalerepro bench-loader``: the shard loader against torchvision ImageFolder + DataLoader, same run.

Both read the same ImageNet-sized JPEGs (generated once: 400-500 px a side,
quality 90) and apply the same training transform: RandomResizedCrop(size,
scale, ratio) with bilinear antialiasing, a horizontal flip with
probability 1/2, conversion to float and ImageNet normalisation, in
batches built by the same number of worker processes. torchvision reads
each JPEG from its file; ours reads the staged shards, memory-mapped.
Loaders alternate within a repetition so drift on a shared machine hits
both; throughput counts the images after the first batch (worker start-up
excluded). Peak memory (RSS and PSS summed over the process tree) comes
from one more pass per loader and worker count, after the timed ones: the
page walk behind PSS took CPU from the workers and cut the 2-worker
throughput by about a fifth, so timed passes sample only RSS (cheap).
"""

from __future__ import annotations

import statistics
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import psutil
import torch

from scalerepro.data.augment import TrainPipeline
from scalerepro.data.jpegrows import jpegtran
from scalerepro.data.loader import MEAN, STD, ShardDataset, batches, epoch_indices
from scalerepro.data.pack import shard_split
from scalerepro.data.stage import stage_split
from scalerepro.data.synth import SynthSpec, generate
from scalerepro.mpi import Layout

LOADERS = ("shards", "torchvision")


@dataclass(frozen=True)
class LoaderBenchSpec:
    """What to measure: images, crop size, batch, worker counts, repetitions, crop scale."""

    images: int = 2000
    size: int = 224
    batch: int = 64
    workers: tuple[int, ...] = (1, 2)
    reps: int = 3
    scale: tuple[float, float] = (0.08, 1.0)
    seed: int = 0


def bench_dataset(work: Path, images: int, seed: int) -> Path:
    """The benchmark's JPEG folder (10 classes, 400-500 px, quality 90), generated unless already there."""
    spec = SynthSpec(
        name=f"loaderbench-{images}",
        seed=seed,
        classes=10,
        train_per_class=max(1, images // 10),
        val_per_class=1,
        min_size=400,
        max_size=500,
        quirks_per_kind=0,
        quality=90,
    )
    folder = work / spec.name
    if not (folder / "dataset.json").is_file():
        generate(spec, work)
    return folder


def staged_shards(dataset: Path, work: Path, stage_root: str, seed: int) -> Path:
    """Shard the benchmark's train split (8 shards; row-indexed where jpegtran is installed) and stage it."""
    shards = work / f"{dataset.name}-shards{'-rows' if jpegtran() else ''}" / "train"
    if not (shards / "manifest.json").is_file():
        shard_split(dataset, "train", shards, 8, seed)
    return Path(stage_split(shards, stage_root)["dest"])


class PeakMemory:
    """Samples the summed RSS (cheap, every ``interval_s``) and PSS (a page walk, every ``pss_every``-th
    sample; never if 0) of this process and its children (the workers) in a thread; keeps the peaks."""

    def __init__(self, interval_s: float = 0.05, pss_every: int = 10) -> None:
        """Start sampling."""
        self.interval_s, self.pss_every, self.rss, self.pss = interval_s, pss_every, 0, 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _sample(self, with_pss: bool) -> None:
        """One sample of the tree's summed RSS (and PSS)."""
        me = psutil.Process()
        rss = pss = 0
        for proc in [me, *me.children(recursive=True)]:
            try:
                rss += proc.memory_info().rss
                if with_pss:
                    pss += getattr(proc.memory_full_info(), "pss", 0)
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                continue
        self.rss, self.pss = max(self.rss, rss), max(self.pss, pss)

    def _run(self) -> None:
        """Sample until stopped."""
        n = 0
        while not self._stop.is_set():
            self._sample(self.pss_every > 0 and n % self.pss_every == 0)
            n += 1
            self._stop.wait(self.interval_s)

    def stop(self) -> dict[str, float]:
        """Stop; peaks in MiB."""
        self._stop.set()
        self._thread.join()
        return {"peak_rss_mib": self.rss / 2**20, "peak_pss_mib": self.pss / 2**20}


def torchvision_loader(dataset: Path, spec: LoaderBenchSpec, workers: int, epoch: int) -> Iterable[Any]:
    """The reference: ImageFolder + the standard ImageNet training transform + DataLoader."""
    from torchvision import datasets, transforms

    transform = transforms.Compose(
        [
            transforms.RandomResizedCrop(spec.size, scale=spec.scale),
            transforms.RandomHorizontalFlip(),
            transforms.ToTensor(),
            transforms.Normalize(MEAN, STD),
        ]
    )
    folder = datasets.ImageFolder(str(dataset / "train"), transform=transform)
    extra: dict[str, Any] = {"prefetch_factor": 2} if workers else {}
    return torch.utils.data.DataLoader(
        folder,
        batch_size=spec.batch,
        shuffle=True,
        num_workers=workers,
        generator=torch.Generator().manual_seed(spec.seed + epoch),
        **extra,
    )


def shard_loader(staged: Path, spec: LoaderBenchSpec, workers: int, epoch: int) -> Iterable[Any]:
    """Ours: staged shards, per-epoch shuffle, fused decode-and-crop, whole batches built in workers."""
    data = ShardDataset(staged)
    ids = epoch_indices(data.counts, Layout(), spec.seed, epoch)
    return batches(
        data,
        ids,
        spec.batch,
        TrainPipeline(spec.size, spec.scale),
        spec.size,
        seed=spec.seed,
        epoch=epoch,
        workers=workers,
        drop_last=False,
    )


def measure(make: Callable[[], Iterable[Any]], pss: bool = False) -> dict[str, float]:
    """One pass over a loader: images/s after the first batch, start-up time and peak memory (PSS too if ``pss``)."""
    memory = PeakMemory(pss_every=10 if pss else 0)
    t0 = time.perf_counter()
    first_at, images = None, 0
    for item in make():
        n = len(item[1])
        if first_at is None:
            first_at = time.perf_counter()
        else:
            images += n
    end = time.perf_counter()
    peaks = memory.stop()
    steady = end - (first_at or end)
    return {
        "images_per_s": images / steady if steady > 0 else 0.0,
        "startup_s": (first_at or end) - t0,
        "seconds": end - t0,
        **peaks,
    }


def run(
    spec: LoaderBenchSpec, dataset: Path, staged: Path, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Every (workers, repetition, loader) timed pass, loaders alternating first within a repetition, then
    one memory pass per (workers, loader)."""
    makers = {
        "shards": lambda w, e: shard_loader(staged, spec, w, e),
        "torchvision": lambda w, e: torchvision_loader(dataset, spec, w, e),
    }
    rows = []
    for workers in spec.workers:
        for rep in range(spec.reps):
            order = LOADERS if rep % 2 == 0 else LOADERS[::-1]
            for loader in order:
                result = measure(partial(makers[loader], workers, rep))
                rows.append({"loader": loader, "workers": workers, "rep": rep, "pass": "timed", **result})
                if progress:
                    progress(
                        f"workers={workers} rep={rep + 1}/{spec.reps} {loader}: {result['images_per_s']:.1f} images/s"
                    )
        for loader in LOADERS:
            result = measure(partial(makers[loader], workers, spec.reps), pss=True)
            rows.append({"loader": loader, "workers": workers, "rep": spec.reps, "pass": "memory", **result})
            if progress:
                progress(f"workers={workers} memory pass {loader}: peak PSS {result['peak_pss_mib']:.0f} MiB")
    return rows


def summarise(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (workers, loader) of the timed passes, peaks of the memory pass, ours over torchvision."""
    out = []
    for workers in sorted({r["workers"] for r in rows}):
        med = {}
        for loader in LOADERS:
            mine = [r for r in rows if r["workers"] == workers and r["loader"] == loader]
            timed = [r for r in mine if r["pass"] == "timed"]
            memory = [r for r in mine if r["pass"] == "memory"]
            med[loader] = {
                **{k: statistics.median(r[k] for r in timed) for k in ("images_per_s", "startup_s")},
                **{k: statistics.median(r[k] for r in memory) for k in ("peak_rss_mib", "peak_pss_mib")},
            }
        for loader in LOADERS:
            m = med[loader]
            out.append(
                {
                    "workers": workers,
                    "loader": loader,
                    **m,
                    "images_per_s_per_worker": m["images_per_s"] / max(1, workers),
                    "ratio_vs_torchvision": m["images_per_s"] / med["torchvision"]["images_per_s"],
                }
            )
    return out


def format_summary(summary: list[dict[str, Any]]) -> str:
    """The table for people."""
    lines = [
        (
            f"{'workers':>7} {'loader':>12} {'images/s':>9} {'per worker':>10} {'vs tv':>6} "
            f"{'startup s':>9} {'peak RSS MiB':>12} {'peak PSS MiB':>12}"
        )
    ]
    lines.extend(
        f"{r['workers']:>7} {r['loader']:>12} {r['images_per_s']:>9.1f} {r['images_per_s_per_worker']:>10.1f} "
        f"{r['ratio_vs_torchvision']:>5.2f}x {r['startup_s']:>9.2f} {r['peak_rss_mib']:>12.0f} "
        f"{r['peak_pss_mib']:>12.0f}"
        for r in summary
    )
    return "\n".join(lines)
