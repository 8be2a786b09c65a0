"""Names the ranks and their supervisor share: the files of a run folder, its lock, and the signals that stop a run.

Kept free of torch and MPI, so ``scalerepro supervise`` (one per training
job, beside ranks that are importing torch on the same cores) starts in a
fraction of a second.

One trainer per run folder: rank 0 holds a POSIX record lock (``lockf``) on
``LOCK`` for the whole run, and writes its pid and host into it. The kernel
(or the NFS lock manager) drops the lock when the process ends, however it
ends, so a killed trainer never leaves a stale lock, and a second trainer,
or a supervisor about to launch one, is refused naming the holder. A lock
covers the hosts that share the filesystem's lock manager: NFS and Lustre
mounted with ``flock`` cover the cluster, a node-local lock (Lustre's
``localflock``) one node; a filesystem that takes no lock gets a warning
and trains unguarded.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any

from scalerepro.errors import UserError
from scalerepro.io import read_json
from scalerepro.train.events import read_events

CHECKPOINT = "checkpoint.pt"
RECORD = "run.json"  # the run record, written by rank 0 when the run has finished
EVENTS = "events.jsonl"  # the event log under its final name (events.jsonl.partial while the run goes)
DIVERGED = "diverged"  # the status of a run whose loss became non-finite
RANKS = "ranks.json"  # rank, host, node and pid of every rank, written by rank 0 once training starts
LOCK = "train.lock"  # held by the training run's rank 0 while it runs: pid and host inside
UNLOCKABLE = {errno.ENOSYS, errno.ENOLCK, errno.EOPNOTSUPP}  # a filesystem without POSIX locks (Lustre without flock)
STOP_SIGNALS = (signal.SIGTERM, signal.SIGUSR1, signal.SIGINT)  # preemption, SLURM's time-limit warning, Ctrl-C


@contextmanager
def locked(run_dir: Path) -> Iterator[None]:
    """Hold the run folder's lock inside the block (or until this process ends); a UserError naming the holder
    when another process has it. A POSIX lock belongs to the process: it must not open the lock file again
    while it holds it (closing any descriptor of the file drops the lock), so :func:`holder` is for others."""
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / LOCK).open("a+") as fh:
        try:
            fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in UNLOCKABLE:
                print(unlockable(run_dir, exc), file=sys.stderr, flush=True)
                yield
                return
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            raise UserError(in_use(run_dir)) from None
        fh.truncate(0)
        fh.write(f"pid {os.getpid()} on {socket.gethostname()} since {time.strftime('%Y-%m-%dT%H:%M:%S%z')}\n")
        fh.flush()
        yield


def holder(run_dir: Path) -> str | None:
    """Who holds the run folder's lock ("pid N on HOST since T"), or None when no process does (called by a
    process that does not hold it: see :func:`locked`)."""
    path = run_dir / LOCK
    if not path.is_file():
        return None
    with path.open("a+") as fh:
        try:
            fcntl.lockf(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno in UNLOCKABLE:
                return None
            if exc.errno not in (errno.EACCES, errno.EAGAIN):
                raise
            fh.seek(0)
            return fh.read().strip() or "a process that has not written its pid yet"
        fcntl.lockf(fh, fcntl.LOCK_UN)
    return None


def unlockable(run_dir: Path, exc: OSError) -> str:
    """The warning for a run folder whose filesystem takes no lock."""
    return (
        f"scalerepro train: warning: the filesystem of {run_dir} takes no lock ({exc.strerror}): nothing keeps a "
        "second trainer out of this folder; start one per folder (Lustre: mount with flock)"
    )


def in_use(run_dir: Path) -> str:
    """The refusal for a run folder another trainer holds."""
    return (
        f"the run folder {run_dir} is in use by another trainer ({holder(run_dir) or 'which has just ended'}); "
        "two trainers in one folder would mix their logs and checkpoints: wait for it to end (or stop it), "
        "or give another --out"
    )


def finished_run(run_dir: Path) -> tuple[dict[str, Any], list[dict[str, Any]]] | None:
    """The record (run.json) and event log (events.jsonl) of the run that finished in ``run_dir``, checked
    against each other; None when it has not finished (either file absent). Files that disagree (a log cut
    short, one of another run) raise a UserError naming them: no reader should take them for a result."""
    record_path, log_path = run_dir / RECORD, run_dir / EVENTS
    if not (record_path.is_file() and log_path.is_file()):
        return None
    record, events = read_json(record_path), read_events(log_path)
    problem = disagreement(record, events)
    if problem:
        raise UserError(
            f"{log_path} does not match {record_path}: {problem}; these are not one finished run's files "
            f"(a log cut short, or copied from another run). Put back the run's own files, or delete "
            f"{run_dir} and rerun its job to train it again"
        )
    return record, events


def disagreement(record: dict[str, Any], events: list[dict[str, Any]]) -> str | None:
    """How a finished run's event log and its record disagree, or None: the log starts with the run, ends with
    its stop and the record's status, holds every epoch the record says ran, and its last evaluation is the
    record's final one."""
    keys = [e["key"] for e in events]
    epochs = sorted({int(e["value"]) for e in events if e["key"] == "epoch_stop"})
    status = record.get("status")
    if "run_start" not in keys:
        return "the log has no run_start"
    if keys[-1] != "run_stop":
        return f"the log ends without run_stop, after epoch {epochs[-1] if epochs else 'none'}"
    if events[-1]["metadata"].get("status") != status:
        return f"the log's run_stop says {events[-1]['metadata'].get('status')!r}, run.json says {status!r}"
    planned = int(record["config"]["train"]["epochs"])
    if status != DIVERGED and epochs != list(range(planned)):
        return f"the log holds {len(epochs)} of the {planned} epochs run.json says ran"
    evals = [{"epoch": e["metadata"]["epoch_num"], "top1": e["value"]} for e in events if e["key"] == "eval_accuracy"]
    final = record.get("final")
    if final is not None and (not evals or {k: final[k] for k in ("epoch", "top1")} != evals[-1]):
        return f"its last evaluation is {evals[-1] if evals else 'absent'}, run.json's final one {final}"
    return None


