"""``scalerepro bench-loader``: the shard loader against torchvision ImageFolder + DataLoader, same run.

Both read the same ImageNet-sized JPEGs (generated once: 400-500 px a side,
quality 90) and apply the same training transform: RandomResizedCrop(size,
scale, ratio) with bilinear antialiasing, a horizontal flip with
probability 1/2, conversion to float and ImageNet normalisation, in
batches built by the same number of worker processes. torchvision reads
each JPEG from its file; ours reads each record from the staged shards.
Loaders alternate within a repetition so drift on a shared machine hits
both; throughput counts the images after the first batch (worker start-up
excluded). The consumer touches every page of each batch (one float per 4
KiB), as a training step reads its input: a batch nobody reads is never
faulted into the consumer, which would hide a loader's batches from its
memory. Peak memory (RSS and PSS summed over the process tree) comes from
as many passes again per loader and worker count, after the timed ones (the
median of their peaks), each in a fresh process (so neither loader carries
the other's or an earlier pass's freed memory) whose workers are forked, as
a training rank's are: that process is spawned, and a spawned process
spawns its DataLoader workers too, each importing torch on its own (about
300 MiB more per worker, for both loaders). The page walk behind PSS took CPU from the workers and cut the
2-worker throughput by about a fifth, so timed passes sample only RSS
(cheap). Neither loader's data is in its PSS: torchvision's JPEG files and
our staged shards (read, not mapped) are the node's copy, in the page cache
or tmpfs, counted once per node whatever the worker count; the ``data MiB``
column gives its size for each.
"""

from __future__ import annotations

import multiprocessing
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
from scalerepro.data.loader import ShardDataset, batches, epoch_indices
from scalerepro.data.pack import shard_split
from scalerepro.data.stage import stage_split
from scalerepro.data.synth import SynthSpec, generate
from scalerepro.data.tensors import MEAN, STD
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


def staged_shards(dataset: Path, work: Path, stage_root: str, seed: int, row_index: bool = True) -> Path:
    """Shard the benchmark's train split (8 shards; row-indexed where jpegtran is installed, unless ``row_index``
    is off) and stage it (the two kinds into separate folders of ``stage_root``)."""
    kind = "rows" if row_index and jpegtran() else "whole"
    shards = work / f"{dataset.name}-shards{'-rows' if kind == 'rows' else ''}" / "train"
    if not (shards / "manifest.json").is_file():
        shard_split(dataset, "train", shards, 8, seed, row_index=kind == "rows")
    return Path(stage_split(shards, str(Path(stage_root) / kind))["dest"])


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


def data_mib(loader: str, dataset: Path, staged: Path) -> float:
    """Size of the files ``loader`` reads its images from (MiB): the staged shards, or the train JPEGs."""
    files = staged.glob("*.srs") if loader == "shards" else (dataset / "train").rglob("*.JPEG")
    return sum(f.stat().st_size for f in files) / 2**20


