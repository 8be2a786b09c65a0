"""Reading staged shards into batches: per-epoch deterministic shuffle, decode, augment.

Each epoch draws one permutation of every sample of every shard from
(seed, epoch); rank r takes positions r, r+p, r+2p, ... of its first
p * floor(n/p) entries, so ranks see disjoint samples and all take the same
number of steps. JPEGs are decoded with DCT-domain downscaling (PIL
``draft``) before the crop. Evaluation gives every sample to exactly one
rank, with no padding.
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import DataLoader, Dataset
from torchvision.transforms import v2

from scalerepro.data.shards import ShardReader, open_shards, read_manifest

MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)


class ShardDataset(Dataset):
    """All records of a staged split, addressed by one global index."""

    def __init__(self, folder: Path, transform: Any) -> None:
        """Open the split's shards (memory-mapped) and build the global index."""
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        self.transform = transform
        self._readers: list[ShardReader] | None = None
        counts = [e["samples"] for e in self.manifest["shards"]]
        self._starts = np.concatenate([[0], np.cumsum(counts)])

    @property
    def readers(self) -> list[ShardReader]:
        """Shard readers, opened lazily so each worker process maps its own."""
        if self._readers is None:
            self._readers = open_shards(self.folder, self.manifest["shards"])
        return self._readers

    def __len__(self) -> int:
        """Number of samples in the split."""
        return int(self._starts[-1])

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        """Decode and transform sample ``i``."""
        k = int(np.searchsorted(self._starts, i, side="right") - 1)
        data, label = self.readers[k].record(i - int(self._starts[k]))
        img = Image.open(io.BytesIO(data))
        size = getattr(self.transform, "decode_size", None)
        if size:
            img.draft("RGB", (size, size))
        return self.transform(img.convert("RGB")), label


def train_transform(size: int, seed: int) -> Any:
    """RandomResizedCrop + flip + normalise."""
    t = v2.Compose([
        v2.PILToTensor(),
        v2.RandomResizedCrop(size, scale=(0.35, 1.0), antialias=True),
        v2.RandomHorizontalFlip(),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])
    t.decode_size = size * 2  # type: ignore[attr-defined]
    return t


def eval_transform(size: int) -> Any:
    """Resize the short side to size/0.875, centre crop, normalise."""
    t = v2.Compose([
        v2.PILToTensor(),
        v2.Resize(int(round(size / 0.875)), antialias=True),
        v2.CenterCrop(size),
        v2.ToDtype(torch.float32, scale=True),
        v2.Normalize(MEAN, STD),
    ])
    t.decode_size = int(round(size / 0.875))  # type: ignore[attr-defined]
    return t


def epoch_indices(n: int, world: int, rank: int, seed: int, epoch: int) -> np.ndarray:
    """This rank's sample indices for ``epoch``: a slice of one global permutation."""
    order = np.random.default_rng([seed, epoch]).permutation(n)
    usable = (n // world) * world
    return order[:usable][rank::world]


def eval_indices(n: int, world: int, rank: int) -> np.ndarray:
    """Every sample exactly once over the ranks (uneven counts allowed)."""
    return np.arange(rank, n, world)


def _seed_worker(worker_id: int) -> None:
    """Give each worker a distinct torch seed derived from the loader's base seed."""
    torch.manual_seed(torch.initial_seed() + worker_id)


def batches(dataset: ShardDataset, indices: np.ndarray, batch: int, workers: int, seed: int) -> DataLoader:
    """A DataLoader over ``indices`` in order (shuffling is done by :func:`epoch_indices`)."""
    generator = torch.Generator().manual_seed(seed)
    return DataLoader(
        torch.utils.data.Subset(dataset, indices.tolist()),
        batch_size=batch,
        shuffle=False,
        num_workers=workers,
        worker_init_fn=_seed_worker,
        generator=generator,
        persistent_workers=False,
    )
