"""``nccl``: torch.distributed's all_reduce on NCCL, the GPU baseline the other algorithms are held to."""

from __future__ import annotations

from scalerepro.comm.schedule import Schedule, Spec, world_collective

NAME = "nccl"
EXECUTOR = "torch"
DEVICE = "cuda"  # NCCL sums GPU memory; a CPU buffer's counterpart is gloo


def schedule(spec: Spec) -> Schedule:
    """One NCCL all_reduce over every rank."""
    return world_collective(spec)