def touch(images: torch.Tensor) -> float:
    """Read one float per 4 KiB page of a batch, as a consumer would (faults its pages into this process)."""
    return float(images.reshape(-1)[:: 4096 // images.element_size()].sum())


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
    memory = PeakMemory(pss_every=1 if pss else 0)
    t0 = time.perf_counter()
    first_at, images = None, 0
    for item in make():
        touch(item[0])
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


def make_loader(loader: str, spec: LoaderBenchSpec, dataset: Path, staged: Path, workers: int, epoch: int) -> Any:
    """A fresh pass of ``loader`` (one of LOADERS)."""
    if loader == "shards":
        return shard_loader(staged, spec, workers, epoch)
    return torchvision_loader(dataset, spec, workers, epoch)


def _memory_child(
    conn: Any, loader: str, spec: LoaderBenchSpec, dataset: Path, staged: Path, workers: int, epoch: int
) -> None:
    """In a fresh process, forking its workers as a training rank does: one pass of ``loader`` with PSS sampled;
    the result goes back through ``conn``."""
    multiprocessing.set_start_method("fork", force=True)  # a spawned process inherits "spawn" as its default
    result = measure(partial(make_loader, loader, spec, dataset, staged, workers, epoch), True)
    conn.send({**result, "start_method": multiprocessing.get_start_method()})
    conn.close()


def memory_pass(
    loader: str, spec: LoaderBenchSpec, dataset: Path, staged: Path, workers: int, epoch: int
) -> dict[str, Any]:
    """One pass of ``loader`` in a fresh (spawned) process, PSS sampled; its throughput, start-up, peaks and how
    its workers started."""
    ctx = multiprocessing.get_context("spawn")
    receive, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_memory_child, args=(send, loader, spec, dataset, staged, workers, epoch))
    child.start()
    send.close()
    try:
        result: dict[str, Any] = receive.recv()
    except EOFError:
        child.join()
        raise RuntimeError(f"the {loader} memory pass died (exit code {child.exitcode})") from None
    child.join()
    return result


def run(
    spec: LoaderBenchSpec, dataset: Path, staged: Path, progress: Callable[[str], None] | None = None
) -> list[dict[str, Any]]:
    """Per worker count: every (repetition, loader) timed pass, then as many memory passes, each in a fresh
    process; loaders alternate first within a repetition."""
    rows: list[dict[str, Any]] = []
    for workers in spec.workers:
        for kind in ("timed", "memory"):
            for rep in range(spec.reps):
                order = LOADERS if rep % 2 == 0 else LOADERS[::-1]
                rows.extend(one_pass(kind, loader, spec, dataset, staged, workers, rep, progress) for loader in order)
    return rows


def one_pass(
    kind: str,
    loader: str,
    spec: LoaderBenchSpec,
    dataset: Path,
    staged: Path,
    workers: int,
    rep: int,
    progress: Callable[[str], None] | None,
) -> dict[str, Any]:
    """One timed pass (here) or memory pass (in a fresh process) of ``loader``, as a row; progress reported."""
    row: dict[str, Any] = {"loader": loader, "workers": workers, "rep": rep, "pass": kind}
    if kind == "timed":
        row.update(measure(partial(make_loader, loader, spec, dataset, staged, workers, rep)))
        what = f"{row['images_per_s']:.1f} images/s"
    else:
        row.update(
            data_mib=data_mib(loader, dataset, staged), **memory_pass(loader, spec, dataset, staged, workers, rep)
        )
        what = f"peak PSS {row['peak_pss_mib']:.0f} MiB"
    if progress:
        progress(f"workers={workers} {kind} pass {rep + 1}/{spec.reps} {loader}: {what}")
    return row


def per_loader(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Medians per (workers, loader) of the timed passes and of the memory passes' peaks, ours over torchvision."""
    out = []
    for workers in sorted({r["workers"] for r in rows}):
        med = {}
        for loader in LOADERS:
            mine = [r for r in rows if r["workers"] == workers and r["loader"] == loader]
            timed = [r for r in mine if r["pass"] == "timed"]
            memory = [r for r in mine if r["pass"] == "memory"]
            med[loader] = {
                **{k: statistics.median(r[k] for r in timed) for k in ("images_per_s", "startup_s")},
                **{k: statistics.median(r[k] for r in memory) for k in ("peak_rss_mib", "peak_pss_mib", "data_mib")},
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
                    "pss_ratio_vs_torchvision": m["peak_pss_mib"] / med["torchvision"]["peak_pss_mib"],
                }
            )
    return out


def format_loaders(summary: list[dict[str, Any]]) -> str:
    """The table for people."""
    lines = [
        (
            f"{'workers':>7} {'loader':>12} {'images/s':>9} {'per worker':>10} {'vs tv':>6} "
            f"{'startup s':>9} {'peak RSS MiB':>12} {'peak PSS MiB':>12} {'vs tv':>6} {'data MiB':>8}"
        )
    ]
    lines.extend(
        f"{r['workers']:>7} {r['loader']:>12} {r['images_per_s']:>9.1f} {r['images_per_s_per_worker']:>10.1f} "
        f"{r['ratio_vs_torchvision']:>5.2f}x {r['startup_s']:>9.2f} {r['peak_rss_mib']:>12.0f} "
        f"{r['peak_pss_mib']:>12.0f} {r['pss_ratio_vs_torchvision']:>5.2f}x {r['data_mib']:>8.0f}"
        for r in summary
    )
    return "\n".join(lines)
