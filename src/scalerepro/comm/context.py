"""What every all-reduce runs with: the communicator, its parameters, the rank layout, caches, a watchdog.

The watchdog is one daemon thread per context. Each collective arms it
with a deadline (``timeout_s``); if the deadline passes, the thread asks
every other rank, over a private duplicate communicator, how many
collectives it has entered. A rank that does not answer is dead; a rank
that answers with a smaller count never arrived. The thread prints one
message naming the collective and those ranks, then aborts the job, so no
rank waits forever. Algorithms keep using blocking point-to-point calls:
the check costs nothing on the fast path.
"""

from __future__ import annotations

import math
import sys
import threading
import time
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
from mpi4py import MPI

from scalerepro.distributed import ProcessGroups, start_process_group
from scalerepro.errors import UserError
from scalerepro.mpi import abort_job, nodes_of_ranks, this_node

EXECUTORS = ("auto", "mpi", "torch")

QUERY, REPLY = 7001, 7002


@dataclass(frozen=True)
class CommParams:
    """Algorithm parameters (from the ``comm`` config section); recorded with every result."""

    timeout_s: float = 300.0
    colors: int = 2
    chunk_bytes: int = 0  # 0: the executor's own (schedule.EXECUTOR_CHUNK_BYTES)
    grid: tuple[int, ...] = ()
    executor: str = "auto"
    tuning: str = ""
    dim_algorithms: tuple[str, ...] = ()  # multiring: per grid dimension, "ring" or "library"
    tree_arity: int = 2  # multicolor: children per tree node

    def __post_init__(self) -> None:
        """Check ranges; errors name the key."""
        if self.executor not in EXECUTORS:
            raise UserError(f"comm.executor={self.executor!r}: choose one of {', '.join(EXECUTORS)}")
        if self.timeout_s <= 0:
            raise UserError(f"comm.timeout_s={self.timeout_s}: must be > 0 seconds")
        if self.colors < 1:
            raise UserError(f"comm.colors={self.colors}: must be >= 1")
        if self.tree_arity < 1:
            raise UserError(f"comm.tree_arity={self.tree_arity}: must be >= 1")
        if self.chunk_bytes and self.chunk_bytes < 4:
            raise UserError(f"comm.chunk_bytes={self.chunk_bytes}: must be >= 4, or 0 for the executor's default")
        if any(d < 1 for d in self.grid):
            raise UserError(f"comm.grid={list(self.grid)}: every dimension must be >= 1")
        if any(k not in ("ring", "library") for k in self.dim_algorithms):
            raise UserError(f"comm.dim_algorithms={list(self.dim_algorithms)}: each must be ring or library")


