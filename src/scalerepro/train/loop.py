"""``scalerepro train``: synchronous data-parallel SGD over the project's all-reduce.

Every rank runs this same code. Rank 0 writes the event log, the
checkpoints and the run record. A run whose --out holds a checkpoint
resumes from it; SIGTERM or SIGUSR1 (SLURM preemption, time limit) makes
every rank stop at the same step boundary, checkpoint and exit.
"""

from __future__ import annotations

import math
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from mpi4py import MPI

from scalerepro import provenance
from scalerepro.comm import allreduce
from scalerepro.comm.algorithms import Selection
from scalerepro.comm.context import Context
from scalerepro.config import Config, TrainConfig
from scalerepro.data.augment import EvalPipeline, TrainPipeline
from scalerepro.data.gpudecode import EvalCrops, TrainCrops
from scalerepro.data.loader import ShardDataset, batches, epoch_indices, eval_indices, samples_per_rank
from scalerepro.errors import UserError
from scalerepro.io import write_json_atomic
from scalerepro.mpi import node_comm, node_layout, node_table, on_root, processes
from scalerepro.oversubscription import usable_cpus
from scalerepro.train import checkpoint, runfolder
from scalerepro.train.checkpoint import Preempted, Progress
from scalerepro.train.events import EventLog
from scalerepro.train.optim import learning_rate, peak_lr
from scalerepro.train.runfolder import CHECKPOINT, DIVERGED, EVENTS, RANKS, RECORD, STOP_SIGNALS, StopSignals
from scalerepro.train.trainer import Trainer, allreduce_plan, build_trainer


@dataclass(frozen=True)
class RunSpec:
    """One training run: the config, the gradient all-reduce (resolved by the command), where the data is and
    where results go."""

    config: Config
    algorithm: Selection
    train_dir: Path
    val_dir: Path
    out: Path
    repetition: int = 0

    @property
    def train(self) -> TrainConfig:
        """The train section."""
        return self.config.train


