"""Reading staged shards into normalised batches: per-node shards, per-epoch shuffle, batches built in workers.

Shards are spread over nodes (shard k lives on node k mod nodes, see
:func:`node_shards`), and each rank reads only its node's shards,
memory-mapped. Every epoch draws one permutation of all samples from
(seed, epoch); a node keeps the entries that live in its shards and its
ranks take every local_size-th of them, cut to the count every rank in the
job can reach, so ranks see disjoint samples and all take the same number
of steps. Evaluation gives every sample to exactly one rank, with no padding.

A worker process builds a whole batch: it decodes each JPEG (at a reduced
DCT scale where the crop allows) and resizes the crop in uint8
(:mod:`scalerepro.data.augment`), flips, and normalises each image
straight into its slot of one float32 batch tensor while the image is
still in cache (a whole-batch pass measured 3.5x slower); in a worker that
tensor lives in shared memory, so nothing is collated or copied again on
its way to the trainer.
"""

from __future__ import annotations

import ctypes
import math
import signal
import sys
from pathlib import Path
from typing import Any, Callable, NamedTuple

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, get_worker_info

from scalerepro.data.shards import ShardReader, open_shards, read_manifest
from scalerepro.errors import UserError
from scalerepro.mpi import Layout

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)

Pipeline = Callable[[memoryview, np.random.Generator], torch.Tensor]


class Batch(NamedTuple):
    """Normalised images (N, 3, H, W float32), labels and the global sample ids they came from."""

    images: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor


def node_shards(shards: int, node: int, nodes: int) -> list[int]:
    """Shard numbers a node holds: k with k mod nodes == node."""
    if shards < nodes:
        raise UserError(f"{shards} shards cannot be spread over {nodes} nodes; "
                        "set shard.train_shards and shard.val_shards to at least the node count")
    return list(range(node, shards, nodes))