class Watchdog:
    """Aborts the job, naming the missing ranks, when a collective outlives its deadline."""

    def __init__(self, comm: MPI.Intracomm, timeout_s: float, where: Any = lambda: "") -> None:
        """Duplicate ``comm`` for queries and start the thread; ``where()`` says what the caller is doing."""
        self.comm = comm.Dup()
        self.nodes = self.comm.allgather(this_node())  # each rank's node, to name a lost one
        self.timeout_s = timeout_s
        self.where = where
        # Written by the collective's thread, read by the watchdog's: plain attribute
        # stores are atomic under the GIL, so the fast path takes no lock.
        self.seq = 0
        self.name = ""
        self.deadline = math.inf
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="scalerepro-watchdog", daemon=True)
        self._thread.start()

    def arm(self, name: str) -> None:
        """A collective called ``name`` starts now."""
        self.seq += 1
        self.name = name
        self.deadline = time.monotonic() + self.timeout_s

    def disarm(self) -> None:
        """The collective finished."""
        self.deadline = math.inf

    def _loop(self) -> None:
        """Answer peers' queries; check our own deadline.

        One standing receive per peer, never MPI_ANY_SOURCE: a wildcard
        receive makes MPICH poll every transport on each progress call and
        slows every small all-reduce several-fold.
        """
        peers = [r for r in range(self.comm.size) if r != self.comm.rank]
        bufs = [bytearray(8) for _ in peers]
        reqs = [self.comm.Irecv(b, source=r, tag=QUERY) for b, r in zip(bufs, peers, strict=True)]
        try:
            while not self._stop.wait(0.05):
                for i in MPI.Request.Testsome(reqs) or []:
                    self.comm.send(self.seq, dest=peers[i], tag=REPLY)
                    reqs[i] = self.comm.Irecv(bufs[i], source=peers[i], tag=QUERY)
                if time.monotonic() > self.deadline:
                    self._expire()
        finally:
            for req in reqs:
                req.Cancel()

    def _expire(self) -> None:
        """Find who is missing, say so, abort."""
        me, seq, name = self.comm.rank, self.seq, self.name
        dead, late = self.survey(seq)
        parts = []
        if dead:
            parts.append(f"{self.placed(dead)} did not answer (died or hung, or their node was lost)")
        if late:
            parts.append(f"{self.placed(late)} never arrived at this collective")
        why = "; ".join(parts) or "every rank is inside it (a deadlock or a stalled network)"
        where = self.where()
        print(
            f"scalerepro: error: {name} (collective #{seq}{', ' + where if where else ''}) did not finish within "
            f"comm.timeout_s="
            f"{self.timeout_s:g} s on rank {me}: {why}. Aborting the job.",
            file=sys.stderr,
            flush=True,
        )
        abort_job(3)

    def placed(self, ranks: list[int]) -> str:
        """``ranks`` with the nodes they run on, e.g. "rank(s) [2, 3] on n2"."""
        return f"rank(s) {ranks} on {', '.join(sorted({self.nodes[r] for r in ranks}))}"

    def survey(self, seq: int, wait_s: float = 2.0) -> tuple[list[int], list[int]]:
        """(ranks that do not answer, ranks behind collective #seq), asking each peer once."""
        peers = [r for r in range(self.comm.size) if r != self.comm.rank]
        replies = {r: bytearray(64) for r in peers}
        recvs = {r: self.comm.irecv(replies[r], source=r, tag=REPLY) for r in peers}
        sends = []
        for r in peers:
            try:
                sends.append(self.comm.Isend(bytearray(8), dest=r, tag=QUERY))
            except MPI.Exception:  # the network already knows the peer is gone (its node was lost)
                del recvs[r]
        answers: dict[int, int] = {}
        deadline = time.monotonic() + wait_s
        while recvs and time.monotonic() < deadline:
            for r, req in list(recvs.items()):
                try:
                    done, value = req.test()
                except MPI.Exception:  # as above
                    done, value = True, None
                if done:
                    del recvs[r]
                    if value is not None:
                        answers[r] = cast(int, value)  # the collective number the peer is in
            time.sleep(0.01)
        del sends
        dead = [r for r in peers if r not in answers]
        late = [r for r, s in sorted(answers.items()) if s < seq]
        return dead, late

    def close(self) -> None:
        """Stop the thread and free the duplicate communicator."""
        self._stop.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self.comm.Free()


