"""``scalerepro supervise``: run a launcher line and, when it fails, say which rank died and where.

When one rank dies (OOM killer, segfault, ``kill -9``), MPICH's ``mpiexec``
kills the others within a fraction of a second, so no surviving rank can
report anything; srun names the task but not the step. The supervisor (like
torch.distributed.elastic's agent) watches the ranks of its own host through
``ranks.json`` (written by rank 0 at the start of every run segment) and
pidfds, so it sees which rank exited first. When the launcher fails it
prints one report: that rank, its pid and host, the last step in the event
log, the last checkpoint and whether it loads, and how to resume. A rank on
another host is covered by the all-reduce watchdog, which names it after
``comm.timeout_s``. Before that watchdog exists, MPI has to start: a launch
whose rank 0 has not written ``ranks.json`` within ``start_timeout_s`` (MPI_Init
stuck in the launcher's PMI, a rank that never came up) is stopped and
reported, so a hung start does not hold the allocation until its time limit.
The launcher's exit status is passed through (124 after a stopped start).

The job dies with the process that started it: the supervisor watches that
process (``--watch``; the train rule names Snakemake) and stops the
launcher when it ends, so the ranks checkpoint and exit instead of training
on, unseen, into a folder the next workflow run will resume or rewrite (a
``kill -9`` of Snakemake leaves its shell and jobs running: nothing else
would end them). Before launching, it refuses a run folder that another
trainer holds (:func:`scalerepro.train.runfolder.locked`).
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from scalerepro import shm
from scalerepro.errors import UserError
from scalerepro.train.events import read_events
from scalerepro.train.runfolder import CHECKPOINT, RANKS, STOP_SIGNALS, holder, in_use

POLL_S = 0.05
STOP_GRACE_S = 30.0  # after SIGTERM, how long the launcher has to end its ranks before SIGKILL
NOT_STARTED = 124  # the exit status after a start that did not finish in time (as timeout(1) uses)


@dataclass
class Watch:
    """The ranks of this host: pidfds of the current segment, and the first to exit."""

    run_dir: Path
    fds: dict[int, dict[str, Any]] = field(default_factory=dict)
    stamp: float = 0.0
    first: list[dict[str, Any]] = field(default_factory=list)
    first_at: float | None = None

    def refresh(self) -> None:
        """Open pidfds for this host's ranks once rank 0 has written a new ranks.json."""
        path = self.run_dir / RANKS
        try:
            stamp = path.stat().st_mtime
        except FileNotFoundError:
            return
        if stamp == self.stamp:
            return
        self.stamp = stamp
        host = socket.gethostname()
        self.close()
        for proc in json.loads(path.read_text())["ranks"]:
            if proc["host"] != host:
                continue
            try:
                self.fds[os.pidfd_open(proc["pid"])] = proc
            except OSError:  # already gone
                self.exited([proc])

    def poll(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds; note the ranks that exit."""
        if not self.fds:
            time.sleep(timeout)
            return
        ready, _, _ = select.select(list(self.fds), [], [], timeout)
        self.exited([self.fds[fd] for fd in ready])
        for fd in ready:
            os.close(fd)
            del self.fds[fd]

    def exited(self, procs: list[dict[str, Any]]) -> None:
        """Remember the first ranks seen exiting (several if they went in the same poll)."""
        if procs and self.first_at is None:
            self.first, self.first_at = sorted(procs, key=lambda p: p["rank"]), time.monotonic()

    def close(self) -> None:
        """Close the pidfds."""
        for fd in self.fds:
            os.close(fd)
        self.fds = {}


def supervise(
    cmd: list[str], run_dir: Path, start_timeout_s: float | None = None, starter_pid: int | None = None
) -> int:
    """Run ``cmd`` (in this process group, so SLURM's and Snakemake's signals reach it); report a failure; stop it
    if its ranks have not started (no ``ranks.json``) within ``start_timeout_s``, or once ``starter_pid`` ends."""
    if not cmd:
        raise ValueError("no command to supervise")
    if holder(run_dir) is not None:
        raise UserError(in_use(run_dir))
    starter = Starter(starter_pid)
    received: list[int] = []
    previous = {s: signal.signal(s, lambda signum, _f: received.append(signum)) for s in STOP_SIGNALS}
    (run_dir / RANKS).unlink(missing_ok=True)  # an earlier attempt's ranks are not this one's
    watch = Watch(run_dir)
    started_ns = time.time_ns()
    try:
        child = subprocess.Popen(cmd)
        launched = time.monotonic()
        stalled = orphaned = False
        while child.poll() is None:
            watch.refresh()
            if start_timeout_s and not watch.stamp and time.monotonic() - launched > start_timeout_s:
                stalled = True
                stop(child)
                break
            if starter.gone():
                orphaned = True
                stop(child)
                break
            watch.poll(POLL_S)
        code = child.returncode
        ended = time.monotonic()
        if watch.first_at is None:  # a rank that went in the launcher's last poll interval, or whose pidfd was late
            watch.refresh()
            watch.poll(0)
    finally:
        watch.close()
        starter.close()
        for s, handler in previous.items():
            signal.signal(s, handler)
    if code != 0 or stalled:  # the job did not finalize: its MPICH segments would stay in node memory
        shm.remove_orphans(started_ns)
    if stalled:
        print(not_started(start_timeout_s or 0.0), file=sys.stderr, flush=True)
        return NOT_STARTED
    if orphaned:
        print(starter.ended(code), file=sys.stderr, flush=True)
    if code != 0 and not received and not _preempted(code):
        print(report(code, watch, ended, run_dir), file=sys.stderr, flush=True)
    return code if code >= 0 else 128 - code


class Starter:
    """The process whose end ends the job (through a pidfd, so a reused pid is not mistaken for it)."""

    def __init__(self, pid: int | None) -> None:
        """Watch ``pid``; None or 1 (init: the starter had already gone) watches nothing."""
        self.pid = pid
        self.fd: int | None = None
        if pid is not None and pid > 1:
            try:
                self.fd = os.pidfd_open(pid)
            except ProcessLookupError:
                raise UserError(
                    f"--watch {pid}: no such process; give the pid of the process the job dies with"
                ) from None

    def gone(self) -> bool:
        """Whether the watched process has ended."""
        return self.fd is not None and bool(select.select([self.fd], [], [], 0)[0])

    def ended(self, code: int) -> str:
        """What happened after the watched process ended."""
        how = "checkpointed and stopped" if _preempted(code) else f"stopped (exit status {code})"
        return (
            f"scalerepro supervise: the process that started this job (pid {self.pid}, e.g. Snakemake) has ended, so "
            f"the training was {how} rather than left running unseen. Rerun the workflow (after `snakemake --unlock`) "
            "to resume it from its last checkpoint"
        )

    def close(self) -> None:
        """Close the pidfd."""
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None


def stop(child: subprocess.Popen[bytes]) -> None:
    """End the launcher: SIGTERM (srun and mpiexec pass it to their ranks), SIGKILL after a grace period."""
    child.terminate()
    try:
        child.wait(STOP_GRACE_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def not_started(timeout_s: float) -> str:
    """Why a launch was stopped before training began, and where to look."""
    return (
        f"scalerepro supervise: error: the ranks did not start within {timeout_s:g} s (rank 0 wrote no {RANKS}): "
        "MPI_Init did not finish (the launcher's PMI: see its messages above, e.g. slurmstepd's mpi/pmi2 errors) "
        "or a rank never came up; the launcher was stopped. Raise comm.timeout_s if starting takes longer here."
    )


def _preempted(code: int) -> bool:
    """The exit status ``scalerepro train`` uses after a preemption checkpoint (it explains itself)."""
    return code in {128 + int(s) for s in STOP_SIGNALS}


def report(code: int, watch: Watch, ended: float, run_dir: Path) -> str:
    """One paragraph: who died, when, the last step and checkpoint, what to do."""
    status = f"exit code {code}" if code > 0 else f"killed by {signal.Signals(-code).name}"
    if watch.first_at is not None:  # set together with watch.first
        who = ", ".join(f"rank {p['rank']} (pid {p['pid']} on {where(p)})" for p in watch.first)
        lead = f"the job failed ({status}) {max(0.0, ended - watch.first_at):.2f} s after {who} exited first"
    else:
        lead = (
            f"the job failed ({status}); no rank on this host exited before the launcher "
            f"(see the launcher's and the ranks' messages above)"
        )
    return f"scalerepro supervise: error: {lead}; {last_step(run_dir)}. {last_checkpoint(run_dir)}"


def where(proc: dict[str, Any]) -> str:
    """A rank's host, and its SLURM node where that differs (several slurmd on one host)."""
    node = proc.get("node", proc["host"])
    return proc["host"] if node == proc["host"] else f"node {node} ({proc['host']})"


def _events(run_dir: Path) -> list[dict[str, Any]]:
    """This run's event log so far (the partial one while it has not finished)."""
    for name in ("events.jsonl.partial", "events.jsonl"):
        path = run_dir / name
        if path.exists():
            try:
                return read_events(path)
            except (OSError, UserError):
                return []
    return []


def last_step(run_dir: Path) -> str:
    """Where training was: the last step logged by rank 0."""
    steps = [e for e in _events(run_dir) if e["key"] == "step"]
    if not steps:
        return "no training step was logged"
    last = steps[-1]
    return f"last step logged: epoch {last['metadata']['epoch_num']}, step {last['value']}"


def last_checkpoint(run_dir: Path) -> str:
    """The last checkpoint, whether it loads, and how to resume."""
    path = run_dir / CHECKPOINT
    if not path.exists():
        return f"No checkpoint in {run_dir}: a rerun starts from the beginning."
    try:
        import torch

        progress = torch.load(path, map_location="cpu", weights_only=True)["progress"]
    except Exception as exc:  # a damaged file: say so, the rerun refuses it with the fix
        return f"The checkpoint {path} does not load ({type(exc).__name__}: {exc}); delete it to start over."
    return (
        f"Last checkpoint {path} loads: it resumes at epoch {progress['epoch']}, batch {progress['batch']} "
        f"(step {progress['step']}); rerun the same command to continue from it."
    )
