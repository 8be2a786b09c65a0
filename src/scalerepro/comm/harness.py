"""The one benchmark harness every algorithm runs under (as nccl-tests does).

Per size and algorithm, as nccl-tests' ``all_reduce_perf``: an
**out-of-place** measurement (the sum lands in a separate receive buffer,
the send buffer is left untouched) and an **in-place** one (the buffer is
summed where it lies). Each: warm-up, then timed iterations (``iters``,
more for fast sizes until the loop spans ``min_time_s``, as OSU's
benchmarks give small messages more iterations), each after a barrier,
every algorithm's two placements interleaved in ``rounds``; a rank's time
is its mean, and t is the maximum over ranks (on a GPU, each iteration
ends when the device has finished). algbw = bytes / t, busbw = algbw *
2(p-1)/p.

How out-of-place runs (:func:`out_of_place`, the registry's ``out=``):
``native`` on host buffers calls MPI_Allreduce with distinct send and
receive buffers (what the MPI library itself offers), and every other
algorithm, torch's collectives (gloo, nccl) and host-staged GPU buffers
included, copies the send buffer into the receive buffer and then sums
that in place, the copy inside the timed region: that is what a framework
doing out-of-place on top of an in-place algorithm pays. Each row records
which (``oop_via``).

Each timed result is checked against the exact sum
(:mod:`scalerepro.comm.buffers`) unless checking is off; out of place the
check also counts the elements of the send buffer that changed, and the
receive buffer is zeroed before each iteration (zero is no valid sum), so
a call that leaves it alone is caught. Every row records the executor and
the schedule used; the record and its rows are the bench file
(:mod:`scalerepro.comm.benchfile`), printed as a table for people by
:mod:`scalerepro.comm.benchtable`.
"""

from __future__ import annotations

import itertools
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any, cast

import numpy as np
from mpi4py import MPI

from scalerepro.comm.algorithms import Selection
from scalerepro.comm.benchfile import FORMAT, Row, averages, compare
from scalerepro.comm.benchtable import HEADER, format_comparison, format_footer, format_row
from scalerepro.comm.buffers import DTYPES, fill, finish, make_buffer, poison, send_changed, wrong_elements
from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import allreduce, library_out_of_place, resolve
from scalerepro.errors import UserError
from scalerepro.mpi import library_version
from scalerepro.oversubscription import node_cores
from scalerepro.provenance import record


@dataclass(frozen=True)
class SweepSpec:
    """What to measure: the algorithms, each resolved once by the command (on ``device``), and how."""

    algorithms: tuple[Selection, ...]
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


def bus_factor(world: int) -> float:
    """busbw / algbw for all-reduce: 2(p-1)/p."""
    return 2.0 * (world - 1) / world if world > 1 else 0.0


NATIVE_OOP = "MPI_Allreduce(send, recv)"  # oop_via: the MPI library's own out-of-place all-reduce
COPY_OOP = "copy + in place"  # oop_via: send copied into recv, then recv summed in place (copy timed)


def oop_via(ctx: Context, recv: Any, algo: Selection) -> str:
    """How :func:`out_of_place` runs ``algo`` on a buffer like ``recv``: :data:`NATIVE_OOP` or :data:`COPY_OOP`."""
    return NATIVE_OOP if library_out_of_place(resolve(recv, algo, ctx), recv) else COPY_OOP


def out_of_place(send: Any, recv: Any, algo: Selection, ctx: Context) -> Any:
    """Sum ``send`` over ``ctx`` into ``recv`` with ``algo``, ``send`` untouched; returns ``recv`` (the registry's
    ``out=``: MPI_Allreduce(send, recv) for native on host buffers, else a copy summed in place, copy included)."""
    return allreduce(send, algo, ctx, out=recv)


