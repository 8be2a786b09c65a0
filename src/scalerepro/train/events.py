"""MLPerf-style event log: one JSON object per line, written by rank 0 only.

Each line has the MLLOG fields ``namespace``, ``time_ms``, ``event_type``
(INTERVAL_START, INTERVAL_END or POINT_IN_TIME), ``key``, ``value`` and
``metadata``. The log is written to ``<path>.partial`` while the run goes and
renamed to ``<path>`` only when the run finishes, so a crashed run leaves
its log for inspection but never one that looks complete.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any, TextIO

from scalerepro.errors import UserError
from scalerepro.io import write_text_atomic

NAMESPACE = "scalerepro"


class EventLog:
    """Append-only JSON-lines events; a no-op on ranks other than 0."""

    def __init__(self, path: Path, enabled: bool, resume: bool = False) -> None:
        """Open ``path``.partial for writing when enabled; when resuming, keep the earlier segments' events."""
        self.path = Path(path)
        self.partial = self.path.with_name(self.path.name + ".partial")
        self._fh: TextIO | None = None
        if enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            if resume:
                self._carry_over()
            # Open for the whole run (not a with-block): finish() publishes it, close() abandons it.
            self._fh = self.partial.open("a" if resume else "w", buffering=1)

    def _carry_over(self) -> None:
        """Earlier segments' events into the partial log, their run_stop renamed run_interrupted.

        A resumed run's finished log then has one run_start and one run_stop, as a reader expects.
        """
        source = self.partial if self.partial.exists() else self.path
        if not source.exists():
            return
        events = read_events(source)
        for e in events:
            if e["key"] == "run_stop":
                e["key"] = "run_interrupted"
        write_text_atomic(self.partial, "".join(json.dumps(e, sort_keys=True) + "\n" for e in events))
        if source == self.path:
            self.path.unlink()

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
        self._fh.write(json.dumps(line, sort_keys=True) + "\n")

    def start(self, key: str, value: Any = None, **metadata: Any) -> None:
        """INTERVAL_START event."""
        self.emit(key, value, "INTERVAL_START", **metadata)

    def end(self, key: str, value: Any = None, **metadata: Any) -> None:
        """INTERVAL_END event."""
        self.emit(key, value, "INTERVAL_END", **metadata)

    def finish(self) -> None:
        """Flush, fsync and publish the log under its final name."""
        if self._fh is None:
            return
        self._fh.flush()
        os.fsync(self._fh.fileno())
        self._fh.close()
        self._fh = None
        self.partial.replace(self.path)

    def close(self) -> None:
        """Close without publishing (the run failed); the .partial file stays."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None


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
