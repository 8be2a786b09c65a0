"""Reading staged shards into normalised batches: per-node shards, per-epoch shuffle, batches built in workers.

Shards are spread over nodes (shard k lives on node k mod nodes, see
:func:`scalerepro.data.shards.node_shards`), and each rank reads only its node's shards,
read with ``pread``. Every epoch draws one permutation of all samples from
(seed, epoch); a node keeps the entries that live in its shards and its
ranks take every local_size-th of them, cut to the count every rank in the
job can reach, so ranks see disjoint samples and all take the same number
of steps. Evaluation gives every sample to exactly one rank, with no padding.

A worker process builds a whole batch: it decodes each JPEG (at a reduced
DCT scale where the crop allows), resizes the crop in uint8
(:mod:`scalerepro.data.augment`) and flips it, into its row of a uint8
batch buffer. The buffers are a :class:`BatchPool` in shared memory, made
before the workers start and reused round-robin, so a batch is neither
collated, copied nor sent: a worker sends its slot number and the labels.
The rank turns the uint8 batch into float32 ImageNet-normalised images on
its own device (:class:`Batches`): on a GPU after a copy of a quarter of the
bytes, on the CPU in one of two float buffers it reuses (0.09 ms per 224 px
image; into a fresh buffer, 0.43 ms: page faults). Keeping the pool in
uint8 makes it a quarter of a float pool's size (ImageNet at batch 64: 9.2
MiB a slot, not 36.8); with that and records read rather than mapped
(:class:`~scalerepro.data.shards.ShardReader`), the loader's peak memory is
below torchvision's (``scalerepro bench-loader``). The price of the reused float
buffers is the contract of every buffer-reusing loader (FFCV, DALI): on the
CPU a batch is valid until the one after next is drawn, and a batch still
referenced then is an error, not silent corruption.
"""

from __future__ import annotations

import ctypes
import functools
import signal
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt
import torch
from torch.utils.data import DataLoader, Dataset

from scalerepro.data.gpudecode import EvalCrops, PackedCrops, TrainCrops, decode_batch
from scalerepro.data.shards import ShardReader, check_manifest, node_shards, open_shards, read_manifest
from scalerepro.data.tensors import batch_tensor, normalise_into
from scalerepro.errors import UserError
from scalerepro.mpi import Layout

PR_SET_PDEATHSIG = 1  # <linux/prctl.h>

Pipeline = Callable[[bytes, np.random.Generator], torch.Tensor] | TrainCrops | EvalCrops


class Batch(NamedTuple):
    """Normalised images (N, 3, H, W float32), labels and the global sample ids they came from."""

    images: torch.Tensor
    labels: torch.Tensor
    ids: torch.Tensor


