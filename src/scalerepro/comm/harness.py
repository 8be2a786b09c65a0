"""The one benchmark harness every algorithm runs under (as nccl-tests does).

Per size and algorithm: warm-up, then timed iterations (``iters``, more
for fast sizes until the loop spans ``min_time_s``, as OSU's benchmarks
give small messages more iterations), each after a barrier, the
algorithms' iterations interleaved in ``rounds``; a rank's time is its mean, and t is the maximum over ranks (on a GPU, each iteration
ends when the device has finished). algbw = bytes / t, busbw = algbw *
2(p-1)/p. Each timed result is checked against the exact sum
(integer-valued data, so any summation order is exact) unless checking is
off. Buffers are NumPy arrays on the CPU and torch tensors on a GPU
(``device``); every row records the executor and the schedule used.
"""

from __future__ import annotations

import math
import statistics
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from scalerepro.comm.context import Context
from scalerepro.comm.registry import allreduce, resolve
from scalerepro.errors import UserError

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
    device: str = "cpu"
    threads: int = 0  # torch intra-op threads per rank (its share of the node's cores); 0: torch's default
    rounds: int = 5  # each size's timed iterations, interleaved over the algorithms in this many rounds


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


def fill(buf: Any, rank: int, it: int) -> None:
    """Integer-valued data that differs by rank, position and iteration (sums stay exact)."""
    buf[:] = pattern(buf, it) * (rank + 1)


def pattern(buf: Any, it: int) -> Any:
    """(index + it) mod 13 + 1, as ``buf``'s kind (NumPy, or a tensor on its device)."""
    if isinstance(buf, np.ndarray):
        return ((np.arange(buf.size, dtype=np.int64) + it) % 13 + 1).astype(buf.dtype)
    import torch

    return ((torch.arange(buf.numel(), device=buf.device) + it) % 13 + 1).to(buf.dtype)


