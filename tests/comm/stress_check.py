"""Run under mpiexec: back-to-back all-reduces of mixed sizes for every algorithm; every result checked; RSS stable.

argv: iterations per algorithm, [algorithms (comma-separated, default all)].
Prints one line per algorithm (rank 0) and exits 1 on a wrong result or RSS growth over 10 %.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import numpy as np
import torch
from mpi4py import MPI

from scalerepro.comm.algorithms import names
from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import allreduce

MAX_ELEMENTS = 1 << 18  # 1 MiB of float32
comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
iters = int(sys.argv[1])
algos = sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else names("cpu")


def rss_bytes() -> int:
    """This process's resident set size."""
    with Path("/proc/self/statm").open() as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def case(it: int) -> tuple[int, type, bool, bool]:
    """Iteration ``it``'s (element count, dtype, torch tensor?, out of place?), the same on every rank."""
    rng = np.random.default_rng(it)
    n = (
        int(rng.choice([0, 1, p - 1, p + 1, 97, 4099]))
        if rng.random() < 0.2
        else int(np.exp(rng.uniform(0, np.log(MAX_ELEMENTS))))
    )
    return n, (np.float32, np.float64)[it % 2], it % 5 == 0, it % 3 == 0


def data(it: int, rank: int, n: int, dtype: type) -> np.ndarray:
    """Rank ``rank``'s integer-valued input of iteration ``it`` (sums are exact)."""
    return np.random.default_rng([it, rank]).integers(-64, 64, size=n).astype(dtype)


def one(algo: str, it: int, ctx: Context) -> str | None:
    """Iteration ``it`` of ``algo``: the all-reduce and its check; a failure description or None."""
    n, dtype, as_tensor, out_of_place = case(it)
    mine = data(it, r, n, dtype)
    want = sum((data(it, q, n, dtype) for q in range(p)), np.zeros(n, dtype))
    if out_of_place:
        got = np.empty_like(mine)
        allreduce(mine, algo, ctx, out=got)
    elif as_tensor:
        tensor = torch.from_numpy(mine)
        allreduce(tensor, algo, ctx)
        got = tensor.numpy()
    else:
        got = mine
        allreduce(got, algo, ctx)
    if not np.array_equal(got, want):
        return f"{algo} iteration {it} (n={n}, {np.dtype(dtype).name}): {int(np.count_nonzero(got != want))} wrong"
    return None


failures: list[str] = []
with Context(comm, CommParams(timeout_s=120, colors=2, chunk_bytes=64 << 10)) as ctx:
    for algo in algos:
        for warm in range(20):  # scratch buffers, sub-communicators, persistent requests: made once, here
            one(algo, 10**6 + warm, ctx)
        before = rss_bytes()
        t0 = time.perf_counter()
        wrong = [f for f in (one(algo, it, ctx) for it in range(iters)) if f]
        seconds = time.perf_counter() - t0
        after = rss_bytes()
        growth = max(comm.allgather((after - before) / before))
        failures += wrong[:5]
        if growth > 0.10:
            failures.append(f"{algo}: RSS grew {growth:.1%} over {iters} all-reduces (limit 10%)")
        wrong_total = comm.allreduce(len(wrong))
        if r == 0:
            print(
                f"{algo}: {iters} all-reduces in {seconds:.1f} s, wrong {wrong_total}, "
                f"RSS {before / 2**20:.0f} -> {after / 2**20:.0f} MiB (max growth over ranks {growth:+.1%})",
                flush=True,
            )
all_failures = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in all_failures for f in fs]
    print("\n".join(flat) if flat else f"OK {p} ranks, {iters} all-reduces each: {', '.join(algos)}")
    sys.exit(1 if flat else 0)
