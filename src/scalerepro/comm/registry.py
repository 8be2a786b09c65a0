"""The one ``allreduce`` call that training, batch norm and the bench use: algorithm, executor, watchdog.

The algorithms are the table in :mod:`scalerepro.comm.algorithms`;
``auto`` picks one of them per message size (:mod:`scalerepro.comm.auto`).
``allreduce`` takes the :class:`~scalerepro.comm.algorithms.Selection` a
command resolved once, or a name, which it resolves here once per context
and device.

An executor runs the schedule: ``mpi`` on NumPy arrays and CPU tensors
(zero-copy views), ``torch`` on tensors on their own device. The selection
carries which (:func:`scalerepro.comm.algorithms.executor_for`:
``comm.executor``, and for ``auto`` ``torch`` for CUDA tensors, ``mpi``
otherwise); the MPI executor given a CUDA tensor goes through one pinned
host copy, as MPI libraries without GPU support do. Every call runs under the context's
watchdog, so a dead or absent rank ends the job with a message instead of
a hang.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from mpi4py import MPI

from scalerepro.comm import auto, gloo, mpi_executor, native, nccl, torch_executor
from scalerepro.comm.algorithms import Selection, get, names, select
from scalerepro.comm.context import CommParams, Context
from scalerepro.comm.schedule import Schedule, Spec, executor_chunk
from scalerepro.errors import UserError

__all__ = ["allreduce", "as_array", "get", "library_sum", "names", "resolve", "select"]


_NUMPY_DTYPES = ("float32", "float64", "int32", "int64")


def _is_tensor(buf: Any) -> bool:
    """Whether ``buf`` is a torch tensor (without importing torch)."""
    return hasattr(buf, "detach") and hasattr(buf, "is_contiguous")


def device_of(buf: Any) -> str:
    """``cpu`` or ``cuda`` (the device kind of a tensor; NumPy arrays are ``cpu``)."""
    return str(buf.device.type) if _is_tensor(buf) else "cpu"


def as_array(buf: Any) -> np.ndarray:
    """A writable 1-D NumPy view of ``buf`` (NumPy array or contiguous torch CPU tensor), no copy."""
    if isinstance(buf, np.ndarray):
        arr = buf
    elif _is_tensor(buf):
        if buf.device.type != "cpu" or not buf.is_contiguous():
            raise UserError("the mpi executor needs a contiguous CPU tensor; call .contiguous().cpu() first")
        name = str(buf.dtype).removeprefix("torch.")
        if name not in _NUMPY_DTYPES:
            raise UserError(
                f"the mpi executor sums {', '.join(_NUMPY_DTYPES)} tensors, not {buf.dtype} (NumPy, "
                f"which it reduces with, has no such type); set comm.executor=torch, or all-reduce a "
                f"float32 copy: t.float()"
            )
        arr = buf.detach().numpy()
    else:
        raise UserError(f"allreduce takes a NumPy array or a torch tensor, not {type(buf).__name__}")
    if not arr.flags.c_contiguous or not arr.flags.writeable:
        raise UserError("allreduce needs a writable C-contiguous buffer")
    return arr.reshape(-1)


def as_tensor(buf: Any) -> Any:
    """A 1-D torch view of ``buf`` (a tensor, or a NumPy array shared zero-copy)."""
    import torch

    t = buf if _is_tensor(buf) else torch.from_numpy(as_array(buf))
    if not t.is_contiguous():
        raise UserError("allreduce needs a contiguous tensor; call .contiguous() first")
    return t.detach().view(-1)


@dataclass(frozen=True)
class Resolved:
    """What one all-reduce runs: the algorithm (``auto``'s choice), the executor, and its schedule."""

    algorithm: str
    executor: str
    schedule: Schedule
    host_staged: bool = False

    def record(self) -> dict[str, Any]:
        """The schedule actually used, for bench rows and run records."""
        return {
            "algorithm": self.algorithm,
            "executor": self.executor,
            "host_staged": self.host_staged,
            "lanes": len(self.schedule.lanes),
            **self.schedule.info,
        }


def resolve(buf: Any, algo: Selection, ctx: Context) -> Resolved:
    """The algorithm (``auto``'s pick for this size), executor and schedule for all-reducing ``buf`` with ``algo``
    on ``ctx`` (cached per size)."""
    device, size, itemsize = device_of(buf), _size(buf), _itemsize(buf)
    if device != algo.device:
        raise ValueError(f"{algo.name} was selected for {algo.device} buffers, but this one is on {device}")

    def make() -> Resolved:
        picked = algo if algo.algorithm is not None else algo.pick(auto.choose(ctx, size * itemsize, device))
        assert picked.algorithm is not None  # auto picked one of the table's algorithms
        executor = picked.executor
        spec = Spec(
            ctx.size,
            ctx.rank,
            size,
            itemsize,
            ctx.params.colors,
            executor_chunk(executor, ctx.params.chunk_bytes),
            ctx.params.grid,
            ctx.nodes() if ctx.size > 1 else (),
            ctx.params.dim_algorithms,
            tree_arity=ctx.params.tree_arity,
        )
        schedule = picked.algorithm.schedule(spec)
        return Resolved(picked.name, executor, schedule, executor == mpi_executor.NAME and device != "cpu")

    resolved: Resolved = ctx.cached(("resolved", algo.name, algo.executor, device, size, itemsize), make)
    return resolved


def _size(buf: Any) -> int:
    """Elements in ``buf``."""
    return int(buf.numel()) if _is_tensor(buf) else int(buf.size)


def _itemsize(buf: Any) -> int:
    """Bytes per element of ``buf``."""
    return int(buf.element_size()) if _is_tensor(buf) else int(buf.itemsize)


def allreduce(
    buf: Any,
    algo: Selection | str = "native",
    comm: Context | MPI.Intracomm | None = None,
    out: Any = None,
    params: CommParams | None = None,
) -> Any:
    """Sum ``buf`` over ``comm`` with ``algo`` (a selection, or a name resolved for ``buf``'s device and the
    context's ``comm.executor``): in place, or into ``out`` (``buf`` untouched).

    Out of place, ``native`` on NumPy buffers is MPI_Allreduce from ``buf``
    into ``out`` (:func:`library_out_of_place`); every other algorithm copies
    ``buf`` into ``out`` and sums ``out`` in place.

    ``comm`` is a Context (reused: schedules, sub-communicators, process
    groups and the watchdog are made once) or a plain communicator (default
    COMM_WORLD), wrapped for this call. Returns the buffer holding the sum.
    """
    ctx = comm if isinstance(comm, Context) else Context(comm, params)
    try:
        target = buf if out is None else _checked_out(buf, out)
        chosen = algo if isinstance(algo, Selection) else _selection(algo, device_of(target), ctx)
        found = resolve(target, chosen, ctx)
        direct = out is not None and library_out_of_place(found, target)
        if out is not None and not direct:
            _copy(buf, out)
        dog = ctx.watchdog()
        if dog is not None:
            dog.arm(f"{chosen.name} all-reduce")
        try:
            if direct:
                ctx.comm.Allreduce(buf, target, op=MPI.SUM)
            else:
                _execute(found, target, ctx)
        finally:
            if dog is not None:
                dog.disarm()  # also when it raised: a stale deadline must not abort a later, healthy job
    finally:
        if ctx is not comm:
            ctx.close()
    return target


def _selection(name: str, device: str, ctx: Context) -> Selection:
    """Algorithm ``name`` resolved for buffers on ``device`` under ``ctx``'s ``comm.executor``, once per context."""
    chosen: Selection = ctx.cached(("selection", name, device), lambda: select(name, device, ctx.params.executor))
    return chosen


def library_out_of_place(found: Resolved, buf: Any) -> bool:
    """Whether an out-of-place sum of ``found`` on ``buf`` is the MPI library's own (native on a NumPy buffer)."""
    direct = found.algorithm == native.NAME and found.executor == mpi_executor.NAME and not found.host_staged
    return direct and isinstance(buf, np.ndarray)


def _checked_out(buf: Any, out: Any) -> Any:
    """``out``, once it is checked to match ``buf`` (kind, size, dtype)."""
    if _is_tensor(buf) != _is_tensor(out) or _size(buf) != _size(out) or buf.dtype != out.dtype:
        raise UserError(f"allreduce out= must match the input: {out.dtype}[{_size(out)}] vs {buf.dtype}[{_size(buf)}]")
    return out


def _copy(buf: Any, out: Any) -> None:
    """Copy ``buf`` into ``out`` (a tensor or a NumPy array, as ``buf``)."""
    if _is_tensor(out):
        out.copy_(buf)
    else:
        np.copyto(out, buf)


def _execute(found: Resolved, buf: Any, ctx: Context) -> None:
    """Run the resolved schedule on ``buf`` in place."""
    if not found.schedule.lanes:
        return
    if found.executor == torch_executor.NAME:
        t = as_tensor(buf)
        groups = ctx.process_groups()
        block = torch_executor.BLOCK_BYTES // t.element_size() if t.device.type == "cpu" else 0
        plan = ctx.cached(
            ("torch-plan", id(found)),
            lambda: torch_executor.compile_plan(  # found lives in ctx's cache
                found.schedule, ctx.rank, ctx.torch_ranks(), block
            ),
        )
        if t.device.type == "cuda":
            _use_device(t)
        torch_executor.allreduce_tensor(plan, t, groups, ctx.scratch(t.dtype, plan.scratch, t.device))
    elif found.host_staged:
        host = _pinned(ctx, buf)
        host.copy_(buf.view(-1))
        _execute_mpi(found, as_array(host), ctx)
        buf.view(-1).copy_(host)
    else:
        _execute_mpi(found, as_array(buf), ctx)


def _execute_mpi(found: Resolved, arr: np.ndarray, ctx: Context) -> None:
    """The MPI executor on a NumPy view."""
    plan = ctx.cached(
        ("mpi-plan", id(found)), lambda: mpi_executor.compile_plan(found.schedule, arr.size, arr.itemsize)
    )
    mpi_executor.allreduce_array(plan, arr, ctx, found.schedule)


def _pinned(ctx: Context, t: Any) -> Any:
    """A pinned host tensor shaped like ``t`` (reused per size and dtype): the mpi executor's staging buffer."""
    import torch

    return ctx.cached(("pinned", t.numel(), t.dtype), lambda: torch.empty(t.numel(), dtype=t.dtype, pin_memory=True))


def _use_device(t: Any) -> None:
    """Make ``t``'s GPU current (NCCL's point-to-point calls need it)."""
    import torch

    if torch.cuda.current_device() != t.device.index:
        torch.cuda.set_device(t.device)


def library_sum(buf: Any, ctx: Context) -> Any:
    """Sum ``buf`` with the library's own all-reduce for its device and ``comm.executor`` (batch-norm statistics)."""
    if device_of(buf) == "cuda":
        return allreduce(buf, nccl.NAME, ctx)
    return allreduce(buf, gloo.NAME if ctx.params.executor == torch_executor.NAME else native.NAME, ctx)
