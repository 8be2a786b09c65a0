"""All-reduce: algorithms as schedules (one module each), run by the MPI or the torch.distributed executor.

``from scalerepro.comm import allreduce`` is the package's face. It is
loaded on first use, so importing ``scalerepro.comm.shapes`` (as config
validation does) starts neither MPI nor torch.
"""

from __future__ import annotations

from typing import Any

__all__ = ["allreduce"]


def __getattr__(name: str) -> Any:
    """``allreduce``, imported on first access."""
    if name == "allreduce":
        from scalerepro.comm.registry import allreduce

        return allreduce
    raise AttributeError(f"module 'scalerepro.comm' has no attribute {name!r}")