class ShardDataset:
    """The records of one split that live on this node, addressed by global sample id."""

    def __init__(self, folder: Path, node: int = 0, nodes: int = 1) -> None:
        """Read the manifest, check it against this node's shards (their footers:
        :func:`~scalerepro.data.shards.check_manifest`) and index them (their indexes read lazily, once per
        process)."""
        self.folder = Path(folder)
        self.manifest = read_manifest(self.folder)
        entries = self.manifest["shards"]
        self.counts = np.array([e["samples"] for e in entries], dtype=np.int64)
        self.starts = np.concatenate([[0], np.cumsum(self.counts)])
        self.shards = node_shards(len(entries), node, nodes)
        self._entries = [entries[k] for k in self.shards]
        check_manifest(self.folder, self.manifest, self._entries)
        self._readers: dict[int, ShardReader] | None = None

    def __getstate__(self) -> dict[str, Any]:
        """Pickle without the readers (a worker started by spawn/forkserver reads the indexes itself)."""
        return {**self.__dict__, "_readers": None}

    @property
    def readers(self) -> dict[int, ShardReader]:
        """Shard number -> reader, opened on first use."""
        if self._readers is None:
            missing = [e["file"] for e in self._entries if not (self.folder / e["file"]).is_file()]
            if missing:
                raise UserError(
                    f"{self.folder} lacks staged shard(s) {', '.join(missing[:3])}; "
                    "run `scalerepro stage` inside this allocation first"
                )
            self._readers = dict(zip(self.shards, open_shards(self.folder, self._entries), strict=True))
        return self._readers

    @property
    def total(self) -> int:
        """Samples in the whole split (all nodes)."""
        return int(self.starts[-1])

    def local_ids(self) -> npt.NDArray[np.int64]:
        """Global ids of the samples on this node, ascending."""
        return np.concatenate([np.arange(self.starts[k], self.starts[k + 1]) for k in self.shards])

    def locate(self, sample: int) -> tuple[ShardReader, int]:
        """The reader of the shard holding global sample id ``sample`` (must live on this node), and its record."""
        k = int(np.searchsorted(self.starts, sample, side="right") - 1)
        return self.readers[k], sample - int(self.starts[k])

    def record(self, sample: int) -> tuple[bytes, int]:
        """JPEG bytes and label of global sample id ``sample`` (must live on this node)."""
        reader, i = self.locate(sample)
        return reader.record(i)

    def describe(self, sample: int) -> str:
        """Where global sample id ``sample`` lives, for an error: its shard, record and source file."""
        reader, i = self.locate(sample)
        names = reader.names()
        source = names[i] if i < len(names) else "unknown"
        return f"shard {reader.path}, record {i} (source {source})"

    def labels(self, ids: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        """Labels of the given global ids, from the shards' indexes (no record is read)."""
        located = [self.locate(int(i)) for i in ids]
        return np.array([reader.index["label"][i] for reader, i in located], dtype=np.int64)


def epoch_indices(counts: npt.NDArray[np.int64], layout: Layout, seed: int, epoch: int) -> npt.NDArray[np.int64]:
    """This rank's global sample ids for ``epoch``: its node's part of one permutation of all samples."""
    per_rank = samples_per_rank(counts, layout)
    starts = np.concatenate([[0], np.cumsum(counts)])
    order = np.random.default_rng([seed, epoch]).permutation(int(starts[-1]))
    node_of = (np.searchsorted(starts, order, side="right") - 1) % layout.nodes
    mine: npt.NDArray[np.bool_] = node_of == layout.node
    return order[mine][layout.local_rank :: layout.local_size][:per_rank]


def samples_per_rank(counts: npt.NDArray[np.int64], layout: Layout) -> int:
    """Samples every rank takes per epoch: the least any node's ranks can share equally."""
    if len(counts) % layout.nodes:
        raise UserError(
            f"{len(counts)} training shards do not divide evenly over {layout.nodes} nodes, so some "
            "samples would be left out of every epoch; set shard.train_shards to a multiple of the node count"
        )
    per_node = [int(np.sum(counts[node_shards(len(counts), j, layout.nodes)])) for j in range(layout.nodes)]
    return min(n // r for n, r in zip(per_node, layout.ranks_per_node, strict=True))


def eval_indices(ids: npt.NDArray[np.int64], layout: Layout) -> npt.NDArray[np.int64]:
    """This rank's share of its node's samples: every sample exactly once over the ranks (uneven allowed)."""
    return ids[layout.local_rank :: layout.local_size]


def storage_refs(t: torch.Tensor) -> int:
    """How many tensors (views included) hold ``t``'s storage in this process."""
    return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))


class BatchPool:
    """uint8 batch buffers in shared memory, made by the consumer before its workers start: batch b fills slot
    b mod slots.

    ``released[s]`` is the last batch the consumer gave back from slot s; a
    worker fills slot s with batch b only once batch b - slots is released,
    and otherwise (it never happens while the DataLoader keeps at most
    ``slots - 1`` batches in flight) builds that batch in a fresh buffer.
    """

    def __init__(self, slots: int, shape: tuple[int, ...], shared: bool = True) -> None:
        """``slots`` buffers of ``shape`` uint8, none filled yet; in shared memory if worker processes fill them."""
        share: Callable[[torch.Tensor], torch.Tensor] = (
            (lambda t: t.share_memory_()) if shared else (lambda t: t)  # type: ignore[no-untyped-call]  # torch leaves share_memory_ unannotated
        )
        self.buffers = [share(torch.empty(shape, dtype=torch.uint8)) for _ in range(slots)]
        self.released = share(torch.arange(-slots, 0, dtype=torch.int64))

    def take(self, b: int) -> tuple[int, torch.Tensor]:
        """(slot, buffer) to build batch ``b`` in: its pool slot if free, else (-1, a fresh shared buffer)."""
        slot = b % len(self.buffers)
        if int(self.released[slot]) >= b - len(self.buffers):
            return slot, self.buffers[slot]
        return -1, batch_tensor(tuple(self.buffers[0].shape))

    def release(self, b: int, slot: int) -> None:
        """The consumer has copied batch ``b`` out of ``slot`` (-1: not pooled): a worker may refill it."""
        if slot >= 0:
            self.released[slot] = b


