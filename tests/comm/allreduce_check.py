"""Run under mpiexec: every algorithm, many sizes and dtypes, exact sums, identical bits on every rank."""

from __future__ import annotations

import sys

import numpy as np
import torch
from mpi4py import MPI

from scalerepro.comm.registry import allreduce, names

comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
failures = []
sizes = [0, 1, max(1, p - 1), p, p + 1, 7, 31, 97, 1000, 65537, 1 << 20]
for algo in (sys.argv[1].split(",") if len(sys.argv) > 1 else names()):
    for dtype in (np.float32, np.float64):
        for n in sizes:
            rng = np.random.default_rng([n, r])
            data = rng.integers(-1000, 1000, size=n).astype(dtype)
            everyone = comm.allgather(data)
            want = np.sum(np.stack(everyone), axis=0) if n else np.zeros(0, dtype)
            buf = data.copy()
            allreduce(buf, algo, comm)
            bits = comm.allgather(buf.tobytes())
            if not np.array_equal(buf, want):
                failures.append(f"{algo} {dtype.__name__} n={n}: wrong sum")
            if len(set(bits)) != 1:
                failures.append(f"{algo} {dtype.__name__} n={n}: ranks differ")
    t = torch.arange(10, dtype=torch.float32) * (r + 1)
    allreduce(t, algo, comm)  # torch CPU tensor, in place, zero-copy
    if not torch.equal(t, torch.arange(10, dtype=torch.float32) * (p * (p + 1) // 2)):
        failures.append(f"{algo} torch tensor: wrong sum")
all_failures = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in all_failures for f in fs]
    print("\n".join(flat) if flat else f"OK {p} ranks")
    sys.exit(1 if flat else 0)
