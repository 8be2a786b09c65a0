"""Run under mpiexec: N ranks x batch b == 1 rank x batch N*b (BN over the world), for each algorithm.

argv: algorithms (comma-separated; ``name@torch`` runs it on the torch executor, gloo on the CPU),
optimizer (sgd or lars), overlap (0 or 1). Two steps, so momentum matters too.
"""

from __future__ import annotations

import sys
from contextlib import ExitStack

import torch
from mpi4py import MPI

from scalerepro.comm.algorithms import select
from scalerepro.comm.context import CommParams, Context
from scalerepro.config import from_mapping
from scalerepro.train.model import build
from scalerepro.train.trainer import Trainer, build_trainer

comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
algos, optimizer, overlap = sys.argv[1].split(","), sys.argv[2], sys.argv[3] == "1"
B, CLASSES, SIZE, STEPS = 3, 5, 16, 2
torch.set_num_threads(1)
settings = {
    "model": "resnet8",
    "width": 4,
    "bn_group": "world",
    "optimizer": optimizer,
    "overlap": overlap,
    "label_smoothing": 0.1,
    "bucket_mib": 0.002,
    "device": "cpu",
    "seed": 3,
}
cfg = from_mapping({"train": settings}).train
ref_cfg = from_mapping({"train": {**settings, "bn_group": 1, "overlap": False}}).train

gen = torch.Generator().manual_seed(11)
batches = [
    (torch.randn(p * B, 3, SIZE, SIZE, generator=gen), torch.randint(0, CLASSES, (p * B,), generator=gen))
    for _ in range(STEPS)
]
torch.manual_seed(ref_cfg.seed)
reference = Trainer(build("resnet8", CLASSES, 4), ref_cfg, reduce=lambda _: None, world=1)
for x, y in batches:
    reference.step(x, y, lr=0.2)
want = [t.detach().clone() for t in reference.model.parameters()]

failures = []
for algo in algos:
    name, _, executor = algo.partition("@")
    with ExitStack() as stack:
        params = CommParams(timeout_s=120, chunk_bytes=1024, executor=executor or "auto")
        ctx = stack.enter_context(Context(comm, params))
        trainer = build_trainer(cfg, select(name, "cpu", params.executor), ctx, CLASSES, stack)
        for x, y in batches:
            trainer.step(x[r * B : (r + 1) * B], y[r * B : (r + 1) * B], lr=0.2)
        got = [t.detach() for t in trainer.model.parameters()]
        worst = max((g - w).abs().max().item() for g, w in zip(got, want, strict=True))
        if worst > 2e-5:
            failures.append(
                f"{algo} ({optimizer}, overlap={overlap}): parameters differ from 1 rank x {p * B} by {worst:.3g}"
            )
        if len(set(comm.allgather(b"".join(g.numpy().tobytes() for g in got)))) != 1:
            failures.append(f"{algo} ({optimizer}, overlap={overlap}): ranks hold different parameters")
every = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in every for f in fs]
    print("\n".join(flat) if flat else f"OK {p} ranks: {', '.join(algos)} ({optimizer}, overlap={overlap})")
    sys.exit(1 if flat else 0)
