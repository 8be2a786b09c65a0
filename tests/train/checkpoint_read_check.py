"""Run under mpiexec: a checkpoint is read once per node, and each rank gets its own batch-norm buffers.

argv: a folder to write the checkpoint in. Prints "OK <reads>" on rank 0.
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from mpi4py import MPI

from scalerepro.train import checkpoint
from scalerepro.train.model import build
from scalerepro.train.runfolder import CHECKPOINT

comm = MPI.COMM_WORLD
path = Path(sys.argv[1]) / CHECKPOINT
torch.manual_seed(0)
model = build("resnet8", 10, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
for _name, t in model.named_buffers():
    if t.is_floating_point():
        t.fill_(comm.rank + 0.5)  # every rank's statistics differ
checkpoint.save(path, model, opt, checkpoint.Progress(epoch=3), {"k": 1}, comm)
comm.Barrier()
reads: list[int] = []


class CountingTorch:
    """torch as the checkpoint module sees it, counting its torch.load calls (the file reads)."""

    def __getattr__(self, name: str) -> object:
        return getattr(torch, name)

    def load(self, *args: object, **kwargs: object) -> object:
        reads.append(1)
        return torch.load(*args, **kwargs)


checkpoint.torch = CountingTorch()  # type: ignore[assignment]  # this process only: a test double
fresh = build("resnet8", 10, 4)
progress = checkpoint.restore_progress(
    path, fresh, torch.optim.SGD(fresh.parameters(), lr=0.1, momentum=0.9), {"k": 1}, comm
)
mine = all(t.eq(comm.rank + 0.5).all() for t in fresh.buffers() if t.is_floating_point())
same = all(torch.equal(a, b) for a, b in zip(fresh.parameters(), model.parameters(), strict=True))
total = comm.reduce(len(reads), root=0)
ok = comm.allreduce(int(mine and same and progress.epoch == 3), op=MPI.MIN)
if comm.rank == 0:
    print(f"OK {total}" if ok else "WRONG buffers, parameters or progress")