class Context:
    """A communicator with its algorithm parameters, rank layout, caches and watchdog.

    A context made with ``parent`` (e.g. over a batch-norm group's
    sub-communicator) shares the parent's torch.distributed process groups,
    since a process has only one default group; the parent owns and closes it.
    """

    def __init__(
        self, comm: MPI.Intracomm | None = None, params: CommParams | None = None, parent: Context | None = None
    ) -> None:
        """Wrap ``comm`` (default COMM_WORLD)."""
        self.comm = comm if comm is not None else MPI.COMM_WORLD
        self.params = params or CommParams()
        self.parent = parent
        self._subs: dict[Any, MPI.Intracomm] = {}
        self._watchdog: Watchdog | None = None
        self._extra: dict[Any, Any] = {}
        self._groups: ProcessGroups | None = None
        self.phase = ""  # what the caller is doing, e.g. "epoch 2, step 23": named if a collective times out

    @property
    def size(self) -> int:
        """Number of ranks."""
        return self.comm.size

    @property
    def rank(self) -> int:
        """This rank."""
        return self.comm.rank

    def watchdog(self) -> Watchdog | None:
        """The watchdog (started on first use); None on a single rank, where nothing can hang."""
        if self._watchdog is None and self.comm.size > 1:
            self._watchdog = Watchdog(self.comm, self.params.timeout_s, where=lambda: self.phase)
        return self._watchdog

    def split(self, key: Any, color: int, order: int) -> MPI.Intracomm:
        """Sub-communicator (cached under ``key``) of the ranks with the same ``color``, ranked by ``order``."""
        if key not in self._subs:
            self._subs[key] = cast(MPI.Intracomm, self.comm.Split(color, order))  # mpi4py's stub says Comm
        return self._subs[key]

    def nodes(self) -> tuple[int, ...]:
        """The node of every rank (nodes numbered in order of their first rank, as :func:`mpi.node_layout`), found once.

        Under SLURM the node is SLURM's node name (two slurmd on one host are
        two nodes); elsewhere the host's shared-memory domain.
        """
        if "nodes" not in self._extra:
            self._extra["nodes"] = nodes_of_ranks(self.comm)
        nodes: tuple[int, ...] = self._extra["nodes"]
        return nodes

    def scratch(self, dtype: Any, count: int, device: Any = None) -> Any:
        """A reusable scratch buffer of at least ``count`` elements (grown on demand): a NumPy array of ``dtype``,
        or with ``device`` a torch tensor of torch ``dtype`` there."""
        key = ("scratch", str(dtype), str(device))
        buf = self._extra.get(key)
        if buf is None or len(buf) < count:
            if device is None:
                buf = np.empty(max(count, 1), dtype=dtype)
            else:
                import torch

                buf = torch.empty(max(count, 1), dtype=dtype, device=device)
            self._extra[key] = buf
        return buf

    def cached(self, key: Any, make: Any) -> Any:
        """A per-context object (a schedule, a compiled plan, a sub-communicator), made once."""
        if key not in self._extra:
            self._extra[key] = make()
        return self._extra[key]

    def process_groups(self) -> ProcessGroups:
        """The process's torch.distributed process groups (started on first use, by the root context, over its
        ranks: :func:`scalerepro.distributed.start_process_group`)."""
        if self.parent is not None:
            return self.parent.process_groups()
        if self._groups is None:
            self._groups = start_process_group(self.comm, self.params.timeout_s)
        return self._groups

    def torch_ranks(self) -> tuple[int, ...]:
        """The torch.distributed (root context) rank of each of this context's ranks."""
        if self.parent is None:
            return tuple(range(self.size))
        if "torch-ranks" not in self._extra:
            root = self.parent
            while root.parent is not None:
                root = root.parent
            mapped = MPI.Group.Translate_ranks(self.comm.group, list(range(self.size)), root.comm.group)
            self._extra["torch-ranks"] = tuple(int(r) for r in mapped)
        ranks: tuple[int, ...] = self._extra["torch-ranks"]
        return ranks

    def close(self) -> None:
        """Free sub-communicators, cached requests, the process groups this context owns, and the watchdog."""
        for value in self._extra.values():  # cached persistent requests, sub-communicators
            if hasattr(value, "free"):
                value.free()
            elif isinstance(value, MPI.Intracomm) and value != MPI.COMM_NULL:
                value.Free()
        self._extra.clear()
        for sub in self._subs.values():
            sub.Free()
        self._subs.clear()
        if self._groups is not None:
            self._groups.close()
            self._groups = None
        if self._watchdog is not None:
            self._watchdog.close()
            self._watchdog = None

    def __enter__(self) -> Context:
        """Use as ``with Context(...) as ctx``."""
        return self

    def __exit__(self, *exc: Any) -> None:
        """Close on exit."""
        self.close()
