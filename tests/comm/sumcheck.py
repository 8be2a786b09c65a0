"""The float check the MPI check scripts share: a sum within rounding of the float64 reference, the same bits on every
rank (imported by its siblings run as scripts under mpiexec)."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

EPS = {np.float32: np.finfo(np.float32).eps, np.float64: np.finfo(np.float64).eps}


def sum_errors(comm: MPI.Intracomm, label: str, got: np.ndarray, data: np.ndarray) -> list[str]:
    """What is wrong with ``got`` as the sum over ranks of ``data``: beyond (p-1) eps sum|x|, or bits that differ."""
    p = comm.size
    parts = np.stack(comm.allgather(data.astype(np.float64))) if data.size else np.zeros((p, 0))
    want = parts.sum(axis=0)
    bound = max(p - 1, 1) * EPS[data.dtype.type] * np.abs(parts).sum(axis=0) + 1e-300
    bad = int(np.count_nonzero(~(np.abs(got.astype(np.float64) - want) <= bound)))  # NaN counts as bad
    errors = [f"{label}: {bad} elements beyond float tolerance"] if bad else []
    if len(set(comm.allgather(got.tobytes()))) != 1:
        errors.append(f"{label}: ranks hold different bits")
    return errors