class Outputs:
    """Where the rank's normalised batches go: on the CPU, two float32 buffers used in turn (batch b in buffer
    b mod 2), checked free before reuse; on a GPU, a fresh tensor per batch (its caching allocator reuses the
    memory)."""

    def __init__(self, shape: tuple[int, ...], device: torch.device) -> None:
        """Buffers of ``shape`` float32 on ``device``, made on first use."""
        self.shape, self.device = shape, device
        self.buffers: list[torch.Tensor] = []
        self.refs: list[int] = []

    def take(self, b: int) -> torch.Tensor:
        """The tensor batch ``b``'s images go into; on the CPU an error if batch b - 2's are still referenced."""
        if self.device.type != "cpu":
            return torch.empty(self.shape, dtype=torch.float32, device=self.device)
        if len(self.buffers) < 2:
            self.buffers.append(torch.empty(self.shape, dtype=torch.float32))
            self.refs.append(storage_refs(self.buffers[-1]))
        slot = b % 2
        if storage_refs(self.buffers[slot]) != self.refs[slot]:
            raise RuntimeError(
                f"batch {b - 2}'s images are still referenced two batches later, but the loader reuses "
                "its buffers (a batch is valid until the one after next is drawn); clone() what "
                "you keep"
            )
        return self.buffers[slot]


class Filled(NamedTuple):
    """What a worker sends for one batch: the pool slot it filled (-1: ``images`` holds a fresh buffer)."""

    slot: int
    images: torch.Tensor | None
    rows: int  # how many of the buffer's rows hold this batch's images
    labels: torch.Tensor
    ids: torch.Tensor
    crops: PackedCrops | None = None  # decode: gpu: the compressed crops, for the rank to decode
    error: str = ""  # why the batch could not be built (a damaged record or shard): the rank raises it


class BatchDataset(Dataset[Filled]):
    """Item b is batch b, decoded and normalised into the pool by whichever worker draws it."""

    def __init__(
        self,
        data: ShardDataset,
        batches: list[npt.NDArray[np.int64]],
        pipeline: Pipeline,
        pool: BatchPool,
        seed: int,
        epoch: int,
    ) -> None:
        """Batches of global ids, the per-image pipeline, the buffers and the (seed, epoch) randomness derives from."""
        self.data, self.batches, self.pipeline, self.pool = data, batches, pipeline, pool
        self.seed, self.epoch = seed, epoch

    def __len__(self) -> int:
        """Number of batches."""
        return len(self.batches)

    def __getitem__(self, b: int) -> Filled:
        """Decode and augment batch ``b`` into its uint8 buffer (or, given a crop pipeline, pack its crops); a
        damaged record or shard comes back as the batch's ``error`` (one line for the rank to raise, where an
        exception would reach it wrapped in the worker's traceback)."""
        ids = self.batches[b]
        try:
            return self._fill(b, ids)
        except UserError as exc:
            return Filled(
                -1, None, 0, torch.empty(0, dtype=torch.int64), torch.empty(0, dtype=torch.int64), None, str(exc)
            )

    def _fill(self, b: int, ids: npt.NDArray[np.int64]) -> Filled:
        """Batch ``b`` of ``ids`` built (see :meth:`__getitem__`)."""
        labels = np.empty(len(ids), dtype=np.int64)
        ids_t = torch.from_numpy(np.asarray(ids, dtype=np.int64))
        if isinstance(self.pipeline, TrainCrops | EvalCrops):  # loader.decode: gpu: the rank decodes
            crops = PackedCrops.pack(list(self.samples(ids, labels)))
            return Filled(-1, None, len(ids), torch.from_numpy(labels), ids_t, crops)
        slot, images = self.pool.take(b)
        for j, image in enumerate(self.samples(ids, labels)):
            images[j].copy_(image)
        return Filled(slot, None if slot >= 0 else images, len(ids), torch.from_numpy(labels), ids_t)

    def samples(self, ids: npt.NDArray[np.int64], labels: npt.NDArray[np.int64]) -> Iterator[Any]:
        """The pipeline's output for each of ``ids`` (randomness from (seed, epoch, sample)); fills ``labels``."""
        for j, sample in enumerate(ids):
            data, labels[j] = self.data.record(int(sample))
            try:
                out = self.pipeline(data, np.random.default_rng([self.seed, self.epoch, int(sample)]))
            except Exception as exc:  # the decoder's errors differ by damage; the record is what to name
                raise UserError(
                    f"{self.data.describe(int(sample))} cannot be decoded ({type(exc).__name__}: {exc}); the shard "
                    "is damaged: stage it again (`scalerepro stage`), or re-run `scalerepro shard` if the shard "
                    "folder's copy is the damaged one"
                ) from None
            yield out


