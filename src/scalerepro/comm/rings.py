"""The ring engine that multicolor, multiring, torus2d and their kin are built from.

A :class:`RingMachine` all-reduces one slice of the buffer through a list
of ring *stages*: reduce-scatter around ring 1, then around ring 2 on the
chunk it now owns, ..., then all-gather back in reverse order. A ring is a
communicator plus the order of its ranks, so a machine can follow a
permuted ring (multicolor), the rows and columns of a grid (multiring,
torus2d) or the ranks of a node (hierarchical).

:func:`drive` runs many machines at once with non-blocking point-to-point:
each machine posts its next step as soon as its previous receive completed
and was reduced, so slices pipeline and independent rings (colors, torus
halves) progress concurrently. Every element is reduced along one fixed
path and then copied, so all ranks end with the same bits.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from mpi4py import MPI


def chunk_bounds(n: int, p: int) -> list[int]:
    """Boundaries of p near-equal chunks of n elements (some may be empty)."""
    return [i * n // p for i in range(p + 1)]


@dataclass(frozen=True)
class Ring:
    """A ring: the communicator and its ranks in ring order."""

    comm: MPI.Intracomm
    order: tuple[int, ...]


class RingMachine:
    """All-reduce of ``view`` through ``rings`` (reduce-scatter down, all-gather back up)."""

    def __init__(self, view: np.ndarray, rings: list[Ring], tag: int) -> None:
        """Prepare; nothing is posted until :meth:`post`."""
        self.rings = [r for r in rings if len(r.order) > 1]
        self.tag = tag
        self.views = [view]  # views[k]: what ring k works on
        self.bounds: list[list[int]] = []
        self.stage = 0  # 0..K-1 reduce-scatter, K..2K-1 all-gather
        self.step = 0
        self.tmp = np.empty(0, dtype=view.dtype)
        self.sends: list[MPI.Request] = []
        self.recv_chunk: np.ndarray | None = None
        self.gated = -1  # the all-gather stage whose pending sends were awaited
        self.gate = False

    @property
    def done(self) -> bool:
        """True once every stage has finished."""
        return self.stage >= 2 * len(self.rings)

    def _k(self) -> int:
        """Index of the ring of the current stage."""
        return self.stage if self.stage < len(self.rings) else 2 * len(self.rings) - 1 - self.stage

    def _chunks(self) -> list[np.ndarray]:
        """Chunks of the current stage's view."""
        k = self._k()
        view, bounds = self.views[k], self.bounds[k]
        return [view[bounds[i] : bounds[i + 1]] for i in range(len(bounds) - 1)]

    def post(self) -> list[MPI.Request]:
        """Post the next step; return the requests it must wait for (none when finished)."""
        if self.done:
            return []
        ring = self.rings[self._k()]
        q, pos = len(ring.order), ring.order.index(ring.comm.rank)
        if self.stage < len(self.rings) and len(self.bounds) == self.stage:
            self.bounds.append(chunk_bounds(len(self.views[-1]), q))
        reducing = self.stage < len(self.rings)
        if not reducing and self.gated != self.stage and self.sends:
            # all-gather writes into chunks sent while reducing: those sends must be done first
            self.gated, self.gate = self.stage, True
            waits, self.sends = self.sends, []
            return waits
        chunks, s = self._chunks(), self.step
        if reducing:  # afterwards this rank owns chunk pos+1
            send, recv = chunks[(pos - s) % q], chunks[(pos - s - 1) % q]
            if self.tmp.size < recv.size:
                self.tmp = np.empty(max(c.size for c in chunks), dtype=recv.dtype)
            target = self.tmp[: recv.size]
        else:
            send, recv = chunks[(pos - s + 1) % q], chunks[(pos - s) % q]
            target = recv
        self.recv_chunk = recv if reducing else None
        req = ring.comm.Irecv(target, source=ring.order[(pos - 1) % q], tag=self.tag)
        self.sends.append(ring.comm.Isend(send, dest=ring.order[(pos + 1) % q], tag=self.tag))
        return [req]

    def ready(self) -> None:
        """Everything :meth:`post` returned has completed: reduce and move one step on."""
        if self.gate:
            self.gate = False
            return
        ring = self.rings[self._k()]
        q, pos = len(ring.order), ring.order.index(ring.comm.rank)
        if self.recv_chunk is not None:
            np.add(self.recv_chunk, self.tmp[: self.recv_chunk.size], out=self.recv_chunk)
        self.step += 1
        if self.step == q - 1:
            if self.stage < len(self.rings):
                self.views.append(self._chunks()[(pos + 1) % q])
            self.stage += 1
            self.step = 0


def drive(machines: list[RingMachine]) -> None:
    """Run every machine to completion; each posts its next step as soon as its last one is reduced."""
    pool: list[MPI.Request] = []
    owner: list[RingMachine] = []
    waiting: dict[int, int] = {}

    def schedule(m: RingMachine) -> None:
        reqs = m.post()
        waiting[id(m)] = len(reqs)
        pool.extend(reqs)
        owner.extend([m] * len(reqs))

    for m in machines:
        schedule(m)
    live = len(pool)
    while live:
        i = MPI.Request.Waitany(pool)
        m = owner[i]
        pool[i] = MPI.REQUEST_NULL
        live -= 1
        waiting[id(m)] -= 1
        if waiting[id(m)] == 0:
            m.ready()
            before = len(pool)
            schedule(m)
            live += len(pool) - before
        if len(pool) > 64 and live < len(pool) // 4:  # compact finished entries
            keep = [k for k, r in enumerate(pool) if r != MPI.REQUEST_NULL]
            pool[:], owner[:] = [pool[k] for k in keep], [owner[k] for k in keep]
    MPI.Request.Waitall([r for m in machines for r in m.sends])


def pipeline(parts: list[tuple[np.ndarray, list[Ring]]], chunk_bytes: int, tag: int) -> None:
    """All-reduce each (view, rings) part, cut into chunks of at most ``chunk_bytes``, all concurrently."""
    machines = []
    for view, path in parts:
        chunks = max(1, -(-view.nbytes // chunk_bytes))
        machines += [RingMachine(piece, path, tag + len(machines) + j) for j, piece in enumerate(slices(view, chunks))]
    drive(machines)


def slices(buf: np.ndarray, parts: int) -> list[np.ndarray]:
    """``buf`` cut into ``parts`` contiguous near-equal views."""
    b = chunk_bounds(buf.size, parts)
    return [buf[b[i] : b[i + 1]] for i in range(parts)]
