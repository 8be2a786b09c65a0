"""Run under mpiexec: the bench harness's out-of-place and in-place measurements and their checks.

1. :func:`out_of_place` on random floats (both dtypes, several sizes, the algorithms' two ways:
   MPI_Allreduce(send, recv) for native, copy + in place for the rest, on both executors): the
   receive buffer holds the sum within float tolerance of a float64 reference, with the same bits on
   every rank, and the send buffer is bit for bit what it was.
2. :func:`measure_size`: one row per algorithm with both placements, all checked and right.
3. The checks can fail: an out-of-place call that scribbles on its send buffer, or that never writes
   its receive buffer, is counted in ``oop_wrong`` (and only there).

Prints ``OK <p> ranks`` on rank 0, or the failures (exit 1).
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
from mpi4py import MPI
from sumcheck import sum_errors

from scalerepro.comm import harness
from scalerepro.comm.algorithms import Selection, select
from scalerepro.comm.benchfile import total_wrong
from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.harness import COPY_OOP, NATIVE_OOP, SweepSpec, measure_size, oop_via, out_of_place

comm = MPI.COMM_WORLD
p, r = comm.size, comm.rank
failures: list[str] = []


def check_sum(label: str, got: np.ndarray, data: np.ndarray) -> None:
    """Same bits everywhere; within (p-1) eps sum|x| of the float64 reference."""
    failures.extend(sum_errors(comm, label, got, data))


# 1. random floats, out of place (and in place beside it)
for executor, algos in (("mpi", ("native", "ring", "rabenseifner", "multicolor", "auto")), ("torch", ("gloo", "ring"))):
    with Context(comm, CommParams(timeout_s=120, chunk_bytes=65536, executor=executor)) as ctx:
        for algo in algos:
            for dtype in (np.float32, np.float64):
                for n in sorted({0, 1, p, p + 1, 1000, 100_003}):
                    label = f"{algo} [{executor}] {dtype.__name__} n={n}"
                    data = np.random.default_rng([n, r, 7]).standard_normal(n).astype(dtype)
                    send, recv = data.copy(), np.full_like(data, np.nan)
                    chosen = select(algo, "cpu", executor)
                    way = oop_via(ctx, recv, chosen)
                    want = {"native": NATIVE_OOP, "auto": way}.get(algo, COPY_OOP)  # auto: its choice's way
                    if way != want:
                        failures.append(f"{label}: out of place via {way}")
                    if out_of_place(send, recv, chosen, ctx) is not recv:
                        failures.append(f"{label}: out_of_place did not return the receive buffer")
                    check_sum(label + " out of place", recv, data)
                    if send.tobytes() != data.tobytes():
                        failures.append(f"{label}: out of place changed the send buffer")
                    inplace = data.copy()
                    harness.allreduce(inplace, chosen, ctx)
                    check_sum(label + " in place", inplace, data)


# 2. the harness's rows: both placements, checked
spec = SweepSpec((select("native"), select("ring")), 8, 4096, warmup=1, iters=3, rounds=2)
with Context(comm, CommParams(timeout_s=120)) as ctx:
    for nbytes in (8, 4096):
        for row in measure_size(ctx, spec.algorithms, nbytes, spec):
            label = f"{row['algorithm']} {nbytes} B"
            for prefix in ("", "oop_"):
                if row[prefix + "wrong"] != 0 or not row[prefix + "time_us"] > 0:
                    failures.append(f"{label}: {prefix}wrong={row[prefix + 'wrong']} {prefix}time_us")
                if row[prefix + "busbw_GBps"] != row[prefix + "algbw_GBps"] * harness.bus_factor(p):
                    failures.append(f"{label}: {prefix}busbw is not algbw x 2(p-1)/p")
            want = NATIVE_OOP if row["algorithm"] == "native" else COPY_OOP
            if row["oop_via"] != want:
                failures.append(f"{label}: oop_via {row['oop_via']}")

    # 3. the out-of-place check catches a corrupted send buffer and an unwritten receive buffer
    honest = harness.out_of_place
    count = 1024 // 4

    def scribbles(send: Any, recv: Any, algo: Selection, ctx: Context) -> Any:
        """The sum, but one send element (this rank's first) overwritten afterwards."""
        honest(send, recv, algo, ctx)
        send[0] = -1.0
        return recv

    def forgets(_send: Any, recv: Any, _algo: Selection, _ctx: Context) -> Any:
        """Nothing written: the receive buffer keeps whatever it held."""
        return recv

    one = SweepSpec((select("ring"),), 1024, 1024, warmup=1, iters=4, rounds=2)
    for fake, per_iteration in ((scribbles, p), (forgets, p * count)):
        harness.out_of_place = fake  # the fault under test, undone below
        try:
            (row,) = measure_size(ctx, one.algorithms, 1024, one)
        finally:
            harness.out_of_place = honest
        if row["oop_wrong"] != per_iteration * row["iters"] or row["wrong"] != 0:
            failures.append(
                f"{fake.__name__}: oop_wrong={row['oop_wrong']} (want {per_iteration * row['iters']}), "
                f"wrong={row['wrong']} (want 0)"
            )
        if total_wrong([row]) != row["oop_wrong"]:
            failures.append(f"{fake.__name__}: total_wrong leaves out oop_wrong")

all_failures = comm.gather(failures, root=0)
if r == 0:
    flat = [f for fs in all_failures for f in fs]
    print("\n".join(flat[:50]) if flat else f"OK {p} ranks")
    sys.exit(1 if flat else 0)
