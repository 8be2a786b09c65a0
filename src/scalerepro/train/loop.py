"""``scalerepro train``: synchronous data-parallel SGD over the project's all-reduce.

Every rank runs this same code; gradients are packed into fusion buckets
(reverse parameter order), summed with the configured algorithm and
averaged. Rank 0 writes the event log and the run record.
"""

from __future__ import annotations

import math
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from mpi4py import MPI
from torch import nn

from scalerepro.comm.context import Context
from scalerepro.comm.registry import allreduce, get
from scalerepro.config import Config, TrainConfig
from scalerepro.data.augment import EvalPipeline, TrainPipeline
from scalerepro.data.loader import ShardDataset, batches, epoch_indices, eval_indices, samples_per_rank
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.mpi import Layout, hosts, node_comm, node_layout, on_root
from scalerepro.provenance import argv, versions
from scalerepro.train.events import EventLog
from scalerepro.train.model import build


@dataclass(frozen=True)
class RunSpec:
    """One training run: the config, the algorithm, where the data is and where results go."""

    config: Config
    algorithm: str
    train_dir: Path
    val_dir: Path
    out: Path

    @property
    def train(self) -> TrainConfig:
        """The train section."""
        return self.config.train


class Buckets:
    """Gradient fusion buckets: flat buffers filled from .grad, summed, averaged, copied back."""

    def __init__(self, params: list[nn.Parameter], cap_bytes: int) -> None:
        """Group parameters in reverse order into buckets of at most ``cap_bytes`` (at least one each)."""
        self.groups: list[list[nn.Parameter]] = [[]]
        size = 0
        for p in reversed(params):
            nbytes = p.numel() * p.element_size()
            if self.groups[-1] and size + nbytes > cap_bytes:
                self.groups.append([])
                size = 0
            self.groups[-1].append(p)
            size += nbytes
        self.buffers = [torch.zeros(sum(p.numel() for p in g), dtype=g[0].dtype) for g in self.groups]

    def reduce(self, algorithm: str, ctx: Context) -> None:
        """Sum every bucket over the ranks and divide by their number."""
        for group, buf in zip(self.groups, self.buffers):
            torch.cat([p.grad.reshape(-1) for p in group], out=buf)
            allreduce(buf, algorithm, ctx)
            buf.div_(ctx.size)
            offset = 0
            for p in group:
                n = p.numel()
                p.grad.copy_(buf[offset : offset + n].view_as(p))
                offset += n


