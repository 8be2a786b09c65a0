"""Run under mpiexec: algorithms x executors x sizes x dtypes, in place and out=, on random floats.

Every rank must end with the same bits, within float tolerance of a float64 reference
(integer data would hide ranks that sum in different orders: integer sums are exact in any order).

argv: [algorithms (comma-separated, default all)] [extra sizes (comma-separated)] [executors (default mpi,torch)]
[comm.colors (default 3)]
"""

from __future__ import annotations

import sys

import numpy as np
import torch
from mpi4py import MPI
from sumcheck import sum_errors

from scalerepro.comm.algorithms import ALGORITHMS, names
from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import allreduce

comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
cpu = names("cpu")
algos = sys.argv[1].split(",") if len(sys.argv) > 1 and sys.argv[1] else cpu
extra = [int(s) for s in sys.argv[2].split(",")] if len(sys.argv) > 2 and sys.argv[2] else []
executors = sys.argv[3].split(",") if len(sys.argv) > 3 and sys.argv[3] else ["mpi", "torch"]
colors = int(sys.argv[4]) if len(sys.argv) > 4 else 3
sizes = sorted({0, 1, max(1, p - 1), p, p + 1, 7, 31, 97, 1000, 65537, 300_007, 1 << 20, *extra})
failures: list[str] = []


def check(label: str, got: np.ndarray, data: np.ndarray) -> None:
    """Same bits everywhere; within (p-1) eps sum|x| of the float64 reference."""
    failures.extend(sum_errors(comm, label, got, data))


for executor in executors:
    # small chunks so the pipelined algorithms really cut buffers into many chunks (lanes)
    with Context(comm, CommParams(timeout_s=120, colors=colors, chunk_bytes=65536, executor=executor)) as ctx:
        for algo in algos:
            pinned = ALGORITHMS[algo].executor if algo in ALGORITHMS else None
            if pinned is not None and pinned != executor and executor != executors[0]:
                continue  # a library collective runs on its own library whatever comm.executor says: once is enough
            for dtype in (np.float32, np.float64):
                for n in sizes:
                    data = np.random.default_rng([n, r]).standard_normal(n).astype(dtype)
                    label = f"{algo} [{executor}] {dtype.__name__} n={n}"
                    got = data.copy()
                    allreduce(got, algo, ctx)
                    check(label + " in place", got, data)
                    out, src = np.full_like(data, np.nan), data.copy()
                    allreduce(src, algo, ctx, out=out)
                    check(label + " out=", out, data)
                    if not np.array_equal(src, data):
                        failures.append(f"{label}: out= modified its input")
            t = torch.from_numpy(np.random.default_rng([5, r]).standard_normal(1001).astype(np.float32))
            address, before = t.data_ptr(), t.clone()
            allreduce(t, algo, ctx)  # a CPU tensor, in place: zero-copy on both executors
            check(f"{algo} [{executor}] torch tensor", t.numpy(), before.numpy())
            if t.data_ptr() != address:
                failures.append(f"{algo} [{executor}] torch tensor: result not in place")
all_failures = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in all_failures for f in fs]
    print("\n".join(flat[:50]) if flat else f"OK {p} ranks: {', '.join(algos)} on {', '.join(executors)}")
    sys.exit(1 if flat else 0)
