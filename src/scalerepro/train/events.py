"""MLPerf-style event log: one JSON object per line, written by rank 0 only.

Each line has the MLLOG fields ``namespace``, ``time_ms``, ``event_type``
(INTERVAL_START, INTERVAL_END or POINT_IN_TIME), ``key``, ``value`` and
``metadata``. The log is written to ``<path>.partial`` while the run goes and
renamed to ``<path>`` only when the run finishes, so a crashed run leaves
its log for inspection but never one that looks complete. A finished log
is also kept as ``<path>.kept`` (a hard link: no second copy on disk), a
name no workflow declares: when Snakemake deletes a finished run's outputs
as an incomplete job's (the workflow died before it saw the job end), the
rerun resumes from the final checkpoint with the whole log. A resumed run
continues the partial log only once its caller has checked that the log
covers the checkpoint (:meth:`EventLog.resume`): a log that lost steps the
checkpoint holds would give a run that looks whole and is not.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from typing import Any, TextIO, cast

from scalerepro.errors import UserError
from scalerepro.io import FULL, write_text_atomic

NAMESPACE = "scalerepro"
# What a segment logs of its progress: after its last checkpoint, trained again by the next segment.
PROGRESS = frozenset({"step", "epoch_start", "epoch_stop", "eval_start", "eval_stop", "eval_accuracy", "checkpoint"})


class EventLog:
    """Append-only JSON-lines events; a no-op on ranks other than 0."""

    def __init__(self, path: Path, enabled: bool, resume: bool = False) -> None:
        """Open ``path``.partial for writing when enabled; when resuming, nothing is opened or changed until
        :meth:`resume` (events emitted before are dropped)."""
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self.kept = self.path.with_name(self.path.name + ".kept")
        self.enabled = enabled
        self._fh: TextIO | None = None
        if enabled and not resume:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._open("w")

    def _open(self, mode: str) -> None:
        """Open the partial log for the whole run (not a with-block): finish() publishes it, close() abandons it."""
        try:
            self._fh = cast(TextIO, self.partial.open(mode, buffering=1))
        except OSError as exc:
            raise self._unwritable(exc) from None

    def _earlier(self) -> Path | None:
        """The earlier segments' log: the partial one, else a finished one, else the kept copy of one."""
        return next((p for p in (self.partial, self.path, self.kept) if p.exists()), None)

    def resume(self, step: int) -> str | None:
        """Continue the earlier segments' log from a checkpoint taken before global step ``step``; or, where that
        log lacks what the checkpoint holds (its start, or a step up to the checkpoint's), change nothing and say
        why (None: continued; on a rank whose log is off, nothing to do)."""
        if not self.enabled:
            return None
        source = self._earlier()
        events = read_events(source) if source is not None else []
        problem = self._gap(source, events, step)
        if problem is None:
            self._carry_over(source, events, step)
            self._open("a")
        return problem

    def _gap(self, source: Path | None, events: list[dict[str, Any]], step: int) -> str | None:
        """Why ``events``, read from ``source``, cannot be continued from a checkpoint before step ``step``."""
        logged = max((e["value"] for e in events if e["key"] == "step"), default=-1)
        if source is None:
            problem = f"its event log is missing (no {self.partial.name}, {self.path.name} or {self.kept.name})"
        elif logged < step - 1:
            problem = f"its event log {source} ends at step {logged}"
        elif not any(e["key"] == "run_start" for e in events):
            problem = f"its event log {source} has no run_start"
        else:
            return None
        return (
            f"the checkpoint in {self.path.parent} is at step {step} but {problem}: resuming would give a log "
            f"that lacks what the checkpoint holds. Put the log back to resume, or delete {self.path.parent} "
            "to train the run again"
        )

    def _carry_over(self, source: Path | None, events: list[dict[str, Any]], step: int) -> None:
        """The earlier segments' ``events`` (read from ``source``) into the partial log, their run_stop renamed
        run_interrupted, and the progress they logged after the checkpoint before ``step`` dropped (it is
        trained again).

        A resumed run's finished log then has one run_start and one run_stop, and each step, epoch and
        evaluation once, as a reader expects.
        """
        if source is None:
            return
        for e in events:
            if e["key"] == "run_stop":
                e["key"] = "run_interrupted"
        saved = [i for i, e in enumerate(events) if e["key"] == "checkpoint" and e["value"] == step]
        if saved:
            cut = saved[-1] + 1
            events = events[:cut] + [e for e in events[cut:] if e["key"] not in PROGRESS]
        write_text_atomic(self.partial, "".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
        if source == self.path:
            self.path.unlink()

    def sync(self) -> None:
        """Flush and fsync what is logged so far (before a checkpoint: a log must not lag the checkpoint after a
        crash of the node)."""
        if self._fh is None:
            return
        try:
            self._fh.flush()
            os.fsync(self._fh.fileno())
        except OSError as exc:
            self.close()
            raise self._unwritable(exc) from None

    def emit(self, key: str, value: Any = None, event_type: str = "POINT_IN_TIME", **metadata: Any) -> None:
        """Write one event line."""
        if self._fh is None:
            return
        line = {
            "namespace": NAMESPACE,
            "time_ms": time.time_ns() // 1_000_000,
            "event_type": event_type,
            "key": key,
            "value": value,
            "metadata": metadata,
        }
        try:
            self._fh.write(json.dumps(line, sort_keys=True) + "\n")
        except OSError as exc:
            self.close()
            raise self._unwritable(exc) from None

    def start(self, key: str, value: Any = None, **metadata: Any) -> None:
        """INTERVAL_START event."""
        self.emit(key, value, "INTERVAL_START", **metadata)

    def end(self, key: str, value: Any = None, **metadata: Any) -> None:
        """INTERVAL_END event."""
        self.emit(key, value, "INTERVAL_END", **metadata)

    def finish(self) -> None:
        """Flush, fsync and publish the log under its final name, and keep it under ``.kept`` too."""
        if self._fh is None:
            return
        self.sync()
        assert self._fh is not None  # sync closes it only when it raises
        self._fh.close()
        self._fh = None
        self.kept.unlink(missing_ok=True)
        os.link(self.partial, self.kept)
        self.partial.replace(self.path)

    def _unwritable(self, exc: OSError) -> UserError:
        """The one error for a log that cannot be opened or written: the file, why, and what to do."""
        if exc.errno in FULL:
            fix = "free space in its folder (or raise the quota) and rerun: the run resumes from its last checkpoint"
        else:
            fix = "make its folder writable, or give another --out"
        return UserError(f"could not write the event log {self.partial}: {exc.strerror}; {fix}")

    def close(self) -> None:
        """Close without publishing (the run failed); the .partial file stays."""
        if self._fh is not None:
            fh, self._fh = self._fh, None
            with contextlib.suppress(OSError):  # its last lines could not be written (a full disk): the caller says why
                fh.close()


def read_events(path: Path) -> list[dict[str, Any]]:
    """All events of a log file; a last line cut short (the writer was killed, the disk filled) is dropped."""
    with path.open() as fh:
        lines = [line for line in fh if line.strip()]
    events = []
    for number, line in enumerate(lines, 1):
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            if number == len(lines) and not line.endswith("\n"):
                break
            raise UserError(
                f"{path} line {number} is not a JSON event; the log is damaged "
                f"(delete the run folder to start the run over)"
            ) from None
    return events