class Batches:
    """The batches of one pass, in order, normalised on ``device``.

    On the CPU each is valid until the one after next is drawn.
    """

    def __init__(
        self, loader: DataLoader[Filled], pool: BatchPool, device: torch.device, shield: tuple[signal.Signals, ...]
    ) -> None:
        """Wrap a DataLoader over a :class:`BatchDataset` filling ``pool``; its workers ignore ``shield``."""
        self.loader, self.pool, self.shield = loader, pool, shield
        self.outputs = Outputs(tuple(pool.buffers[0].shape), device)
        self.unpooled = 0  # batches of the last pass that were built outside the pool

    def __len__(self) -> int:
        """Number of batches."""
        return len(self.loader)

    def _start(self) -> Iterator[Filled]:
        """Start the pass's workers with the shielded signals blocked: a worker forked before its init function
        has run would otherwise die of a signal meant for the rank (it arrives pending and is dropped once the
        worker ignores it); here the rank's own handler gets it once the workers are started."""
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, self.shield)
        try:
            return iter(self.loader)
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)

    def __iter__(self) -> Iterator[Batch]:
        """Ask for batch b, normalise it out of its uint8 slot onto the device, and give the slot back."""
        it, self.unpooled, size = self._start(), 0, self.pool.buffers[0].shape[-1]
        for b in range(len(self.loader)):
            filled = next(it)
            if filled.error:
                raise UserError(filled.error)
            if filled.crops is not None:
                yield Batch(
                    decode_batch(filled.crops, size, self.outputs.device, filled.ids), filled.labels, filled.ids
                )
                continue
            self.unpooled += filled.slot < 0
            pixels = filled.images if filled.slot < 0 else self.pool.buffers[filled.slot]
            assert pixels is not None  # a fresh buffer travels in Filled.images
            images = self.outputs.take(b)[: filled.rows]
            normalise_into(images, pixels[: filled.rows])
            self.pool.release(b, filled.slot)
            yield Batch(images, filled.labels, filled.ids)


def split_batches(ids: npt.NDArray[np.int64], batch: int, drop_last: bool) -> list[npt.NDArray[np.int64]]:
    """Consecutive batches of ``batch`` ids; the short tail is kept unless ``drop_last``."""
    cut = len(ids) - len(ids) % batch if drop_last else len(ids)
    return [ids[i : i + batch] for i in range(0, cut, batch)]


def batches(
    data: ShardDataset,
    ids: npt.NDArray[np.int64],
    batch: int,
    pipeline: Pipeline,
    size: int,
    *,
    seed: int,
    epoch: int,
    workers: int,
    drop_last: bool,
    prefetch: int = 2,
    device: torch.device | None = None,
    shield: tuple[signal.Signals, ...] = (),
) -> Batches:
    """Batches of ``ids`` in order (shuffling is :func:`epoch_indices`'s), built in ``workers`` processes and
    normalised on ``device`` (default: the CPU). A crop pipeline (:class:`TrainCrops`, :class:`EvalCrops`) has
    the workers hand compressed crops, which are decoded on ``device`` (``loader.decode: gpu``). The workers
    ignore the signals of ``shield`` (those the caller turns into a clean stop) from the moment they exist.

    On the CPU a batch is valid until the one after next is drawn (its buffer
    is then refilled); keeping it longer raises, so ``clone()`` what you keep.
    """
    init = functools.partial(_init_worker, shield)
    extra: dict[str, Any] = {"prefetch_factor": prefetch, "worker_init_fn": init} if workers else {}
    chunks = split_batches(ids, batch, drop_last)
    rows = 1 if isinstance(pipeline, TrainCrops | EvalCrops) else min(batch, len(ids)) or 1  # crops: pool unused
    pool = BatchPool(workers * prefetch + 1, (rows, 3, size, size), shared=workers > 0)
    loader = DataLoader(
        BatchDataset(data, chunks, pipeline, pool, seed, epoch),
        batch_size=None,
        shuffle=False,
        num_workers=workers,
        **extra,
    )
    return Batches(loader, pool, device or torch.device("cpu"), shield)


def _init_worker(shield: tuple[signal.Signals, ...], _worker_id: int) -> None:
    """A worker normalises with one torch thread (the workers are the parallelism), ignores the signals of
    ``shield`` and dies with its rank.

    SLURM signals every process of a job step, and Ctrl-C every process of the terminal's group; the
    training process turns those signals into a checkpoint, and its workers must live until it has
    written it (they exit with it). If the rank
    itself is killed, the kernel kills its workers at once (PR_SET_PDEATHSIG): torch only notices
    a dead parent every 5 s, and the launcher waits for the orphans' output pipes before it ends the job.
    """
    torch.set_num_threads(1)
    for s in shield:
        signal.signal(s, signal.SIG_IGN)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, shield)  # blocked by the parent while it forked this worker
    _die_with_parent()


def _die_with_parent() -> None:
    """Linux: SIGKILL this process when the process that forked it exits (elsewhere: nothing)."""
    if not sys.platform.startswith("linux"):
        return
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