@dataclass
class _Timing:
    """One algorithm's measurement in one placement at one size, filled round by round.

    In place ``send`` is None and ``buf`` is summed where it lies; out of
    place ``send`` is filled and ``buf`` receives the sum.
    """

    algo: Selection
    buf: Any
    send: Any
    iters: int
    times: list[float]
    wrong: int = 0

    def call(self, ctx: Context) -> None:
        """One all-reduce in this placement (what the clock times)."""
        if self.send is None:
            allreduce(self.buf, self.algo, ctx)
        else:
            out_of_place(self.send, self.buf, self.algo, ctx)

    def fill(self, rank: int, it: int) -> None:
        """This iteration's input (and, out of place, a zeroed receive buffer)."""
        if self.send is None:
            fill(self.buf, rank, it)
        else:
            fill(self.send, rank, it)
            poison(self.buf)

    def check(self, ctx: Context, it: int) -> int:
        """Wrong elements of the result, plus (out of place) the send buffer's changed elements."""
        wrong = wrong_elements(self.buf, ctx.size, it)
        return wrong if self.send is None else wrong + send_changed(self.send, ctx.rank, it)


def _warm(ctx: Context, algo: Selection, count: int, spec: SweepSpec) -> tuple[_Timing, _Timing]:
    """Warm ``algo`` up out of place and in place on fresh buffers; both get the same timed iterations.

    As in nccl-tests, two buffers: in place sums the out-of-place receive
    buffer (every iteration refills or zeroes it first). Every rank must run
    the same count: the ranks agree on the slowest rank's warm-up pace, the
    slower placement's.
    """
    device = _device(ctx, spec.device)
    send, recv = make_buffer(count, spec.dtype, device), make_buffer(count, spec.dtype, device)
    pair = (_Timing(algo, recv, send, 0, []), _Timing(algo, recv, None, 0, []))
    pace = 0.0
    for t in pair:
        warm = []
        for it in range(spec.warmup):
            t.fill(ctx.rank, it)
            t0 = time.perf_counter()
            t.call(ctx)
            finish(t.buf)
            warm.append(time.perf_counter() - t0)
        pace = max(pace, statistics.median(warm) if warm else 0.0)
    iters = timed_iterations(spec, ctx.comm.allreduce(pace, op=MPI.MAX))
    for t in pair:
        t.iters = iters
    return pair


def _time(ctx: Context, t: _Timing, n: int, spec: SweepSpec) -> None:
    """``n`` more timed iterations of ``t``, each after a barrier, checked unless checking is off."""
    for _ in range(n):
        it = len(t.times)
        t.fill(ctx.rank, it)
        finish(t.buf)
        ctx.comm.Barrier()
        t0 = time.perf_counter()
        t.call(ctx)
        finish(t.buf)
        t.times.append(time.perf_counter() - t0)
        if spec.check:
            t.wrong += t.check(ctx, it)


