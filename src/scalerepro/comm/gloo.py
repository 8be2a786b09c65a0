"""``gloo``: torch.distributed's all_reduce on the gloo backend (PyTorch DDP's CPU default), a peer on the CPU."""

from __future__ import annotations

from scalerepro.comm.schedule import Schedule, Spec, world_collective

NAME = "gloo"
EXECUTOR = "torch"
DEVICE = "cpu"  # gloo sums host memory; a CUDA buffer's counterpart is nccl


def schedule(spec: Spec) -> Schedule:
    """One gloo all_reduce over every rank."""
    return world_collective(spec)
