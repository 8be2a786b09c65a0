"""Gradient fusion buckets: gradients packed in reverse parameter order, summed per bucket, averaged.

A bucket is summed where it lives: a CUDA bucket by the ``torch`` executor
(NCCL point-to-point and collectives on the GPU, no host copy), a CPU bucket
by the executor ``comm.executor`` names (``mpi`` by default).

Without overlap every bucket is packed, summed and unpacked after
backward. With overlap each parameter's post-accumulate-grad hook counts
down its bucket; a bucket whose gradients are all in is packed at once
and handed to one communication thread, in bucket order, so every rank
issues the same all-reduces in the same order (as DDP requires too).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import torch
from mpi4py import MPI
from torch import nn

from scalerepro.comm import allreduce
from scalerepro.comm.algorithms import Selection
from scalerepro.comm.context import Context
from scalerepro.comm.fusion import cut
from scalerepro.errors import UserError

Reducer = Callable[[torch.Tensor], None]


def reducer(algorithm: Selection, ctx: Context) -> Reducer:
    """Sum a bucket in place with ``algorithm`` (selected for the buckets' device, with the executor that runs it
    there; see comm.registry)."""

    def reduce(t: torch.Tensor) -> None:
        allreduce(t, algorithm, ctx)

    return reduce


class Buckets:
    """Flat per-bucket buffers filled from .grad, summed over the ranks, divided by their number, copied back."""

    def __init__(
        self, params: list[nn.Parameter], cap_bytes: int, reduce: Reducer, world: int, overlap: bool = False
    ) -> None:
        """Group ``params`` in reverse order into buckets of at most ``cap_bytes`` (``comm.fusion.cut``)."""
        backward = list(reversed(params))
        sizes = [p.numel() * p.element_size() for p in backward]
        self.groups = [[backward[i] for i in group] for group in cut(sizes, cap_bytes)]
        self.buffers = [
            torch.zeros(sum(p.numel() for p in g), dtype=g[0].dtype, device=g[0].device) for g in self.groups
        ]
        self.reduce_fn, self.world, self.overlap = reduce, world, overlap
        self._pool: ThreadPoolExecutor | None = None
        self._reset()
        if overlap:
            self._start_overlap()

    def _start_overlap(self) -> None:
        """One communication thread and a hook on every parameter."""
        if MPI.Query_thread() < MPI.THREAD_MULTIPLE:
            raise UserError(
                "train.overlap needs MPI_THREAD_MULTIPLE, which this MPI library does not provide; "
                "set train.overlap=false"
            )
        self._pool = ThreadPoolExecutor(1, thread_name_prefix="scalerepro-allreduce")
        for i, group in enumerate(self.groups):
            for p in group:
                p.register_post_accumulate_grad_hook(lambda _p, i=i: self._grad_ready(i))  # type: ignore[no-untyped-call]  # torch leaves this hook untyped

    def _reset(self) -> None:
        """A new step: every bucket waits for all its gradients."""
        self._missing = [len(g) for g in self.groups]
        self._next = 0
        self._futures: list[Future[float]] = []

    def _grad_ready(self, i: int) -> None:
        """Hook: one more gradient of bucket ``i`` is in; launch every bucket that is complete, in order."""
        self._missing[i] -= 1
        while self._next < len(self.groups) and self._missing[self._next] == 0:
            self._launch(self._next)
            self._next += 1

    def _pack(self, i: int) -> None:
        """Copy bucket ``i``'s gradients into its buffer."""
        grads = [(p.grad if p.grad is not None else torch.zeros_like(p)).reshape(-1) for p in self.groups[i]]
        torch.cat(grads, out=self.buffers[i])

    def _launch(self, i: int) -> None:
        """Pack bucket ``i`` and queue its all-reduce on the communication thread."""
        self._pack(i)
        assert self._pool is not None
        self._futures.append(self._pool.submit(self._timed, self.buffers[i]))

    def _timed(self, buf: torch.Tensor) -> float:
        """Sum one buffer; its seconds."""
        t0 = time.perf_counter()
        self.reduce_fn(buf)
        return time.perf_counter() - t0

    def _unpack(self, i: int) -> None:
        """Average bucket ``i`` and copy it back into the gradients."""
        buf = self.buffers[i]
        buf.div_(self.world)
        offset = 0
        for p in self.groups[i]:
            n = p.numel()
            if p.grad is None:
                p.grad = torch.empty_like(p)
            p.grad.copy_(buf[offset : offset + n].view_as(p))
            offset += n

    def synchronize(self) -> float:
        """Finish every bucket's sum; the seconds spent in all-reduce calls (on the communication thread, if any)."""
        if not self.overlap:
            busy = 0.0
            for i in range(len(self.groups)):
                self._pack(i)
                busy += self._timed(self.buffers[i])
                self._unpack(i)
            return busy
        for i in range(self._next, len(self.groups)):  # buckets whose hooks never fired (unused parameters)
            self._launch(i)
        busy = sum(f.result() for f in self._futures)
        for i in range(len(self.groups)):
            self._unpack(i)
        self._reset()
        return busy

    def close(self) -> None:
        """Stop the communication thread."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