def expected(count: int, world: int, it: int, dtype: Any) -> np.ndarray:
    """The exact all-reduce result of :func:`fill` over ``world`` ranks."""
    idx = np.arange(count, dtype=np.int64)
    return (((idx + it) % 13 + 1) * (world * (world + 1) // 2)).astype(dtype)


def wrong_elements(buf: Any, world: int, it: int) -> int:
    """Elements of ``buf`` that differ from the exact sum of :func:`fill` over ``world`` ranks."""
    want = pattern(buf, it) * (world * (world + 1) // 2)
    return int((buf != want).sum())


def make_buffer(count: int, dtype: str, device: str) -> Any:
    """An uninitialised buffer: a NumPy array on the CPU, a torch tensor on ``device`` otherwise."""
    if device == "cpu":
        return np.empty(count, dtype=DTYPES[dtype])
    import torch

    return torch.empty(count, dtype=getattr(torch, dtype), device=device)


def _finish(buf: Any) -> None:
    """Wait for the device's queued work on ``buf`` (CUDA), so the clock sees the all-reduce end."""
    if not isinstance(buf, np.ndarray) and buf.device.type == "cuda":
        import torch

        torch.cuda.synchronize(buf.device)


def bus_factor(world: int) -> float:
    """busbw / algbw for all-reduce: 2(p-1)/p."""
    return 2.0 * (world - 1) / world if world > 1 else 0.0


@dataclass
class _Timing:
    """One algorithm's measurement at one size, filled round by round."""

    algo: str
    buf: Any
    iters: int
    times: list[float]
    wrong: int = 0


def _warm(ctx: Context, algo: str, count: int, spec: SweepSpec) -> _Timing:
    """Warm ``algo`` up on a fresh buffer and settle its timed iterations (every rank the same number)."""
    buf = make_buffer(count, spec.dtype, _device(ctx, spec.device))
    warm = []
    for it in range(spec.warmup):
        fill(buf, ctx.rank, it)
        t0 = time.perf_counter()
        allreduce(buf, algo, ctx)
        _finish(buf)
        warm.append(time.perf_counter() - t0)
    # every rank must run the same count: agree on the slowest rank's warm-up pace
    pace = ctx.comm.allreduce(statistics.median(warm) if warm else 0.0, op=MPI.MAX)
    return _Timing(algo, buf, timed_iterations(spec, pace), [])


def _time(ctx: Context, t: _Timing, n: int, spec: SweepSpec) -> None:
    """``n`` more timed iterations of ``t.algo``, each after a barrier, checked unless checking is off."""
    for _ in range(n):
        it = len(t.times)
        fill(t.buf, ctx.rank, it)
        _finish(t.buf)
        ctx.comm.Barrier()
        t0 = time.perf_counter()
        allreduce(t.buf, t.algo, ctx)
        _finish(t.buf)
        t.times.append(time.perf_counter() - t0)
        if spec.check:
            t.wrong += wrong_elements(t.buf, ctx.size, it)


def measure_size(ctx: Context, algos: Iterable[str], nbytes: int, spec: SweepSpec) -> list[dict[str, Any]]:
    """One row per algorithm at ``nbytes``: their timed iterations interleaved in ``spec.rounds`` rounds.

    Each algorithm's iterations are spread over the rounds (round-robin over
    the algorithms, each round starting one algorithm further on, so none is
    always first after the others), so a burst of load from another job on a
    shared machine lands on all of them alike instead of on whichever ran at
    that moment.
    """
    count = nbytes // np.dtype(DTYPES[spec.dtype]).itemsize
    timings = [_warm(ctx, algo, count, spec) for algo in algos]
    rounds = max(1, min(spec.rounds, min(t.iters for t in timings)))
    for k in range(rounds):
        for t in timings[k % len(timings) :] + timings[: k % len(timings)]:  # each round starts one further on
            _time(ctx, t, t.iters * (k + 1) // rounds - t.iters * k // rounds, spec)
    return [_row(ctx, t, count, spec) for t in timings]


def _row(ctx: Context, t: _Timing, count: int, spec: SweepSpec) -> dict[str, Any]:
    """The row of one finished measurement: t = max over ranks of the mean iteration time."""
    comm = ctx.comm
    itemsize = np.dtype(DTYPES[spec.dtype]).itemsize
    per_rank = comm.allgather(statistics.fmean(t.times))
    worst = max(per_rank)
    algbw = count * itemsize / worst / 1e9 if worst > 0 else 0.0
    used = resolve(t.buf, t.algo, ctx).record()
    return {
        "algorithm": t.algo,
        "bytes": count * itemsize,
        "count": count,
        "dtype": spec.dtype,
        "iters": t.iters,
        "time_us": worst * 1e6,
        "min_us": min(per_rank) * 1e6,
        "median_us": statistics.median(per_rank) * 1e6,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * bus_factor(comm.size),
        "wrong": comm.allreduce(t.wrong, op=MPI.SUM) if spec.check else None,
        "executor": used.pop("executor"),
        "schedule": used,
    }


def _device(ctx: Context, device: str) -> str:
    """``cpu``, or this rank's GPU (``cuda:i``, i = node-local rank modulo the visible GPUs)."""
    if device == "cpu":
        return device
    import torch

    if not torch.cuda.is_available():
        raise UserError("bench --device cuda: torch sees no GPU here; use --device cpu")
    local = ctx.nodes()[: ctx.rank].count(ctx.nodes()[ctx.rank]) if ctx.size > 1 else 0
    return f"cuda:{local % torch.cuda.device_count()}"


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

    Sizes are the outer loop, and at each size the algorithms' timed
    iterations are interleaved in ``rounds``: drift on a shared machine
    (another job, a large free before) then moves them together instead of
    skewing their ratio.
    Every algorithm is set up first (see :func:`prepare`).
    """
    prepare(ctx, spec)
    if spec.threads and "torch" in sys.modules:  # the torch executor's adds: each rank its share of the cores
        sys.modules["torch"].set_num_threads(spec.threads)
    rows = []
    for nbytes in sizes(spec.min_bytes, spec.max_bytes):
        for row in measure_size(ctx, spec.algorithms, nbytes, spec):
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
    buf = make_buffer(max(1, ctx.size), spec.dtype, _device(ctx, spec.device))
    for algo in spec.algorithms:
        allreduce(buf, algo, ctx)
    _finish(buf)


HEADER = (
    f"{'algorithm':>14} {'size(B)':>11} {'count':>10} {'time(us)':>10} {'algbw(GB/s)':>11} {'busbw(GB/s)':>11} "
    f"{'#wrong':>7}  schedule"
)


def format_row(row: dict[str, Any]) -> str:
    """One table line for people (analysis reads the JSON, never this)."""
    wrong = "N/A" if row["wrong"] is None else str(row["wrong"])
    return (
        f"{row['algorithm']:>14} {row['bytes']:>11} {row['count']:>10} {row['time_us']:>10.1f} "
        f"{row['algbw_GBps']:>11.3f} {row['busbw_GBps']:>11.3f} {wrong:>7}  {describe(row)}"
    )


def describe(row: dict[str, Any]) -> str:
    """The schedule that ran, briefly: executor, what it ran as, colors, grid."""
    s = row["schedule"]
    parts = [row["executor"] + (" (host-staged)" if s.get("host_staged") else "")]
    if s["algorithm"] != row["algorithm"]:
        parts.append(f"chose {s['algorithm']}")
    parts += [f"as {s['as']}"] if "as" in s else []
    parts += [f"{s['colors']} colors"] if "colors" in s else []
    parts += ["grid " + "x".join(map(str, s["grid"]))] if "grid" in s else []
    return ", ".join(parts)


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
        out.append(
            {
                "algorithm": r["algorithm"],
                "peer": peer,
                "bytes": r["bytes"],
                "busbw_ratio": r["busbw_GBps"] / base["busbw_GBps"] if base["busbw_GBps"] else None,
                "time_ratio": r["time_us"] / base["time_us"] if base["time_us"] else None,
            }
        )
    return out


def format_comparison(rows: list[dict[str, Any]]) -> str:
    """The ratio table for people: busbw / peer's (higher is better), time / peer's (lower is better)."""
    lines = [f"{'algorithm':>12} {'vs':>8} {'size(B)':>11} {'busbw ratio':>12} {'time ratio':>11}"]
    for r in rows:
        bw = "N/A" if r["busbw_ratio"] is None else f"{r['busbw_ratio']:.2f}x"
        tr = "N/A" if r["time_ratio"] is None else f"{r['time_ratio']:.2f}x"
        lines.append(f"{r['algorithm']:>12} {r['peer']:>8} {r['bytes']:>11} {bw:>12} {tr:>11}")
    return "\n".join(lines)
