"""One registry of all-reduce algorithms and the one ``allreduce`` call training uses.

An algorithm is a function ``fn(buf, comm)`` that sums the 1-D contiguous
NumPy array ``buf`` over ``comm`` in place, leaving the same bits on every
rank. Torch CPU tensors are passed as zero-copy NumPy views.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from scalerepro.errors import UserError

Algorithm = Callable[[np.ndarray, MPI.Intracomm], None]
_ALGORITHMS: dict[str, Algorithm] = {}


def register(name: str) -> Callable[[Algorithm], Algorithm]:
    """Decorator: make ``fn`` available as ``allreduce(..., algo=name)``."""

    def wrap(fn: Algorithm) -> Algorithm:
        if name in _ALGORITHMS:
            raise RuntimeError(f"all-reduce algorithm {name!r} registered twice")
        _ALGORITHMS[name] = fn
        return fn

    return wrap


def names() -> list[str]:
    """Registered algorithm names, sorted."""
    _load_builtin()
    return sorted(_ALGORITHMS)


def get(name: str) -> Algorithm:
    """The algorithm called ``name``; the error lists the known ones."""
    _load_builtin()
    try:
        return _ALGORITHMS[name]
    except KeyError:
        raise UserError(f"unknown all-reduce algorithm {name!r}; choose one of: {', '.join(sorted(_ALGORITHMS))}") from None


def _load_builtin() -> None:
    """Import the built-in algorithm modules (each registers itself)."""
    from scalerepro.comm import native, ring  # noqa: F401


def as_array(buf: Any) -> np.ndarray:
    """A writable 1-D NumPy view of ``buf`` (NumPy array or contiguous torch CPU tensor), no copy."""
    if isinstance(buf, np.ndarray):
        arr = buf
    elif hasattr(buf, "detach") and hasattr(buf, "is_contiguous"):
        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise UserError("allreduce needs a contiguous CPU tensor; call .contiguous().cpu() first")
        arr = buf.detach().numpy()
    else:
        raise UserError(f"allreduce takes a NumPy array or a torch tensor, not {type(buf).__name__}")
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise UserError("allreduce needs a writable C-contiguous buffer")
    return arr.reshape(-1)


def allreduce(buf: Any, algo: str = "native", comm: MPI.Intracomm | None = None) -> Any:
    """Sum ``buf`` over ``comm`` (default COMM_WORLD) in place with algorithm ``algo``; return ``buf``."""
    fn = get(algo)
    fn(as_array(buf), comm if comm is not None else MPI.COMM_WORLD)
    return buf
