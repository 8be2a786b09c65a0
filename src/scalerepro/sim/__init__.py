"""All-reduce schedules simulated in SimGrid: the algorithms' own schedules on described networks, at any scale.

:mod:`scalerepro.sim.engine` runs one all-reduce (every rank's schedule)
on one platform in one process (SimGrid's engine is one per process);
:func:`simulate` runs many such points, each in a forked process kept to
one core, as many at once as there are cores, and gathers their results.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import sys
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, NoReturn

from scalerepro.errors import UserError
from scalerepro.sim.engine import Point, load_simgrid, run_point


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
    from scalerepro.comm.costterms import schedules

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


SAID_S = 10.0  # a point that takes this long (wall seconds) is said on stderr as it ends, with its time


def simulate(
    points: Iterable[Point], progress: Callable[[int, int], None] | None = None, jobs: int | None = None
) -> list[dict[str, Any]]:
    """Simulate every point in a forked child of its own, ``jobs`` at once (default: the cores this process may use).

    SimGrid's engine can be made once per process, hence one process per
    point; forking this process (SimGrid's module loaded, no engine made;
    torch too where the caller has counted ResNet-50's FLOPs, unused by the
    children) costs milliseconds where starting Python and importing the
    package costs a quarter of a second, which dominated the small points.
    Each child keeps to one core and answers down its own pipe, read to its
    end before the child is reaped. The largest rank counts start first (a
    point's cost grows with its ranks squared), so the last to finish are
    small ones and no core idles behind one long point. The first failure
    stops new forks and is raised once the running ones are in; an
    interruption kills them. Rows come back in the order of ``points``; each
    point that took :data:`SAID_S` or longer is said as it ends.
    """
    load_simgrid()
    todo = deque(sorted(enumerate(points), key=lambda item: -item[1].ranks))
    total = len(todo)
    free = sorted(os.sched_getaffinity(0))[: jobs or None]
    running: dict[int, _Child] = {}  # by the read end of its pipe
    rows: dict[int, dict[str, Any]] = {}
    failed = ""
    with selectors.DefaultSelector() as sel:
        try:
            while running or (todo and not failed):
                while todo and free and not failed:
                    index, point = todo.popleft()
                    child = _Child.start(index, point, free.pop())
                    running[child.pipe] = child
                    sel.register(child.pipe, selectors.EVENT_READ)
                for key, _ in sel.select():
                    child = running[key.fd]
                    chunk = os.read(child.pipe, 1 << 16)
                    if chunk:
                        child.answer += chunk
                        continue
                    sel.unregister(child.pipe)
                    del running[child.pipe]
                    free.append(child.core)
                    row, error = child.finish()
                    failed = failed or error
                    if row is not None:
                        rows[child.index] = row
                        if row["wall_s"] >= SAID_S:
                            print(f"simulated {child.what()}: {row['wall_s']:.0f} s ({row['method']})", file=sys.stderr)
                        if progress is not None and not failed:
                            progress(len(rows), total)
        finally:
            for child in running.values():
                child.kill()
    if failed:
        raise UserError(failed)
    return [rows[i] for i in range(total)]


@dataclass
class _Child:
    """One forked simulation: which point, its core, the read end of its pipe and what came down it so far."""

    pid: int
    index: int
    point: Point
    core: int
    pipe: int
    answer: bytearray = field(default_factory=bytearray)

    @classmethod
    def start(cls, index: int, point: Point, core: int) -> _Child:
        """Fork a child that simulates ``point`` on ``core``."""
        read, write = os.pipe()
        try:
            pid = os.fork()
        except OSError:
            os.close(read)
            os.close(write)
            raise
        if pid == 0:
            os.close(read)
            _child(point, core, write)
        os.close(write)
        return cls(pid, index, point, core, read)

    def what(self) -> str:
        """The point, for messages."""
        p = self.point
        variant = f" ({p.platform.variant})" if p.platform.variant else ""
        return f"{p.algorithm} on {p.ranks} ranks of {p.platform.name}{variant}, {p.nbytes} B"

    def finish(self) -> tuple[dict[str, Any] | None, str]:
        """Reap the child (its pipe read to the end): (its row, "") or (None, why it failed)."""
        os.close(self.pipe)
        status = os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
        try:
            answer = json.loads(bytes(self.answer))
        except ValueError:
            return None, f"simulating {self.what()}: the process ended (exit status {status}) without an answer"
        if "error" in answer:
            return None, str(answer["error"])
        return dict(answer["row"]), ""

    def kill(self) -> None:
        """Stop the child and reap it (on an interruption of the parent)."""
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.pipe)


def _child(point: Point, core: int, pipe: int) -> NoReturn:
    """In the forked child: simulate ``point`` on ``core``, send its row (or the error) up ``pipe``, exit."""
    try:
        os.sched_setaffinity(0, {core})
        answer: dict[str, Any] = {"row": run_point(point)}
    except BaseException as exc:  # every failure goes to the parent as a message; the child must not unwind
        what = f"{point.algorithm} on {point.ranks} ranks of {point.platform.name}, {point.nbytes} B"
        answer = {"error": f"simulating {what} failed: {exc}"}
    data = json.dumps(answer).encode()
    while data:
        data = data[os.write(pipe, data) :]
    os._exit(0)