class StopSignals:
    """Records SIGTERM/SIGUSR1/SIGINT (SLURM's preemption and time-limit warnings, Ctrl-C) instead of dying at
    once."""

    def __init__(self) -> None:
        """Install the handlers (restored by ``restore``). ``scalerepro train`` installs them first thing, so a
        signal that comes while it starts is kept and stops the run at its first step, with a checkpoint."""
        self.received: int | None = None
        self._previous = {s: signal.signal(s, self._handle) for s in STOP_SIGNALS}

    def _handle(self, signum: int, _frame: FrameType | None) -> None:
        """Remember the signal; the loop stops at the next step boundary. A second Ctrl-C (SIGINT) interrupts at
        once, as Python would the first: for a start that hangs."""
        if signum == signal.SIGINT and self.received == signal.SIGINT:
            raise KeyboardInterrupt
        self.received = signum

    def agreed(self, reduce: Any, diverged: bool = False) -> tuple[int, bool]:
        """Collective (``reduce`` sums an int64 array over the ranks): a signal some rank received (or 0), and
        whether some rank's loss became non-finite (``diverged`` there), in one reduction."""
        import numpy as np  # here: the supervisor, which imports this module, starts without numpy

        flags = np.zeros(len(STOP_SIGNALS) + 1, dtype=np.int64)
        if self.received is not None:
            flags[STOP_SIGNALS.index(self.received)] = 1
        flags[-1] = diverged
        reduce(flags)
        hit = np.flatnonzero(flags[:-1])
        return (int(STOP_SIGNALS[hit[0]]) if hit.size else 0), bool(flags[-1])

    def restore(self) -> None:
        """Put the previous handlers back."""
        for s, handler in self._previous.items():
            signal.signal(s, handler)
