"""All-reduce schedules simulated in SimGrid: the algorithms' own schedules on described networks, at any scale.

:mod:`scalerepro.sim.engine` runs one all-reduce (every rank's schedule,
one actor per rank and lane) on one platform in one process (SimGrid's
engine is one per process); :func:`simulate` runs many such points, each
in its own subprocess, and gathers their results.
"""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from typing import Any, Callable, Iterable

from scalerepro.errors import UserError
from scalerepro.sim.engine import Point


def simulate(points: Iterable[Point], progress: Callable[[int, int], None] | None = None) -> list[dict[str, Any]]:
    """Simulate every point, one subprocess each; their result rows, in order."""
    todo = list(points)
    rows = []
    for i, point in enumerate(todo):
        proc = subprocess.run([sys.executable, "-m", "scalerepro.sim.run", json.dumps(asdict(point))],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            raise UserError(f"simulating {point.algorithm} on {point.ranks} ranks, {point.nbytes} B failed: {last}")
        rows.append(json.loads(proc.stdout.strip().splitlines()[-1]))
        if progress is not None:
            progress(i + 1, len(todo))
    return rows
