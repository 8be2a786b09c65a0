"""The bench's buffers and their check: integer-valued data whose sum over any order is exact.

Rank r fills element i at iteration ``it`` with ((i + it) mod 13 + 1) x
(r + 1), so the sum over p ranks is that pattern times p(p+1)/2 whatever
order the additions ran in: :func:`wrong_elements` counts the elements off
it. Buffers are NumPy arrays on the CPU and torch tensors on a GPU (torch
is imported only for those).
"""

from __future__ import annotations

from typing import Any

import numpy as np

DTYPES = {"float32": np.float32, "float64": np.float64}


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


def send_changed(send: Any, rank: int, it: int) -> int:
    """Elements of an out-of-place send buffer that no longer hold what :func:`fill` put there."""
    return int((send != pattern(send, it) * (rank + 1)).sum())


def make_buffer(count: int, dtype: str, device: str) -> Any:
    """An uninitialised buffer: a NumPy array on the CPU, a torch tensor on ``device`` otherwise."""
    if device == "cpu":
        return np.empty(count, dtype=DTYPES[dtype])
    import torch

    return torch.empty(count, dtype=getattr(torch, dtype), device=device)


def poison(buf: Any) -> None:
    """Zero ``buf``: no valid sum of :func:`fill`'s data (every element is >= 1), so a skipped write shows."""
    if isinstance(buf, np.ndarray):
        buf.fill(0)
    else:
        buf.zero_()


def finish(buf: Any) -> None:
    """Wait for the device's queued work on ``buf`` (CUDA), so the clock sees the all-reduce end."""
    if not isinstance(buf, np.ndarray) and buf.device.type == "cuda":
        import torch

        torch.cuda.synchronize(buf.device)
