"""One rank's share of synchronous data-parallel SGD: model, optimizer, gradient sync, one step at a time."""

from __future__ import annotations

import time
from contextlib import ExitStack, nullcontext
from dataclasses import dataclass
from typing import Any

import torch
from mpi4py import MPI
from torch import nn

from scalerepro.comm.algorithms import Selection
from scalerepro.comm.context import Context
from scalerepro.comm.registry import library_sum, resolve
from scalerepro.config import TrainConfig
from scalerepro.errors import UserError
from scalerepro.mpi import node_comm
from scalerepro.train import batchnorm
from scalerepro.train.buckets import Buckets, Reducer, reducer
from scalerepro.train.model import build
from scalerepro.train.optim import build_optimizer, set_lr


@dataclass(frozen=True)
class StepTimes:
    """What one step cost, in seconds, and its loss."""

    loss: float
    fwd_bwd_s: float
    allreduce_s: float
    allreduce_wait_s: float
    optimizer_s: float


def device_kind(name: str) -> str:
    """The kind of device ``train.device`` ``name`` trains on: cpu, or cuda (auto: cuda when one is visible)."""
    return "cpu" if name == "cpu" or (name == "auto" and not torch.cuda.is_available()) else "cuda"


def resolve_device(name: str, comm: MPI.Intracomm) -> torch.device:
    """cpu, or this rank's GPU (node-local rank modulo the visible GPUs); auto picks cuda when one is visible."""
    if device_kind(name) == "cpu":
        return torch.device("cpu")
    if not torch.cuda.is_available():
        raise UserError("train.device=cuda but torch sees no GPU here; set train.device=cpu or auto")
    return torch.device("cuda", node_comm(comm).rank % torch.cuda.device_count())


def broadcast_state(model: nn.Module, comm: MPI.Intracomm) -> None:
    """Make every rank start from rank 0's weights and buffers (the model is still on the CPU)."""
    for t in list(model.parameters()) + list(model.buffers()):
        comm.Bcast(t.detach().numpy(), root=0)


CPU = torch.device("cpu")


class Trainer:
    """Forward, backward, gradient all-reduce (bucketed, averaged), optimizer step."""

    def __init__(
        self,
        model: nn.Module,
        cfg: TrainConfig,
        reduce: Reducer,
        world: int,
        device: torch.device = CPU,
    ) -> None:
        """Train ``model`` (moved to ``device``) with ``reduce`` summing gradient buckets over ``world`` ranks."""
        self.model = model.to(device)
        self.device = device
        self.opt = build_optimizer(self.model, cfg)
        self.loss_fn = nn.CrossEntropyLoss(label_smoothing=cfg.label_smoothing)
        params = [p for p in self.model.parameters() if p.requires_grad]
        self.buckets = Buckets(params, int(cfg.bucket_mib * 2**20), reduce, world, cfg.overlap)
        self.bf16 = device.type == "cuda" and cfg.bf16

    def _sync(self) -> float:
        """perf_counter after the device's queued work is done."""
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.perf_counter()

    def step(self, x: torch.Tensor, y: torch.Tensor, lr: float) -> StepTimes:
        """One synchronous SGD step on this rank's batch at rate ``lr``."""
        x, y = x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)
        set_lr(self.opt, lr)
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=False)
        amp = torch.autocast("cuda", dtype=torch.bfloat16) if self.bf16 else nullcontext()
        with amp:
            loss = self.loss_fn(self.model(x), y)
        loss.backward()
        t1 = self._sync()
        busy = self.buckets.synchronize()
        t2 = self._sync()
        self.opt.step()
        t3 = self._sync()
        return StepTimes(loss.item(), t1 - t0, busy, t2 - t1, t3 - t2)

    def close(self) -> None:
        """Stop the communication thread, if any."""
        self.buckets.close()


def build_trainer(cfg: TrainConfig, algorithm: Selection, ctx: Context, classes: int, stack: ExitStack) -> Trainer:
    """The configured model (seeded, rank 0's weights everywhere, batch norm over its group) and its Trainer,
    summing gradients with ``algorithm`` (selected for ``cfg.device``'s kind, :func:`device_kind`).

    Contexts and threads it opens are closed by ``stack``.
    """
    comm = ctx.comm
    device = resolve_device(cfg.device, comm)
    if device.type != algorithm.device:
        raise ValueError(f"{algorithm.name} was selected for {algorithm.device}, but train.device is {device.type}")
    group = cfg.bn_group_size(ctx.size)
    torch.manual_seed(cfg.seed)
    model = build(cfg.model, classes, cfg.width)
    broadcast_state(model, comm)
    if ctx.size > 1 and uses_torch(algorithm, ctx):
        ctx.process_groups()  # collective: every rank sets torch.distributed up here, before any thread could
    if group > 1:
        bn_ctx = stack.enter_context(batchnorm.bn_context(ctx, group))
        batchnorm.convert(model, batchnorm.GroupSum(lambda t: library_sum(t, bn_ctx), group))
    trainer = Trainer(model, cfg, reducer(algorithm, ctx), ctx.size, device)
    stack.callback(trainer.close)
    return trainer


def allreduce_plan(trainer: Trainer, algorithm: Selection, ctx: Context) -> list[dict[str, Any]]:
    """Per gradient bucket: its bytes and the schedule that sums it (``auto``'s choice, executor, colors, grid...)."""
    return [
        {"bucket": i, "bytes": buf.numel() * buf.element_size(), **resolve(buf, algorithm, ctx).record()}
        for i, buf in enumerate(trainer.buckets.buffers)
    ]


def uses_torch(algorithm: Selection, ctx: Context) -> bool:
    """Whether gradient sums (``algorithm``'s executor) or batch-norm sums (:func:`library_sum`: torch's on a GPU
    or under ``comm.executor=torch``) go through torch.distributed."""
    return algorithm.executor == "torch" or algorithm.device == "cuda" or ctx.params.executor == "torch"
