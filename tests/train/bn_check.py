"""Run under mpiexec: distributed batch norm over groups of G ranks == torch BatchNorm2d on the group's batch.

argv: G (an integer, or "world"), executor (mpi or torch; default mpi: MPI_Allreduce, torch: gloo on a
cached sub-group). Checks the forward output, the running statistics, the input
gradient and the group-summed affine gradients, in float32 and float64.
"""

from __future__ import annotations

import sys

import torch
from mpi4py import MPI
from torch import nn

from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import library_sum
from scalerepro.train.batchnorm import GroupSum, bn_context, convert

comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
G = p if sys.argv[1] == "world" else int(sys.argv[1])
EXECUTOR = sys.argv[2] if len(sys.argv) > 2 else "mpi"
B, C, H, W = 3, 5, 4, 3  # per-rank batch
failures = []
with Context(comm, CommParams(executor=EXECUTOR)) as ctx, bn_context(ctx, G) as group_ctx:
    group = GroupSum(lambda t: library_sum(t, group_ctx), group_ctx.size)
    first = (r // G) * G
    for dtype, tol in ((torch.float64, 1e-10), (torch.float32, 1e-5)):
        gen = torch.Generator().manual_seed(7)
        x_all = (3.0 + 2.0 * torch.randn(p * B, C, H, W, generator=gen)).to(dtype)
        dy_all = torch.randn(p * B, C, H, W, generator=gen).to(dtype)
        weight, bias = torch.rand(C, generator=gen).to(dtype) + 0.5, torch.randn(C, generator=gen).to(dtype)

        ref = nn.BatchNorm2d(C, momentum=0.3).to(dtype)
        with torch.no_grad():
            ref.weight.copy_(weight)
            ref.bias.copy_(bias)
        ours = convert(nn.Sequential(nn.BatchNorm2d(C, momentum=0.3).to(dtype)), group)[0]
        ours.load_state_dict(ref.state_dict())

        xg = x_all[first * B : (first + G) * B].clone().requires_grad_()
        yg = ref(xg)
        yg.backward(dy_all[first * B : (first + G) * B])

        x = x_all[r * B : (r + 1) * B].clone().requires_grad_()
        y = ours(x)
        y.backward(dy_all[r * B : (r + 1) * B])
        mine = slice((r - first) * B, (r - first + 1) * B)
        dw, db = ours.weight.grad.clone(), ours.bias.grad.clone()
        comm.Split(r // G, r).Allreduce(MPI.IN_PLACE, dw.numpy())  # affine grads are local: sum over the group
        comm.Split(r // G, r).Allreduce(MPI.IN_PLACE, db.numpy())
        checks = {
            "output": (y, yg[mine]),
            "input grad": (x.grad, xg.grad[mine]),
            "weight grad": (dw, ref.weight.grad),
            "bias grad": (db, ref.bias.grad),
            "running mean": (ours.running_mean, ref.running_mean),
            "running var": (ours.running_var, ref.running_var),
        }
        for name, (got, want) in checks.items():
            if not torch.allclose(got, want, rtol=tol, atol=tol):
                failures.append(f"G={G} {dtype}: {name} differs by {(got - want).abs().max().item():.3g}")
        ours.eval()
        ref.eval()
        if not torch.allclose(ours(x.detach()), ref(x.detach()), rtol=tol, atol=tol):
            failures.append(f"G={G} {dtype}: eval output differs")
every = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in every for f in fs]
    print("\n".join(flat) if flat else f"OK {p} ranks, G={G}, {EXECUTOR} executor")
    sys.exit(1 if flat else 0)
