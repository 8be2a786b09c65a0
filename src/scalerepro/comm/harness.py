"""The one benchmark harness every algorithm runs under (as nccl-tests does).

Per size and algorithm: warm-up, then timed iterations (``iters``, more
for fast sizes until the loop spans ``min_time_s``, as OSU's benchmarks
give small messages more iterations), each after a barrier; a rank's time
is its mean, and t is the maximum over ranks.
algbw = bytes / t, busbw = algbw * 2(p-1)/p. Each timed result is checked
against the exact sum (integer-valued data) unless checking is off.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
from mpi4py import MPI

from scalerepro.comm.context import Context
from scalerepro.comm.registry import allreduce

DTYPES = {"float32": np.float32, "float64": np.float64}


@dataclass(frozen=True)
class SweepSpec:
    """What to measure."""

    algorithms: tuple[str, ...]
    min_bytes: int
    max_bytes: int
    dtype: str = "float32"
    warmup: int = 3
    iters: int = 20
    check: bool = True
    min_time_s: float = 0.0
    max_iters: int = 1000


def timed_iterations(spec: SweepSpec, warmup_s: float) -> int:
    """Iterations to time: ``iters``, more (<= max_iters) if that spans less than min_time_s at the warm-up's pace."""
    if spec.min_time_s <= 0 or warmup_s <= 0:
        return spec.iters
    return max(spec.iters, min(spec.max_iters, math.ceil(spec.min_time_s / warmup_s)))


def sizes(min_bytes: int, max_bytes: int) -> list[int]:
    """Message sizes by doubling from min_bytes up to max_bytes (inclusive)."""
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= 2
    return out


def fill(buf: np.ndarray, rank: int, it: int) -> None:
    """Integer-valued data that differs by rank, position and iteration (sums stay exact)."""
    idx = np.arange(buf.size, dtype=np.int64)
    buf[:] = ((idx + it) % 13 + 1) * (rank + 1)