def threads_for(cfg: TrainConfig, comm: MPI.Intracomm) -> int:
    """Intra-op threads per rank: configured, or the node's cores shared among its ranks."""
    if cfg.threads_per_rank:
        return cfg.threads_per_rank
    return max(1, (os.cpu_count() or 1) // node_comm(comm).size)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """Weight decay on conv/linear weights only, not on batch-norm or bias."""
    decay = [p for p in model.parameters() if p.ndim > 1]
    no_decay = [p for p in model.parameters() if p.ndim <= 1]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def peak_lr(cfg: TrainConfig, world: int) -> float:
    """base_lr scaled linearly with the global batch (Goyal et al. 2017)."""
    return cfg.base_lr * world * cfg.batch_per_rank / cfg.reference_batch


def learning_rate(cfg: TrainConfig, world: int, step: int, steps_per_epoch: int) -> float:
    """Linear warm-up to the scaled peak, then linear (poly-1) decay to zero."""
    peak = peak_lr(cfg, world)
    warm = cfg.warmup_epochs * steps_per_epoch
    total = cfg.epochs * steps_per_epoch
    if step < warm:
        return peak * (step + 1) / warm
    return peak * max(0.0, 1.0 - (step - warm) / max(1.0, total - warm))


def broadcast_parameters(model: nn.Module, comm: MPI.Intracomm) -> None:
    """Make every rank start from rank 0's weights and buffers."""
    for t in list(model.parameters()) + list(model.buffers()):
        comm.Bcast(t.detach().numpy(), root=0)


def evaluate(model: nn.Module, data: ShardDataset, spec: RunSpec, layout: Layout,
             comm: MPI.Intracomm) -> tuple[float, float, int]:
    """Top-1, top-5 over the whole val split: every sample once, [correct1, correct5, count] summed."""
    model.eval()
    counts = np.zeros(3, dtype=np.float64)
    lc = spec.config.loader
    pipeline = EvalPipeline(spec.train.image_size, lc.eval_crop_fraction)
    with torch.no_grad():
        for x, y, _ in batches(data, eval_indices(data.local_ids(), layout), 2 * spec.train.batch_per_rank, pipeline,
                               spec.train.image_size, seed=0, epoch=0, workers=lc.workers, drop_last=False,
                               prefetch=lc.prefetch):
            top = model(x).topk(min(5, model_outputs(model)), dim=1).indices
            counts += [(top[:, 0] == y).sum().item(), (top == y[:, None]).any(1).sum().item(), len(y)]
    comm.Allreduce(MPI.IN_PLACE, counts, op=MPI.SUM)
    model.train()
    return counts[0] / counts[2], counts[1] / counts[2], int(counts[2])


def model_outputs(model: nn.Module) -> int:
    """Number of classes the model predicts."""
    return model.fc.out_features  # type: ignore[union-attr]


def timed(it: Any) -> Iterator[tuple[float, Any]]:
    """Yield (seconds waited for the item, item)."""
    iterator = iter(it)
    while True:
        t0 = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            return
        yield time.perf_counter() - t0, item


def run(spec: RunSpec, comm: MPI.Intracomm) -> dict[str, Any]:
    """Train, evaluate every epoch, log; return the run record (written by rank 0)."""
    cfg = spec.train
    get(spec.algorithm)  # unknown algorithm: fail before any work
    torch.set_num_threads(threads_for(cfg, comm))
    log = EventLog(spec.out / "events.jsonl", enabled=comm.rank == 0)
    try:
        with Context(comm, spec.config.comm.params()) as ctx:
            record = _train(spec, ctx, log)
    except BaseException as exc:
        log.emit("run_stop", None, status="aborted", error=f"{type(exc).__name__}: {exc}")
        log.close()
        raise
    log.finish()
    on_root(comm, lambda: write_json_atomic(spec.out / "run.json", record))
    return record


def _train(spec: RunSpec, ctx: Context, log: EventLog) -> dict[str, Any]:
    """The training loop proper."""
    comm = ctx.comm
    cfg, world = spec.train, comm.size
    log.start("run_start", algorithm=spec.algorithm, world_size=world)
    t_start = time.perf_counter()
    layout, lc = node_layout(comm), spec.config.loader
    train_data = ShardDataset(spec.train_dir, layout.node, layout.nodes)
    val_data = ShardDataset(spec.val_dir, layout.node, layout.nodes)
    pipeline = TrainPipeline(cfg.image_size, lc.crop_scale)
    classes = len(train_data.manifest["classes"])
    per_rank = samples_per_rank(train_data.counts, layout)
    if per_rank == 0:
        raise UserError(f"{train_data.total} training samples cannot feed {world} ranks; use fewer ranks")
    torch.manual_seed(cfg.seed)
    model = build(cfg.model, classes, cfg.width)
    broadcast_parameters(model, comm)
    params = [p for p in model.parameters() if p.requires_grad]
    buckets = Buckets(params, int(cfg.bucket_mib * 2**20))
    opt = torch.optim.SGD(param_groups(model, cfg.weight_decay), lr=cfg.base_lr, momentum=cfg.momentum, nesterov=True)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
    steps_per_epoch = math.ceil(per_rank / cfg.batch_per_rank)
    for key, value in (("global_batch_size", world * cfg.batch_per_rank), ("train_samples", train_data.total),
                       ("eval_samples", val_data.total), ("opt_base_learning_rate", peak_lr(cfg, world))):
        log.emit(key, value)
    step, reached = 0, None
    evals = []
    for epoch in range(cfg.epochs):
        log.start("epoch_start", epoch, epoch_num=epoch)
        idx = epoch_indices(train_data.counts, layout, cfg.seed, epoch)
        loader = batches(train_data, idx, cfg.batch_per_rank, pipeline, cfg.image_size, seed=cfg.seed, epoch=epoch,
                         workers=lc.workers, drop_last=False, prefetch=lc.prefetch)
        t_epoch, images = time.perf_counter(), 0
        for wait, (x, y, _) in timed(loader):
            lr = learning_rate(cfg, world, step, steps_per_epoch)
            for group in opt.param_groups:
                group["lr"] = lr
            t0 = time.perf_counter()
            opt.zero_grad(set_to_none=False)
            loss = loss_fn(model(x), y)
            loss.backward()
            t1 = time.perf_counter()
            buckets.reduce(spec.algorithm, ctx)
            t2 = time.perf_counter()
            opt.step()
            t3 = time.perf_counter()
            images += len(y) * world
            log.emit("step", step, epoch_num=epoch, loss=loss.item(), lr=lr, batch=len(y) * world,
                     data_s=wait, fwd_bwd_s=t1 - t0, allreduce_s=t2 - t1, optimizer_s=t3 - t2)
            step += 1
        seconds = time.perf_counter() - t_epoch
        log.end("epoch_stop", epoch, epoch_num=epoch, seconds=seconds, images=images, images_per_s=images / seconds)
        top1, top5, n = evaluate(model, val_data, spec, layout, comm)
        log.emit("eval_accuracy", top1, epoch_num=epoch, top5=top5, samples=n)
        evals.append({"epoch": epoch, "top1": top1, "top5": top5})
        if reached is None and top1 >= cfg.target_top1:
            reached = {"epoch": epoch, "seconds": time.perf_counter() - t_start}
    status = "success" if reached is not None else "aborted"
    log.end("run_stop", None, status=status, target_top1=cfg.target_top1)
    return {
        "algorithm": spec.algorithm,
        "world_size": world,
        "hosts": hosts(comm),
        "config": spec.config.to_dict(),
        "versions": versions(),
        "argv": argv(),
        "seed": cfg.seed,
        "data": {"train_sha256": train_data.manifest["source"]["sha256"], "val_sha256": val_data.manifest["source"]["sha256"],
                 "train_dir": str(spec.train_dir), "val_dir": str(spec.val_dir)},
        "threads_per_rank": torch.get_num_threads(),
        "final": evals[-1] if evals else None,
        "target_reached": reached,
        "status": status,
        "seconds": time.perf_counter() - t_start,
    }
