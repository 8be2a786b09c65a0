"""Run under mpiexec: one rank misbehaves during an all-reduce; the job must end with a clear message.

argv: algorithm, mode ("late": rank 1 arrives after the timeout; "dead": rank 1 is killed), timeout seconds.
"""

from __future__ import annotations

import os
import signal
import sys
import time

import numpy as np
from mpi4py import MPI

from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.registry import allreduce

algo, mode, timeout = sys.argv[1], sys.argv[2], float(sys.argv[3])
comm = MPI.COMM_WORLD
buf = np.ones(1000, dtype=np.float32)
with Context(comm, CommParams(timeout_s=timeout)) as ctx:
    allreduce(buf, algo, ctx)  # one good collective first
    if comm.rank == 1:
        if mode == "dead":
            os.kill(os.getpid(), signal.SIGKILL)
        time.sleep(timeout * 20)
    allreduce(buf, algo, ctx)
print("finished", flush=True)
