"""``native``: the MPI library's own MPI_Allreduce (its algorithm choice), the reference peer."""

from __future__ import annotations

import numpy as np
from mpi4py import MPI

from scalerepro.comm.context import Context
from scalerepro.comm.registry import register


@register("native")
def native_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place MPI_Allreduce with MPI_SUM."""
    ctx.comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.SUM)