def measure_size(ctx: Context, algos: Iterable[Selection], nbytes: int, spec: SweepSpec) -> list[Row]:
    """One row per algorithm at ``nbytes`` (out of place and in place): timed iterations interleaved in rounds.

    Each measurement's iterations (two per algorithm: out of place, in
    place) are spread over ``spec.rounds`` rounds (round-robin over them,
    each round starting one further on, so none is always first after the
    others), so a burst of load from another job on a shared machine lands
    on all of them alike instead of on whichever ran at that moment.
    """
    count = nbytes // np.dtype(DTYPES[spec.dtype]).itemsize
    pairs = [_warm(ctx, algo, count, spec) for algo in algos]
    timings = [t for pair in pairs for t in pair]
    rounds = max(1, min(spec.rounds, min(t.iters for t in timings)))
    for k in range(rounds):
        for t in timings[k % len(timings) :] + timings[: k % len(timings)]:  # each round starts one further on
            _time(ctx, t, t.iters * (k + 1) // rounds - t.iters * k // rounds, spec)
    return [_row(ctx, oop, inplace, count, spec, rounds) for oop, inplace in pairs]


def round_means(times: list[float], rounds: int) -> list[float]:
    """The mean iteration time of each round, the rounds cut as :func:`measure_size` cuts them."""
    n = len(times)
    cuts = [n * k // rounds for k in range(rounds + 1)]
    return [statistics.fmean(times[a:b]) for a, b in itertools.pairwise(cuts) if b > a]


def _results(ctx: Context, t: _Timing, nbytes: int, spec: SweepSpec, rounds: int) -> dict[str, Any]:
    """One finished measurement: t = max over ranks of the mean iteration time, bandwidths, #wrong, and each
    round's time (max over ranks of the round's mean): the spread a comparison between algorithms reads."""
    comm = ctx.comm
    per_rank = comm.allgather(statistics.fmean(t.times))
    per_round = comm.allgather(round_means(t.times, rounds))
    worst = max(per_rank)
    algbw = nbytes / worst / 1e9 if worst > 0 else 0.0
    return {
        "time_us": worst * 1e6,
        "min_us": min(per_rank) * 1e6,
        "median_us": statistics.median(per_rank) * 1e6,
        "round_us": [max(r) * 1e6 for r in zip(*per_round, strict=True)],
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * bus_factor(comm.size),
        "wrong": comm.allreduce(t.wrong, op=MPI.SUM) if spec.check else None,
    }


def _row(ctx: Context, oop: _Timing, inplace: _Timing, count: int, spec: SweepSpec, rounds: int) -> Row:
    """One algorithm's row at one size (:class:`scalerepro.comm.benchfile.Row`)."""
    nbytes = count * np.dtype(DTYPES[spec.dtype]).itemsize
    used = resolve(inplace.buf, inplace.algo, ctx).record()
    row = {
        "algorithm": inplace.algo.name,
        "bytes": nbytes,
        "count": count,
        "dtype": spec.dtype,
        "iters": inplace.iters,
        "rounds": rounds,
        **_results(ctx, inplace, nbytes, spec, rounds),
        **{f"oop_{k}": v for k, v in _results(ctx, oop, nbytes, spec, rounds).items()},
        "oop_via": oop_via(ctx, oop.buf, oop.algo),
        "executor": used.pop("executor"),
        "schedule": used,
    }
    return cast(Row, row)


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


def sweep(ctx: Context, spec: SweepSpec, progress: bool = True) -> list[Row]:
    """Every size x algorithm, out of place and in place; rank 0 prints an nccl-tests style table to stderr
    as it goes (:data:`HEADER` and :func:`format_footer` are the caller's to print).

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
    finish(buf)


ENV_PREFIXES = ("OMP_", "SLURM_", "NCCL_")  # the settings a bench result records beside provenance's mpi_env


def benchmark(
    comm: MPI.Intracomm, params: CommParams, spec: SweepSpec, peers: list[str], emit: Callable[[str], None]
) -> dict[str, Any]:
    """The whole bench on ``comm``: header, sweep (``spec.threads`` 0: each rank's share of its node's cores),
    footer and comparisons through ``emit`` on rank 0; the bench record (provenance, placement, rows) for JSON."""
    names = [a.name for a in spec.algorithms]
    for peer in peers:
        if peer not in names:
            raise UserError(f"--compare {peer}: not among the benchmarked algorithms {names}; add it to --algos")

    def say(text: str) -> None:
        if comm.rank == 0:
            emit(text)

    say(f"# world size {comm.size}, {library_version()}, {spec.device} buffers, comm.executor={params.executor}")
    say(HEADER)
    with Context(comm, params) as ctx:
        nodes = ctx.nodes()
        placement = {
            "ranks_per_node": max(nodes.count(n) for n in nodes),
            "cores_per_node": min(comm.allgather(node_cores(os.environ))),
        }
        threads = spec.threads or max(1, placement["cores_per_node"] // placement["ranks_per_node"])
        spec = replace(spec, threads=threads)
        rows = sweep(ctx, spec)
    say(format_footer(rows))
    gamma = statistics.median(comm.allgather(reduction_cost(np.dtype(DTYPES[spec.dtype]))))
    ratios = {peer: compare(rows, peer) for peer in peers}
    for peer in peers:
        say(f"# ratios against {peer} (same run)\n{format_comparison(ratios[peer])}")
    return {
        "format": FORMAT,
        **record(comm),
        "world_size": comm.size,
        "nodes": list(nodes),
        "mpi_library": library_version(),
        "spec": spec.__dict__ | {"algorithms": names},
        "device": spec.device,
        **placement,
        "reduction_s_per_byte": gamma,
        "env": {k: v for k, v in os.environ.items() if k.startswith(ENV_PREFIXES)},
        "rows": rows,
        **averages(rows),  # the footer's avg_busbw_GBps (per algorithm) and out_of_bounds
        "comparisons": [c for peer in peers for c in ratios[peer]],
    }