def expected(count: int, world: int, it: int, dtype: Any) -> np.ndarray:
    """The exact all-reduce result of :func:`fill` over ``world`` ranks."""
    idx = np.arange(count, dtype=np.int64)
    return (((idx + it) % 13 + 1) * (world * (world + 1) // 2)).astype(dtype)


def bus_factor(world: int) -> float:
    """busbw / algbw for all-reduce: 2(p-1)/p."""
    return 2.0 * (world - 1) / world if world > 1 else 0.0


def measure(ctx: Context, algo: str, nbytes: int, spec: SweepSpec) -> dict[str, Any]:
    """One row: time statistics, bandwidths and the number of wrong elements."""
    comm = ctx.comm
    dtype = DTYPES[spec.dtype]
    count = nbytes // np.dtype(dtype).itemsize
    buf = np.empty(count, dtype=dtype)
    warm = []
    for it in range(spec.warmup):
        fill(buf, comm.rank, it)
        t0 = time.perf_counter()
        allreduce(buf, algo, ctx)
        warm.append(time.perf_counter() - t0)
    # every rank must run the same count: agree on the slowest rank's warm-up pace
    iters = timed_iterations(spec, comm.allreduce(statistics.median(warm) if warm else 0.0, op=MPI.MAX))
    times, wrong = [], 0
    for it in range(iters):
        fill(buf, comm.rank, it)
        comm.Barrier()
        t0 = time.perf_counter()
        allreduce(buf, algo, ctx)
        times.append(time.perf_counter() - t0)
        if spec.check:
            wrong += int(np.count_nonzero(buf != expected(count, comm.size, it, dtype)))
    mean = statistics.fmean(times)
    per_rank = comm.allgather(mean)
    t = max(per_rank)
    algbw = count * np.dtype(dtype).itemsize / t / 1e9 if t > 0 else 0.0
    return {
        "algorithm": algo,
        "bytes": count * np.dtype(dtype).itemsize,
        "count": count,
        "dtype": spec.dtype,
        "iters": iters,
        "time_us": t * 1e6,
        "min_us": min(per_rank) * 1e6,
        "median_us": statistics.median(per_rank) * 1e6,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * bus_factor(comm.size),
        "wrong": comm.allreduce(wrong, op=MPI.SUM) if spec.check else None,
    }


def reduction_cost(dtype: np.dtype, nbytes: int = 8 << 20, repeats: int = 5) -> float:
    """gamma: seconds per byte of the in-place add the algorithms use, median over repeats (this rank)."""
    a = np.ones(nbytes // dtype.itemsize, dtype=dtype)
    b = np.ones_like(a)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        a += b
        times.append(time.perf_counter() - t0)
    return statistics.median(times) / a.nbytes


def sweep(ctx: Context, spec: SweepSpec, progress: bool = True) -> list[dict[str, Any]]:
    """Every size x algorithm; rank 0 prints an nccl-tests style table to stderr as it goes.

    Sizes are the outer loop, so the algorithms compared at one size are
    measured back to back: drift on a shared machine (another job, a large
    free before) then moves them together instead of skewing their ratio.
    Every algorithm is set up first (see :func:`prepare`).
    """
    prepare(ctx, spec)
    rows = []
    for nbytes in sizes(spec.min_bytes, spec.max_bytes):
        for algo in spec.algorithms:
            row = measure(ctx, algo, nbytes, spec)
            rows.append(row)
            if progress and ctx.rank == 0:
                print(format_row(row), file=sys.stderr, flush=True)
    return rows


def prepare(ctx: Context, spec: SweepSpec) -> None:
    """One untimed call of every algorithm, so all are timed in the same process state.

    Setting up an algorithm can change the others' times: once the gloo
    process group exists, MPI_Allreduce and the ring at 8 KiB take ~1.6-2x
    longer here (its threads and sockets share the cores). Without this, the
    algorithms listed before gloo would be timed in a quieter process.
    """
    buf = np.zeros(max(1, ctx.size), dtype=DTYPES[spec.dtype])
    for algo in spec.algorithms:
        allreduce(buf, algo, ctx)


HEADER = f"{'algorithm':>12} {'size(B)':>11} {'count':>10} {'time(us)':>10} {'algbw(GB/s)':>11} {'busbw(GB/s)':>11} {'#wrong':>7}"


def format_row(row: dict[str, Any]) -> str:
    """One table line for people (analysis reads the JSON, never this)."""
    wrong = "N/A" if row["wrong"] is None else str(row["wrong"])
    return (
        f"{row['algorithm']:>12} {row['bytes']:>11} {row['count']:>10} {row['time_us']:>10.1f} "
        f"{row['algbw_GBps']:>11.3f} {row['busbw_GBps']:>11.3f} {wrong:>7}"
    )


def total_wrong(rows: Iterable[dict[str, Any]]) -> int:
    """Sum of #wrong over rows (unchecked rows count 0)."""
    return sum(r["wrong"] or 0 for r in rows)


def compare(rows: list[dict[str, Any]], peer: str) -> list[dict[str, Any]]:
    """Per algorithm and size: busbw and time as ratios to ``peer`` measured in the same sweep."""
    ref = {r["bytes"]: r for r in rows if r["algorithm"] == peer}
    out = []
    for r in rows:
        base = ref.get(r["bytes"])
        if r["algorithm"] == peer or base is None:
            continue
        out.append({
            "algorithm": r["algorithm"], "peer": peer, "bytes": r["bytes"],
            "busbw_ratio": r["busbw_GBps"] / base["busbw_GBps"] if base["busbw_GBps"] else None,
            "time_ratio": r["time_us"] / base["time_us"] if base["time_us"] else None,
        })
    return out


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The ratio table for people: busbw / peer's (higher is better), time / peer's (lower is better)."""
    lines = [f"{'algorithm':>12} {'vs':>8} {'size(B)':>11} {'busbw ratio':>12} {'time ratio':>11}"]
    for r in rows:
        bw = "N/A" if r["busbw_ratio"] is None else f"{r['busbw_ratio']:.2f}x"
        tr = "N/A" if r["time_ratio"] is None else f"{r['time_ratio']:.2f}x"
        lines.append(f"{r['algorithm']:>12} {r['peer']:>8} {r['bytes']:>11} {bw:>12} {tr:>11}")
    return "\n".join(lines)
