"""Run under mpiexec: algorithms x sizes x dtypes, in and out of place; exact sums, identical bits everywhere.

argv: [algorithms (comma-separated, default all)] [extra sizes (comma-separated)]
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from mpi4py import MPI

from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import allreduce, names

comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
algos = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else names()
extra = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 and sys.argv[2] else []
sizes = sorted({0, 1, max(1, p - 1), p, p + 1, 7, 31, 97, 1000, 65537, 300_007, *extra})
failures = []
# small chunks so the pipelined algorithms really cut buffers into many chunks
with Context(comm, CommParams(timeout_s=120, colors=3, chunk_bytes=4096)) as ctx:
    for algo in algos:
        for dtype in (np.float32, np.float64):
            for n in sizes:
                data = np.random.default_rng([n, r]).integers(-1000, 1000, size=n).astype(dtype)
                want = np.sum(np.stack(comm.allgather(data)), axis=0) if n else np.zeros(0, dtype)
                for mode in ("in-place", "out-of-place"):
                    if mode == "in-place":
                        got = data.copy()
                        allreduce(got, algo, ctx)
                    else:
                        got = np.full_like(data, np.nan)
                        src = data.copy()
                        allreduce(src, algo, ctx, out=got)
                        if not np.array_equal(src, data):
                            failures.append(f"{algo} {dtype.__name__} n={n}: out-of-place modified its input")
                    if not np.array_equal(got, want):
                        bad = int(np.count_nonzero(got != want))
                        failures.append(f"{algo} {dtype.__name__} n={n} {mode}: {bad} wrong elements")
                    if len(set(comm.allgather(got.tobytes()))) != 1:
                        failures.append(f"{algo} {dtype.__name__} n={n} {mode}: ranks differ")
        t = torch.arange(10, dtype=torch.float32) * (r + 1)
        view = t.numpy()
        allreduce(t, algo, ctx)  # torch CPU tensor: in place, zero-copy
        if not torch.equal(t, torch.arange(10, dtype=torch.float32) * (p * (p + 1) // 2)) or view.ctypes.data != t.data_ptr():
            failures.append(f"{algo} torch tensor: wrong sum or copied")
all_failures = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in all_failures for f in fs]
    print("\n".join(flat) if flat else f"OK {p} ranks: {', '.join(algos)}")
    sys.exit(1 if flat else 0)
