"""One registry of all-reduce algorithms and the one ``allreduce`` call training uses.

An algorithm is a function ``fn(buf, ctx)`` that sums the 1-D contiguous
NumPy array ``buf`` over the :class:`~scalerepro.comm.context.Context` in
place, leaving the same bits on every rank. Torch CPU tensors are passed
as zero-copy NumPy views. Every call runs under the context's watchdog, so
a dead or absent rank ends the job with a message instead of a hang.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
from mpi4py import MPI

from scalerepro.comm.context import CommParams, Context
from scalerepro.errors import UserError

Algorithm = Callable[[np.ndarray, Context], None]
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
    """Import the built-in algorithm modules once (each registers itself)."""
    if "native" in _ALGORITHMS:
        return
    from scalerepro.comm import (  # noqa: F401
        gloo,
        hierarchical,
        multicolor,
        multiring,
        native,
        rabenseifner,
        ring,
        torus2d,
        torus2d_3phase,
    )


_TORCH_DTYPES = ("torch.float32", "torch.float64", "torch.int32", "torch.int64")


def as_array(buf: Any) -> np.ndarray:
    """A writable 1-D NumPy view of ``buf`` (NumPy array or contiguous torch CPU tensor), no copy."""
    if isinstance(buf, np.ndarray):
        arr = buf
    elif hasattr(buf, "detach") and hasattr(buf, "is_contiguous"):
        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise UserError("allreduce needs a contiguous CPU tensor; call .contiguous().cpu() first")
        if str(buf.dtype) not in _TORCH_DTYPES:
            raise UserError(f"allreduce supports {', '.join(_TORCH_DTYPES)} tensors, not {buf.dtype} (NumPy, which the "
                            f"algorithms reduce with, has no such type); all-reduce a float32 copy: t.float()")
        arr = buf.detach().numpy()
    else:
        raise UserError(f"allreduce takes a NumPy array or a torch tensor, not {type(buf).__name__}")
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise UserError("allreduce needs a writable C-contiguous buffer")
    return arr.reshape(-1)


def allreduce(
    buf: Any,
    algo: str = "native",
    comm: Context | MPI.Intracomm | None = None,
    out: Any = None,
    params: CommParams | None = None,
) -> Any:
    """Sum ``buf`` over ``comm`` with algorithm ``algo``: in place, or into ``out`` (``buf`` untouched).

    ``comm`` is a Context (reused: sub-communicators and the watchdog are made
    once) or a plain communicator (default COMM_WORLD), wrapped for this call.
    """
    fn = get(algo)
    target = buf
    if out is not None:
        dst, src = as_array(out), as_array(buf)
        if dst.shape != src.shape or dst.dtype != src.dtype:
            raise UserError(f"allreduce out= must match the input: {dst.dtype}[{dst.size}] vs {src.dtype}[{src.size}]")
        np.copyto(dst, src)
        target = out
    arr = as_array(target)
    ctx = comm if isinstance(comm, Context) else Context(comm, params)
    dog = ctx.watchdog()
    try:
        if dog is not None:
            dog.arm(f"{algo} all-reduce")
        fn(arr, ctx)
    finally:
        if dog is not None:
            dog.disarm()  # also when fn raised: a stale deadline must not abort a later, healthy job
        if ctx is not comm:
            ctx.close()
    return target