class ShardDataset:
    """The records of one split that live on this node, addressed by global sample id."""

    def __init__(self, folder: Path, node: int = 0, nodes: int = 1) -> None:
        """Read the manifest and index this node's shards (mapped lazily, once per process)."""
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        entries = self.manifest["shards"]
        self.counts = np.array([e["samples"] for e in entries], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.shards = node_shards(len(entries), node, nodes)
        self._entries = [entries[k] for k in self.shards]
        self._readers: dict[int, ShardReader] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the memory maps (a worker started by spawn/forkserver maps its own)."""
        return {**self.__dict__, "_readers": None}

    @property
    def readers(self) -> dict[int, ShardReader]:
        """Shard number -> reader, opened on first use so each worker process maps its own."""
        if self._readers is None:
            missing = [e["file"] for e in self._entries if not (self.folder / e["file"]).is_file()]
            if missing:
                raise UserError(f"{self.folder} lacks staged shard(s) {', '.join(missing[:3])}; "
                                "run `scalerepro stage` inside this allocation first")
            self._readers = dict(zip(self.shards, open_shards(self.folder, self._entries)))
        return self._readers

    @property
    def total(self) -> int:
        """Samples in the whole split (all nodes)."""
        return int(self.starts[-1])

    def local_ids(self) -> np.ndarray:
        """Global ids of the samples on this node, ascending."""
        return np.concatenate([np.arange(self.starts[k], self.starts[k + 1]) for k in self.shards])

    def record(self, sample: int) -> tuple[memoryview, int]:
        """JPEG bytes and label of global sample id ``sample`` (must live on this node)."""
        k = int(np.searchsorted(self.starts, sample, side="right") - 1)
        return self.readers[k].record(sample - int(self.starts[k]))

    def labels(self, ids: np.ndarray) -> np.ndarray:
        """Labels of the given global ids."""
        return np.array([self.record(int(i))[1] for i in ids], dtype=np.int64)


def epoch_indices(counts: np.ndarray, layout: Layout, seed: int, epoch: int) -> np.ndarray:
    """This rank's global sample ids for ``epoch``: its node's part of one permutation of all samples."""
    per_rank = samples_per_rank(counts, layout)
    starts = np.concatenate([[0], np.cumsum(counts)])
    order = np.random.default_rng([seed, epoch]).permutation(int(starts[-1]))
    node_of = (np.searchsorted(starts, order, side="right") - 1) % layout.nodes
    return order[node_of == layout.node][layout.local_rank::layout.local_size][:per_rank]


def samples_per_rank(counts: np.ndarray, layout: Layout) -> int:
    """Samples every rank takes per epoch: the least any node's ranks can share equally."""
    if len(counts) % layout.nodes:
        raise UserError(f"{len(counts)} training shards do not divide evenly over {layout.nodes} nodes, so some "
                        "samples would be left out of every epoch; set shard.train_shards to a multiple of the node count")
    per_node = [int(np.sum(counts[node_shards(len(counts), j, layout.nodes)])) for j in range(layout.nodes)]
    return min(n // r for n, r in zip(per_node, layout.ranks_per_node))


def eval_indices(ids: np.ndarray, layout: Layout) -> np.ndarray:
    """This rank's share of its node's samples: every sample exactly once over the ranks (uneven allowed)."""
    return ids[layout.local_rank::layout.local_size]


SCALE = torch.tensor([1 / (255.0 * s) for s in STD], dtype=torch.float32).view(3, 1, 1)
SHIFT = torch.tensor([-m / s for m, s in zip(MEAN, STD)], dtype=torch.float32).view(3, 1, 1)


def batch_tensor(shape: tuple[int, ...], dtype: torch.dtype) -> torch.Tensor:
    """An uninitialised tensor; in a loader worker, in shared memory (as default_collate does), so no copy follows."""
    if get_worker_info() is None:
        return torch.empty(shape, dtype=dtype)
    storage = torch.empty(0, dtype=dtype)._typed_storage()._new_shared(math.prod(shape))
    return torch.empty(0, dtype=dtype).new(storage).view(shape)


def normalise_into(dst: torch.Tensor, image: torch.Tensor) -> None:
    """uint8 (3, H, W) -> float32 ImageNet-normalised, written into ``dst`` while the image is still in cache."""
    dst.copy_(image)
    dst.mul_(SCALE).add_(SHIFT)


class BatchDataset(Dataset):
    """Item b is batch b, decoded and normalised by whichever worker draws it."""

    def __init__(self, data: ShardDataset, batches: list[np.ndarray], pipeline: Pipeline, size: int,
                 seed: int, epoch: int) -> None:
        """Batches of global ids, the per-image pipeline and the (seed, epoch) its randomness derives from."""
        self.data, self.batches, self.pipeline, self.size = data, batches, pipeline, size
        self.seed, self.epoch = seed, epoch

    def __len__(self) -> int:
        """Number of batches."""
        return len(self.batches)

    def __getitem__(self, b: int) -> Batch:
        """Decode, augment and normalise batch ``b``."""
        ids = self.batches[b]
        images = batch_tensor((len(ids), 3, self.size, self.size), torch.float32)
        labels = np.empty(len(ids), dtype=np.int64)
        for j, sample in enumerate(ids):
            data, labels[j] = self.data.record(int(sample))
            normalise_into(images[j], self.pipeline(data, np.random.default_rng([self.seed, self.epoch, int(sample)])))
        return Batch(images, torch.from_numpy(labels), torch.from_numpy(np.asarray(ids, dtype=np.int64)))


def split_batches(ids: np.ndarray, batch: int, drop_last: bool) -> list[np.ndarray]:
    """Consecutive batches of ``batch`` ids; the short tail is kept unless ``drop_last``."""
    cut = len(ids) - len(ids) % batch if drop_last else len(ids)
    return [ids[i : i + batch] for i in range(0, cut, batch)]


def batches(data: ShardDataset, ids: np.ndarray, batch: int, pipeline: Pipeline, size: int, *,
            seed: int, epoch: int, workers: int, drop_last: bool, prefetch: int = 2) -> DataLoader:
    """Batches of ``ids`` in order (shuffling is :func:`epoch_indices`'s), built in ``workers`` processes."""
    extra: dict[str, Any] = {"prefetch_factor": prefetch, "worker_init_fn": _init_worker} if workers else {}
    return DataLoader(BatchDataset(data, split_batches(ids, batch, drop_last), pipeline, size, seed, epoch),
                      batch_size=None, shuffle=False, num_workers=workers, **extra)


def _init_worker(worker_id: int) -> None:
    """A worker normalises with one torch thread (the workers are the parallelism), ignores stop signals, dies with its rank.

    SLURM signals every process of a job step; the training process turns SIGTERM/SIGUSR1 into a
    checkpoint, and its workers must live until it has written it (they exit with it). If the rank
    itself is killed, the kernel kills its workers at once (PR_SET_PDEATHSIG): torch only notices
    a dead parent every 5 s, and the launcher waits for the orphans' output pipes before it ends the job.
    """
    torch.set_num_threads(1)
    for s in (signal.SIGTERM, signal.SIGUSR1):
        signal.signal(s, signal.SIG_IGN)
    _die_with_parent()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that forked it exits (elsewhere: nothing)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
