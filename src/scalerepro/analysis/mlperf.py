"""MLPerf training logs (``:::MLLOG`` lines) from a run's event log, for mlperf-logging's compliance checker.

The event log already has MLLOG's fields and keys: init, run, epoch and eval intervals,
``eval_accuracy`` with ``epoch_num``, ``run_stop`` with a status, the sample counts. The export
prefixes each event and puts in front the submission records the checker requires: benchmark
``resnet``, division ``open`` (the data, model size and hyperparameters are not the closed
reference's), and ``cache_clear`` false (staging into node memory keeps the data cached on purpose).
Check a file with ``python -m mlperf_logging.compliance_checker --usage training --ruleset 4.0.0 FILE``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from scalerepro.analysis.collect import grid_point
from scalerepro.errors import UserError
from scalerepro.io import write_text_atomic
from scalerepro.train.events import NAMESPACE
from scalerepro.train.runfolder import finished_run

PREFIX = ":::MLLOG "


def platform(record: dict[str, Any]) -> str:
    """The run's platform as MLPerf names it: ranks x device, and the hosts."""
    hosts = sorted(set(record["hosts"]))
    where = hosts[0] if len(hosts) == 1 else f"{len(hosts)} hosts"
    return f"{record['world_size']}x{record['device']} on {where}"


def submission(record: dict[str, Any], time_ms: int, org: str, status: str) -> list[dict[str, Any]]:
    """The records in front of the run's events: submission_* and cache_clear."""
    values = {
        "submission_benchmark": "resnet",
        "submission_division": "open",
        "submission_org": org,
        "submission_platform": platform(record),
        "submission_status": status,
        "cache_clear": False,
    }
    return [
        {
            "namespace": NAMESPACE,
            "time_ms": time_ms,
            "event_type": "POINT_IN_TIME",
            "key": key,
            "value": value,
            "metadata": {},
        }
        for key, value in values.items()
    ]


def mllog(run_dir: Path, org: str = "scalerepro", status: str = "research") -> tuple[dict[str, Any], list[str]]:
    """The run record of the run that finished in ``run_dir`` and every line of its MLPerf log (its files
    checked against each other: :func:`scalerepro.train.runfolder.finished_run`)."""
    run = finished_run(run_dir)
    if run is None:
        raise UserError(f"{run_dir} holds no finished run (run.json and events.jsonl); rerun its train job")
    record, events = run
    head = submission(record, events[0]["time_ms"] if events else 0, org, status)
    return record, [PREFIX + json.dumps(e, sort_keys=True) for e in head + events]


def write_mllog(run_dir: Path, out_dir: Path, org: str = "scalerepro", status: str = "research") -> Path:
    """Write the run's MLPerf log as ``out_dir/<run id>.txt`` (atomically); its path."""
    record, lines = mllog(run_dir, org, status)
    out = Path(out_dir) / f"{grid_point(record)['run']}.txt"
    write_text_atomic(out, "\n".join(lines) + "\n")
    return out