def threads_for(cfg: TrainConfig, comm: MPI.Intracomm) -> int:
    """Intra-op threads per rank: configured, or this rank's usable CPUs (its affinity) shared with the node's
    ranks that may run on the same CPUs (srun --cpus-per-task gives each its own; mpiexec shares them)."""
    if cfg.threads_per_rank:
        return cfg.threads_per_rank
    node = node_comm(comm)
    mine = frozenset(usable_cpus())
    sharing = sum(1 for other in node.allgather(mine) if other == mine)
    node.Free()
    return max(1, len(mine) // sharing)


def timed(it: Any) -> Any:
    """Yield (seconds waited for the item, item)."""
    iterator = iter(it)
    while True:
        t0 = time.perf_counter()
        try:
            item = next(iterator)
        except StopIteration:
            return
        yield time.perf_counter() - t0, item


def train(spec: RunSpec, comm: MPI.Intracomm, signals: StopSignals | None = None) -> dict[str, Any]:
    """Train (or resume), evaluate, checkpoint, log; return the run record (written by rank 0). Rank 0 holds the
    run folder's lock throughout (:func:`scalerepro.train.runfolder.locked`). A run that has finished in
    ``spec.out`` (its run.json and events.jsonl there, agreeing) is not touched: its record is returned.
    ``signals``: the stop-signal handlers, if the caller installed them already (else installed here)."""
    spec.train.bn_group_size(comm.size)  # a group that does not divide the ranks: fail before any work
    with ExitStack() as held:
        on_root(comm, lambda: held.enter_context(runfolder.locked(spec.out)))
        done = on_root(comm, lambda: runfolder.finished_run(spec.out))
        record: dict[str, Any] | None = comm.bcast(done[0] if done else None, root=0)
        if record is None:
            return _train(spec, comm, signals or StopSignals())
        message = (
            f"scalerepro train: the run in {spec.out} has finished (run.json, events.jsonl); left as it is. "
            "To train it again, give another --out or delete the folder"
        )
        on_root(comm, lambda: print(message, file=sys.stderr, flush=True))
        return record


def _train(spec: RunSpec, comm: MPI.Intracomm, signals: StopSignals) -> dict[str, Any]:
    """The run itself, its folder held: see :func:`train`."""
    torch.set_num_threads(threads_for(spec.train, comm))
    resuming = (spec.out / CHECKPOINT).exists()
    log = EventLog(spec.out / EVENTS, enabled=comm.rank == 0, resume=resuming)
    if not resuming:  # MLPerf: the clock starts before the dataset is touched (nothing is untimed init)
        log.start("init_start")
        log.end("init_stop")
        log.start("run_start", algorithm=spec.algorithm.name, world_size=comm.size)
    ranks = processes(comm)
    on_root(comm, lambda: write_json_atomic(spec.out / RANKS, {"ranks": ranks}))
    try:
        with ExitStack() as stack:
            ctx = stack.enter_context(Context(comm, spec.config.comm.params()))
            record = TrainingRun(spec, ctx, log, signals, stack).train_to_end()
    except Preempted as exc:
        signals.restore()
        log.emit("run_preempted", None, signal=exc.signum)
        log.close()
        raise
    except BaseException as exc:
        signals.restore()
        log.emit("run_stop", None, status="aborted", error=f"{type(exc).__name__}: {exc}")
        log.close()
        raise
    on_root(comm, log.finish)
    on_root(comm, lambda: write_json_atomic(spec.out / RECORD, record))
    signals.restore()  # only now: a stop signal before the record is written must not kill the rank mid-write
    return record


class TrainingRun:
    """One rank's share of a training run: data, trainer, progress; epochs, evaluations, checkpoints."""

    def __init__(self, spec: RunSpec, ctx: Context, log: EventLog, signals: StopSignals, stack: ExitStack) -> None:
        """Open the shards, build the trainer, resume from a checkpoint if there is one."""
        self.spec, self.ctx, self.log, self.signals = spec, ctx, log, signals
        self.t0 = time.perf_counter()
        cfg, comm = spec.train, ctx.comm
        self.layout = node_layout(comm)
        self.train_data = ShardDataset(spec.train_dir, self.layout.node, self.layout.nodes)
        self.val_data = ShardDataset(spec.val_dir, self.layout.node, self.layout.nodes)
        if self.val_data.manifest["classes"] != self.train_data.manifest["classes"]:
            raise UserError(
                f"the shards in {spec.val_dir} and {spec.train_dir} have different class lists "
                f"(sharded from different datasets); re-run `scalerepro shard` for both splits of one dataset"
            )
        per_rank = samples_per_rank(self.train_data.counts, self.layout)
        if per_rank < cfg.batch_per_rank:
            raise UserError(
                f"train.batch_per_rank {cfg.batch_per_rank} is more than the {per_rank} training samples each of "
                f"the {comm.size} ranks gets ({self.train_data.total} in all): an epoch would not fill one batch; "
                "lower train.batch_per_rank, use fewer ranks or more data",
                shared=True,  # the same counts on every rank
            )
        self.steps_per_epoch = math.ceil(per_rank / cfg.batch_per_rank)
        self.trainer: Trainer = build_trainer(cfg, spec.algorithm, ctx, len(self.train_data.manifest["classes"]), stack)
        self.plan = allreduce_plan(self.trainer, spec.algorithm, ctx)
        self.meta = resume_key(spec, comm.size, self.train_data.manifest["source"]["sha256"])
        loaded = checkpoint.restore_progress(self.ckpt_path, self.trainer.model, self.trainer.opt, self.meta, comm)
        self.resumed = loaded is not None
        self.progress: Progress = loaded or Progress()
        self.t0 -= self.progress.elapsed_s
        if self.resumed:
            gap = comm.bcast(on_root(comm, lambda: log.resume(self.progress.step)), root=0)
            if gap:
                raise UserError(gap, shared=True)

    @property
    def ckpt_path(self) -> Path:
        """The run's checkpoint file."""
        return self.spec.out / CHECKPOINT

    def elapsed(self) -> float:
        """Seconds of this run so far, over every resumed segment."""
        return time.perf_counter() - self.t0

    def train_to_end(self) -> dict[str, Any]:
        """Every remaining epoch; the run record."""
        cfg, world = self.spec.train, self.ctx.size
        if self.resumed:
            self.log.emit(
                "run_resume", None, epoch_num=self.progress.epoch, batch=self.progress.batch, step=self.progress.step
            )
        else:
            for key, value in (
                ("global_batch_size", world * cfg.batch_per_rank),
                ("train_samples", self.train_data.total),
                ("eval_samples", self.val_data.total),
                ("opt_base_learning_rate", peak_lr(cfg, world)),
                ("opt_name", cfg.optimizer),
                ("bn_group_size", cfg.bn_group_size(world)),
            ):
                self.log.emit(key, value)
        self.log.emit("allreduce_plan", None, buckets=self.plan)
        try:
            for epoch in range(self.progress.epoch, cfg.epochs):
                self.epoch(epoch)
        except Diverged as exc:
            message = f"scalerepro train: {exc}"
            self.log.end("run_stop", None, status=DIVERGED, target_top1=cfg.target_top1, error=str(exc))
            on_root(self.ctx.comm, lambda: print(message, file=sys.stderr, flush=True))
            return self.record(DIVERGED)
        status = "success" if self.progress.reached is not None else "aborted"
        self.log.end("run_stop", None, status=status, target_top1=cfg.target_top1)
        return self.record(status)

    def epoch(self, epoch: int) -> None:
        """Train the rest of ``epoch``, then evaluate and checkpoint when due."""
        cfg, lc, world = self.spec.train, self.spec.config.loader, self.ctx.size
        first = self.progress.batch
        if first == 0:
            self.log.start("epoch_start", epoch, epoch_num=epoch)
        ids = epoch_indices(self.train_data.counts, self.layout, cfg.seed, epoch)[first * cfg.batch_per_rank :]
        loader = batches(
            self.train_data,
            ids,
            cfg.batch_per_rank,
            TrainCrops(cfg.image_size, lc.crop_scale)
            if lc.decode == "gpu"
            else TrainPipeline(cfg.image_size, lc.crop_scale),
            cfg.image_size,
            seed=cfg.seed,
            epoch=epoch,
            workers=lc.workers,
            drop_last=False,
            prefetch=lc.prefetch,
            device=self.trainer.device,
            shield=STOP_SIGNALS,
        )
        t_epoch, images = time.perf_counter(), 0
        for wait, (x, y, _) in timed(loader):
            self.ctx.phase = f"epoch {epoch}, step {self.progress.step}"
            lr = learning_rate(cfg, world, self.progress.step, self.steps_per_epoch)
            t = self.trainer.step(x, y, lr)
            images += len(y) * world
            self.log.emit(
                "step",
                self.progress.step,
                epoch_num=epoch,
                loss=t.loss,
                lr=lr,
                batch=len(y) * world,
                data_s=wait,
                fwd_bwd_s=t.fwd_bwd_s,
                allreduce_s=t.allreduce_s,
                allreduce_wait_s=t.allreduce_wait_s,
                optimizer_s=t.optimizer_s,
            )
            self.progress.step += 1
            self.progress.batch += 1
            self.stop_if_told(epoch, t.loss)
        seconds = time.perf_counter() - t_epoch
        self.log.end(
            "epoch_stop",
            epoch,
            epoch_num=epoch,
            seconds=seconds,
            images=images,
            images_per_s=images / seconds if seconds > 0 else 0.0,
        )
        last = epoch == cfg.epochs - 1
        if last or (epoch + 1) % cfg.eval_every == 0:
            self.evaluate(epoch)
        self.progress.epoch, self.progress.batch = epoch + 1, 0
        saved = last or bool(cfg.checkpoint_every and (epoch + 1) % cfg.checkpoint_every == 0)
        if saved:
            self.save()
        if not last:
            self.stop_between_epochs(saved)

    def stop_if_told(self, epoch: int, loss: float) -> None:
        """Collective, after each step: if any rank's loss is not finite, stop: the run has diverged; if any rank
        got a stop signal, checkpoint here and stop (after an epoch's last step, once the epoch has ended and
        been evaluated: :meth:`stop_between_epochs`)."""
        signum, diverged = self.signals.agreed(
            lambda flags: allreduce(flags, "native", self.ctx), diverged=not math.isfinite(loss)
        )
        if diverged:
            raise Diverged(self.progress.step - 1, epoch, loss, peak_lr(self.spec.train, self.ctx.size))
        if signum and self.progress.batch < self.steps_per_epoch:
            self.save()
            raise Preempted(signum)

    def stop_between_epochs(self, saved: bool) -> None:
        """Collective, at an epoch's end: a stop signal that came during its last step or its evaluation stops
        the run here, checkpointed (``saved``: already), rather than after the next epoch's first step (SLURM's
        kill follows its signal within KillWait)."""
        signum, _ = self.signals.agreed(lambda flags: allreduce(flags, "native", self.ctx))
        if signum:
            if not saved:
                self.save()
            raise Preempted(signum)

    def save(self) -> None:
        """Checkpoint now (all ranks), timed."""
        t0 = time.perf_counter()
        self.progress.elapsed_s = self.elapsed()
        self.log.sync()  # the steps this checkpoint holds are on disk before it is
        checkpoint.save(self.ckpt_path, self.trainer.model, self.trainer.opt, self.progress, self.meta, self.ctx.comm)
        self.log.emit(
            "checkpoint",
            self.progress.step,
            epoch_num=self.progress.epoch,
            batch=self.progress.batch,
            seconds=time.perf_counter() - t0,
        )

    def evaluate(self, epoch: int) -> None:
        """Top-1/top-5 on the val split; remembers when the target is first reached."""
        self.ctx.phase = f"evaluation after epoch {epoch}"
        self.log.start("eval_start", epoch, epoch_num=epoch)
        top1, top5, n = evaluate(self.trainer, self.val_data, self.spec, self.layout, self.ctx)
        self.log.end("eval_stop", epoch, epoch_num=epoch)
        self.log.emit("eval_accuracy", top1, epoch_num=epoch, top5=top5, samples=n)
        self.progress.evals.append({"epoch": epoch, "top1": top1, "top5": top5})
        if self.progress.reached is None and top1 >= self.spec.train.target_top1:
            self.progress.reached = {"epoch": epoch, "seconds": self.elapsed()}

    def record(self, status: str) -> dict[str, Any]:
        """The run record (run.json)."""
        spec, comm = self.spec, self.ctx.comm
        return {
            **provenance.record(comm),
            "algorithm": spec.algorithm.name,
            "world_size": comm.size,
            "nodes": node_table(comm),
            "device": str(self.trainer.device),
            "allreduce": self.plan,
            "config": spec.config.to_dict(),
            "seed": spec.train.seed,
            "bn_group": spec.train.bn_group,
            "repetition": spec.repetition,
            "data": {
                "train_sha256": self.train_data.manifest["source"]["sha256"],
                "val_sha256": self.val_data.manifest["source"]["sha256"],
                "train_dir": str(spec.train_dir),
                "val_dir": str(spec.val_dir),
            },
            "threads_per_rank": torch.get_num_threads(),
            "final": self.progress.evals[-1] if self.progress.evals else None,
            "target_reached": self.progress.reached,
            "resumed": self.resumed,
            "status": status,
            "seconds": self.elapsed(),
        }


class Diverged(Exception):
    """The training loss became non-finite: the run stops there, with status ``diverged``."""

    def __init__(self, step: int, epoch: int, loss: float, peak: float) -> None:
        """``step``, ``epoch``: where; ``loss``: this rank's (finite where another rank's was not); ``peak``: the
        run's peak learning rate."""
        seen = f"{loss}" if not math.isfinite(loss) else "non-finite on another rank"
        super().__init__(
            f"the training loss became {seen} at step {step} (epoch {epoch}): the run diverged and stops here "
            f"(status {DIVERGED}). The likely cause is the learning rate: lower train.base_lr (peak {peak:g} at "
            "this global batch) or lengthen train.warmup_epochs"
        )


# The settings that change what a run computes; a checkpoint resumes only when they match. Left out:
# the sweep's grid, timeouts, loader workers and prefetch, overlap, bucket size, threads, evaluation and
# checkpoint cadence, the target: raising comm.timeout_s after a watchdog abort must not throw the run away.
MATH_KEYS = {
    "train": (
        "model",
        "width",
        "image_size",
        "batch_per_rank",
        "epochs",
        "base_lr",
        "reference_batch",
        "warmup_epochs",
        "momentum",
        "weight_decay",
        "label_smoothing",
        "seed",
        "optimizer",
        "nesterov",
        "lars_eta",
        "lr_schedule",
        "poly_power",
        "decay_epochs",
        "decay_factor",
        "bn_group",
        "bf16",
    ),
    "loader": ("crop_scale", "eval_crop_fraction"),
}


# The arithmetic of the gradient all-reduce: every algorithm here sums float32 gradients once per element
# (only the order differs), so a run may resume under another; a lossy one (compression) would differ.
NUMERICS = "float32 sum"


def resume_key(spec: RunSpec, world: int, data_sha256: str) -> dict[str, Any]:
    """What a checkpoint must match to be resumed: what changes the maths (:data:`MATH_KEYS`), the rank
    count (global batch, BN groups), the data, and the all-reduce's numerics class."""
    cfg = spec.config.to_dict()
    kept = {section: {k: cfg[section][k] for k in keys} for section, keys in MATH_KEYS.items()}
    return {"numerics": NUMERICS, "world_size": world, **kept, "train_sha256": data_sha256}


def evaluate(
    trainer: Trainer, data: ShardDataset, spec: RunSpec, layout: Any, ctx: Context
) -> tuple[float, float, int]:
    """Top-1, top-5 over the whole val split: every sample once, [correct1, correct5, count] summed."""
    model = trainer.model
    model.eval()
    counts = np.zeros(3, dtype=np.float64)
    lc, size = spec.config.loader, spec.train.image_size
    fc = model.fc
    assert isinstance(fc, torch.nn.Linear)  # every network of model.build ends in a linear classifier
    outputs = fc.out_features
    with torch.no_grad():
        for x, y, _ in batches(
            data,
            eval_indices(data.local_ids(), layout),
            2 * spec.train.batch_per_rank,
            EvalCrops(size, lc.eval_crop_fraction) if lc.decode == "gpu" else EvalPipeline(size, lc.eval_crop_fraction),
            size,
            seed=0,
            epoch=0,
            workers=lc.workers,
            drop_last=False,
            prefetch=lc.prefetch,
            device=trainer.device,
            shield=STOP_SIGNALS,
        ):
            x, y = x.to(trainer.device), y.to(trainer.device)
            top = model(x).topk(min(5, outputs), dim=1).indices
            counts += [(top[:, 0] == y).sum().item(), (top == y[:, None]).any(1).sum().item(), len(y)]
    allreduce(counts, "native", ctx)
    model.train()
    return float(counts[0] / counts[2]), float(counts[1] / counts[2]), int(counts[2])
