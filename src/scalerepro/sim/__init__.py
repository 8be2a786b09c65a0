"""All-reduce schedules simulated in SimGrid: the algorithms' own schedules on described networks, at any scale.

:mod:`scalerepro.sim.engine` runs one all-reduce (every rank's schedule)
on one platform in one process (SimGrid's engine is one per process);
:func:`simulate` runs many such points, each in its own subprocess kept to
one core, as many at once as there are cores, and gathers their results.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any

from scalerepro.errors import UserError
from scalerepro.sim.engine import CORE_ENV, Point, load_simgrid


def enabled(setting: bool | str) -> bool:
    """Whether the workflow runs the simulation rules for ``simulate.enabled`` (True, False or "auto").

    True without SimGrid is a UserError naming the install command; "auto"
    without it leaves the rules out and says so on stderr.
    """
    if setting is False:
        return False
    try:
        load_simgrid()
    except UserError as exc:
        if setting is True:
            raise UserError(f"simulate.enabled is true but {exc}; or set simulate.enabled to auto or false") from None
        print(f"scalerepro: simulation rules left out (simulate.enabled: auto): {exc}", file=sys.stderr)
        return False
    return True


def simulate_feasible(
    points: Iterable[Point], label: str, jobs: int, progress: Callable[[int, int], None] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Simulate the points whose schedules exist (an algorithm may not fit a shape; each skip said on stderr once):
    (rows, skipped)."""
    from scalerepro.comm.costmodel import schedules

    runnable, skipped, seen = [], [], {}
    for pt in points:
        key = (pt.algorithm, pt.ranks, pt.platform.name)
        if key not in seen:
            try:
                next(schedules(pt.algorithm, pt.spec(), pt.executor), None)
                seen[key] = ""
            except UserError as exc:
                seen[key] = str(exc)
                print(
                    f"{label}: skipping {pt.algorithm} on {pt.ranks} ranks of {pt.platform.name}: {exc}",
                    file=sys.stderr,
                )
        if seen[key]:
            skipped.append(
                {"algorithm": pt.algorithm, "ranks": pt.ranks, "platform": pt.platform.name, "why": seen[key]}
            )
        else:
            runnable.append(pt)
    return simulate(runnable, progress, jobs or None), skipped


def simulate(
    points: Iterable[Point], progress: Callable[[int, int], None] | None = None, jobs: int | None = None
) -> list[dict[str, Any]]:
    """Simulate every point, one subprocess each, ``jobs`` at once (default: the cores this process may use)."""
    todo = list(points)
    cores = sorted(os.sched_getaffinity(0))[: jobs or None]
    free: queue.Queue[int] = queue.Queue()
    for core in cores:
        free.put(core)

    def one(point: Point) -> dict[str, Any]:
        core = free.get()
        try:
            return _run(point, core)
        finally:
            free.put(core)

    with ThreadPoolExecutor(max_workers=len(cores)) as pool:
        futures = [pool.submit(one, point) for point in todo]
        for done, finished in enumerate(as_completed(futures), 1):
            finished.result()  # a failed point raises here, before more progress is reported
            if progress is not None:
                progress(done, len(todo))
        return [f.result() for f in futures]


def _run(point: Point, core: int) -> dict[str, Any]:
    """One point in a subprocess on ``core``; its row, or a UserError with the subprocess's last line."""
    proc = subprocess.run(
        [sys.executable, "-m", "scalerepro.sim.run", point.as_json()],
        capture_output=True,
        text=True,
        env=os.environ | {CORE_ENV: str(core)},
    )
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise UserError(
            f"simulating {point.algorithm} on {point.ranks} ranks of {point.platform.name}, "
            f"{point.nbytes} B failed: {last}"
        )
    return dict(json.loads(proc.stdout.strip().splitlines()[-1]))
