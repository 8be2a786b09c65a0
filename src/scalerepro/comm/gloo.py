"""``gloo``: torch.distributed's all_reduce on the gloo backend (PyTorch DDP's CPU default), a peer.

The process group is set up once per context over TCP, rank 0's host and
a free port broadcast through MPI, with ``comm.timeout_s`` as its timeout.
NumPy buffers are handed over as zero-copy tensors.
"""

from __future__ import annotations

import datetime
import os
import socket

from typing import Any

import numpy as np

from scalerepro.comm.context import Context
from scalerepro.comm.registry import register
from scalerepro.errors import UserError


def _free_port() -> int:
    """A TCP port free on this host right now."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def process_group(ctx: Context, backend: str = "gloo") -> Any:
    """A torch.distributed group over the context's ranks on ``backend`` (gloo, or nccl for CUDA), made once."""
    import torch.distributed as dist  # imported here: torch in the process slows MPI's small messages

    def make() -> tuple[str, Any]:
        host = os.environ.get("SCALEREPRO_GLOO_HOST") or socket.gethostname()
        addr, port = ctx.comm.bcast((host, _free_port()) if ctx.rank == 0 else None, root=0)
        timeout = datetime.timedelta(seconds=ctx.params.timeout_s)
        if dist.is_initialized():
            raise UserError(f"torch.distributed is already initialised in this process; {backend} makes its own group")
        dist.init_process_group(backend, init_method=f"tcp://{addr}:{port}", rank=ctx.rank, world_size=ctx.size,
                                timeout=timeout)
        return backend, dist.group.WORLD

    made, group = ctx.cached("torch-group", make)
    if made != backend:
        raise UserError(f"this context already has a torch.distributed {made} group; {backend} needs its own context")
    return group


@register("gloo")
def gloo_allreduce(buf: np.ndarray, ctx: Context) -> None:
    """In-place torch.distributed all_reduce (SUM) with gloo."""
    if ctx.size == 1:
        return
    import torch
    import torch.distributed as dist

    dist.all_reduce(torch.from_numpy(buf), op=dist.ReduceOp.SUM, group=process_group(ctx))
