"""``scalerepro bench-train``: training throughput of our loop against PyTorch DDP (gloo), same run.

Both sides train the same model (same seed, same initial weights), with
the same optimizer, per-rank batch and in-memory batches, one after the
other within each repetition (the order alternates between
repetitions), so data loading and machine drift are left out of the
ratio. Ours sums gradients with the chosen algorithm through the
project's buckets; DDP with gloo and its own buckets of the same size,
overlapped with backward. Batch norm is local on both sides (DDP has no
CPU cross-rank batch norm). t = max over ranks per repetition; medians
over repetitions.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, replace
from typing import Any

import torch
from mpi4py import MPI
from torch import nn

from scalerepro.comm.algorithms import Selection
from scalerepro.comm.context import Context
from scalerepro.config import Config
from scalerepro.train.model import build
from scalerepro.train.optim import build_optimizer
from scalerepro.train.trainer import broadcast_state, build_trainer


@dataclass(frozen=True)
class TrainBenchSpec:
    """What to measure: our all-reduce (resolved by the command), steps per repetition, warm-up steps,
    repetitions, classes."""

    algorithm: Selection
    steps: int = 20
    warmup: int = 3
    reps: int = 5
    classes: int = 10

    def record(self) -> dict[str, Any]:
        """The spec as results record it (the algorithm by its name)."""
        return {**self.__dict__, "algorithm": self.algorithm.name}


def fixed_batches(cfg: Config, spec: TrainBenchSpec, rank: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """A few in-memory normalised batches, different per rank, identical for both sides."""
    t = cfg.train
    gen = torch.Generator().manual_seed(1000 + rank)
    return [
        (
            torch.randn(t.batch_per_rank, 3, t.image_size, t.image_size, generator=gen),
            torch.randint(0, spec.classes, (t.batch_per_rank,), generator=gen),
        )
        for _ in range(4)
    ]


def ddp_stepper(
    cfg: Config, ctx: Context, classes: int, device: torch.device
) -> Callable[[torch.Tensor, torch.Tensor], None]:
    """One PyTorch DDP training step (gloo on the CPU, nccl on a GPU) on a model with our initial weights."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    t = cfg.train
    torch.manual_seed(t.seed)
    model = build(t.model, classes, t.width)
    broadcast_state(model, ctx.comm)
    model = model.to(device)
    ctx.process_groups()  # the default process group, over ctx's ranks (gloo; nccl for CUDA tensors)
    ddp = DDP(model, bucket_cap_mb=t.bucket_mib, broadcast_buffers=False)
    opt = build_optimizer(model, t)
    loss_fn = nn.CrossEntropyLoss(label_smoothing=t.label_smoothing)
    bf16 = device.type == "cuda" and t.bf16

    def step(x: torch.Tensor, y: torch.Tensor) -> None:
        opt.zero_grad(set_to_none=False)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16):
            loss = loss_fn(ddp(x), y)
        loss.backward()
        opt.step()
        if device.type == "cuda":
            torch.cuda.synchronize(device)

    return step


def _timed_steps(
    step: Callable[[torch.Tensor, torch.Tensor], Any], data: list[Any], n: int, comm: MPI.Intracomm
) -> float:
    """Seconds for ``n`` steps, max over ranks (they start together)."""
    comm.Barrier()
    t0 = time.perf_counter()
    for i in range(n):
        step(*data[i % len(data)])
    return float(comm.allreduce(time.perf_counter() - t0, op=MPI.MAX))


def measure_against_ddp(
    cfg: Config, spec: TrainBenchSpec, comm: MPI.Intracomm, progress: Callable[[str], None]
) -> dict[str, Any]:
    """Both sides, ``spec.reps`` interleaved repetitions; per-repetition rows and the medians."""
    cfg = replace(cfg, train=replace(cfg.train, bn_group=1))
    t = cfg.train
    data = fixed_batches(cfg, spec, comm.rank)
    images = comm.size * t.batch_per_rank * spec.steps
    rows: list[dict[str, Any]] = []
    with ExitStack() as stack:
        ctx = stack.enter_context(Context(comm, cfg.comm.params()))
        ours = build_trainer(t, spec.algorithm, ctx, spec.classes, stack)
        data = [(x.to(ours.device), y.to(ours.device)) for x, y in data]
        peer = f"ddp-{'nccl' if ours.device.type == 'cuda' else 'gloo'}"
        comm_s: list[float] = []

        def our_step(x: torch.Tensor, y: torch.Tensor) -> None:
            comm_s.append(ours.step(x, y, lr=0.01).allreduce_s)

        sides = {"ours": our_step, peer: ddp_stepper(cfg, ctx, spec.classes, ours.device)}
        for step in sides.values():
            _timed_steps(step, data, spec.warmup, comm)
        for rep in range(spec.reps):
            order = list(sides) if rep % 2 == 0 else list(reversed(sides))
            for name in order:
                del comm_s[:]
                seconds = _timed_steps(sides[name], data, spec.steps, comm)
                row = {"rep": rep, "side": name, "seconds": seconds, "images_per_s": images / seconds}
                if name == "ours":
                    row["allreduce_s_per_step"] = comm.allreduce(statistics.median(comm_s), op=MPI.MAX)
                rows.append(row)
                progress(f"rep {rep} {name}: {row['images_per_s']:.1f} images/s")
    return {"rows": rows, "summary": summarise(rows, spec, comm.size)}


def summarise(rows: list[dict[str, Any]], spec: TrainBenchSpec, world: int) -> dict[str, Any]:
    """Median images/s per side, their ratio, and our all-reduce time per step and share of the step."""
    ours = [r for r in rows if r["side"] == "ours"]
    ddp = [r for r in rows if r["side"].startswith("ddp")]
    rate = statistics.median(r["images_per_s"] for r in ours)
    peer = statistics.median(r["images_per_s"] for r in ddp)
    step_s = statistics.median(r["seconds"] for r in ours) / spec.steps
    comm_s = statistics.median(r["allreduce_s_per_step"] for r in ours)
    return {
        "algorithm": spec.algorithm.name,
        "world_size": world,
        "peer": ddp[0]["side"],
        "ours_images_per_s": rate,
        "ddp_images_per_s": peer,
        "ratio": rate / peer,
        "ratios_per_rep": [a["images_per_s"] / b["images_per_s"] for a, b in zip(ours, ddp, strict=True)],
        "allreduce_s_per_step": comm_s,
        "step_s": step_s,
        "allreduce_share": comm_s / step_s,
    }


def format_summary(s: dict[str, Any]) -> str:
    """The result as a small table."""
    return "\n".join(
        [
            f"# {s['world_size']} ranks, ours = {s['algorithm']} all-reduce; medians over repetitions",
            f"{'side':<12}{'images/s':>12}",
            f"{'ours':<12}{s['ours_images_per_s']:>12.1f}",
            f"{s['peer']:<12}{s['ddp_images_per_s']:>12.1f}",
            f"ratio ours/ddp {s['ratio']:.3f} (per repetition: {', '.join(f'{r:.2f}' for r in s['ratios_per_rep'])})",
            (
                f"our all-reduce per step {s['allreduce_s_per_step'] * 1e3:.2f} ms "
                f"of a {s['step_s'] * 1e3:.1f} ms step "
                f"({100 * s['allreduce_share']:.1f}%)"
            ),
        ]
    )
