"""Run under mpiexec: the same algorithm on the mpi and the torch executor trains to the same parameters.

argv: algorithm, steps. Both runs start from the same weights and see the same batches; batch norm
sums over the world (MPI_Allreduce on one side, gloo's all_reduce on the other). Parameters must
agree within float32 tolerance on every rank, and every rank must hold the same bits within a run.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

import torch
from mpi4py import MPI

from scalerepro.comm.algorithms import select
from scalerepro.comm.context import CommParams, Context
from scalerepro.config import from_mapping
from scalerepro.train.trainer import build_trainer

comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
algo, STEPS = sys.argv[1], int(sys.argv[2])
B, CLASSES, SIZE = 4, 5, 16
TOL = 1e-4  # relative to the largest parameter: summation order differs only in batch norm's library sums
torch.set_num_threads(1)
cfg = from_mapping(
    {
        "train": {
            "model": "resnet8",
            "width": 4,
            "bn_group": "world",
            "optimizer": "sgd",
            "bucket_mib": 0.01,
            "device": "cpu",
            "seed": 5,
        }
    }
).train
gen = torch.Generator().manual_seed(100 + r)
batches = [
    (torch.randn(B, 3, SIZE, SIZE, generator=gen), torch.randint(0, CLASSES, (B,), generator=gen)) for _ in range(4)
]


def train(executor: str) -> list[torch.Tensor]:
    """Parameters after STEPS steps of ``algo`` on ``executor``."""
    with ExitStack() as stack:
        ctx = stack.enter_context(Context(comm, CommParams(timeout_s=120, executor=executor)))
        trainer = build_trainer(cfg, select(algo, "cpu", executor), ctx, CLASSES, stack)
        for i in range(STEPS):
            trainer.step(*batches[i % len(batches)], lr=0.05)
        got = [t.detach().clone() for t in trainer.model.parameters()]
    if len(set(comm.allgather(b"".join(g.numpy().tobytes() for g in got)))) != 1:
        failures.append(f"{algo} on {executor}: ranks hold different parameters")
    return got


failures: list[str] = []
mpi, tor = train("mpi"), train("torch")
scale = max(t.abs().max().item() for t in mpi)
worst = max((a - b).abs().max().item() for a, b in zip(mpi, tor, strict=True))
if worst > TOL * scale:
    failures.append(
        f"{algo}: after {STEPS} steps the executors' parameters differ by {worst:.3g} "
        f"(> {TOL:g} x max |param| {scale:.3g})"
    )
every = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in every for f in fs]
    print(
        "\n".join(flat)
        if flat
        else f"OK {p} ranks: {algo}, mpi vs torch executor after {STEPS} steps, max difference {worst:.3g}"
    )
    sys.exit(1 if flat else 0)
