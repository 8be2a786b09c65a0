"""One simulated all-reduce: every rank's schedule as SimGrid actors on a torus of links.

Each rank is a host; each lane of each rank's schedule is an actor that
runs its stages in order: a stage posts its sends (``put_async``) and
receives (``get_async``) on mailboxes named by (sender, receiver, lane),
waits for all of them, then spends (bytes reduced x gamma) reducing.
Library collectives are expanded into their library's algorithm first, as
the cost model does (:func:`scalerepro.comm.costmodel.schedules`). The
network model is CM02 (latency and bandwidth as given, no TCP window or
latency factor), so on one hop per message a ring's time is exactly
2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma; contention between
messages sharing a link is SimGrid's max-min flow sharing.

Run as ``python -m scalerepro.sim.run '<Point as JSON>'``: prints one
JSON row. SimGrid's engine can be made once per process, hence one
process per point.
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from typing import Any

from scalerepro.comm.costmodel import UNPIPELINED, schedules
from scalerepro.comm.schedule import Recv, Send, Spec
from scalerepro.errors import UserError

DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"  # where Debian's python3-simgrid puts its module
INSTALL = "sudo apt-get install python3-simgrid (Debian/Ubuntu)"


@dataclass(frozen=True)
class Point:
    """One simulation: ``algorithm`` over ``ranks`` on a torus of ``dims`` (product = ranks), ``nbytes`` float32."""

    algorithm: str
    ranks: int
    nbytes: int
    dims: tuple[int, ...]
    link_GBps: float = 12.5
    latency_us: float = 2.0
    gamma_s_per_byte: float = 0.0
    colors: int = 2

    def __post_init__(self) -> None:
        """Check the shape; errors name the field."""
        if math.prod(self.dims) != self.ranks:
            raise UserError(f"simulate: torus dims {list(self.dims)} hold {math.prod(self.dims)} ranks, not {self.ranks}")
        if self.link_GBps <= 0 or self.latency_us < 0 or self.nbytes < 4:
            raise UserError("simulate: link_GBps > 0, latency_us >= 0 and at least 4 bytes are required")


def load_simgrid() -> Any:
    """The simgrid module (Debian's, from its dist-packages if the venv lacks it); a one-line UserError if absent."""
    try:
        import simgrid
    except ImportError:
        if DEBIAN_DIST_PACKAGES not in sys.path:
            sys.path.append(DEBIAN_DIST_PACKAGES)
        try:
            import simgrid
        except ImportError:
            raise UserError(f"SimGrid's Python module is not installed; run: {INSTALL}") from None
    return simgrid


def _platform(sg: Any, point: Point) -> dict[int, Any]:
    """A torus of ``point.dims`` hosts (split-duplex links); host of each rank."""
    def netpoint(zone: Any, coord: list[int], ident: int) -> tuple[Any, None]:
        return zone.create_host(f"rank{ident}", 1e12).seal().netpoint, None

    sg.NetZone.create_torus_zone("torus", None, list(point.dims), sg.ClusterCallbacks(netpoint, None, None),
                                 point.link_GBps * 1e9, point.latency_us * 1e-6,
                                 sg.Link.SharingPolicy.SPLITDUPLEX).seal()
    return {r: sg.Host.by_name(f"rank{r}") for r in range(point.ranks)}


def _lane(sg: Any, rank: int, index: int, lane: Any, itemsize: int, gamma: float) -> Any:
    """The actor body running one lane of one rank's schedule."""
    def run() -> None:
        for stage in lane:
            comms, reduced = [], 0
            for step in stage:
                if isinstance(step, Send):
                    box = sg.Mailbox.by_name(f"{rank}>{step.peer}#{index}")
                    comms.append(box.put_async(None, (step.hi - step.lo) * itemsize))
                elif isinstance(step, Recv):
                    got = sg.Mailbox.by_name(f"{step.peer}>{rank}#{index}").get_async()
                    comms.append(got[0] if isinstance(got, tuple) else got)  # 3.32 returns (comm, payload)
                    reduced += (step.hi - step.lo) * itemsize if step.reduce else 0
            for comm in comms:
                comm.wait()
            if reduced and gamma:
                sg.this_actor.sleep_for(reduced * gamma)
    return run


def run_point(point: Point) -> dict[str, Any]:
    """Simulate ``point`` in this process (once per process); its result row."""
    sg = load_simgrid()
    engine = sg.Engine(["scalerepro", "--log=root.thres:critical", "--cfg=network/model:CM02"])
    hosts = _platform(sg, point)
    grid = point.dims if len(point.dims) == 2 else ()
    spec = Spec(point.ranks, 0, point.nbytes // 4, 4, point.colors, UNPIPELINED, grid)
    t0 = time.perf_counter()
    for rank, schedule in enumerate(schedules(point.algorithm, spec)):
        for i, lane in enumerate(schedule.lanes):
            sg.Actor.create(f"r{rank}l{i}", hosts[rank], _lane(sg, rank, i, lane, 4, point.gamma_s_per_byte))
    engine.run()
    seconds = float(engine.clock)
    algbw = point.nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return {"algorithm": point.algorithm, "ranks": point.ranks, "bytes": point.nbytes, "dims": list(point.dims),
            "link_GBps": point.link_GBps, "latency_us": point.latency_us, "gamma_s_per_byte": point.gamma_s_per_byte,
            "simulated_s": seconds, "algbw_GBps": algbw, "busbw_GBps": algbw * 2 * (point.ranks - 1) / point.ranks,
            "wall_s": time.perf_counter() - t0}


def main(argv: list[str]) -> int:
    """``python -m scalerepro.sim.run POINT_JSON``: print the point's result row as JSON."""
    try:
        fields = json.loads(argv[0])
        point = Point(**(fields | {"dims": tuple(fields["dims"])}))
        print(json.dumps(run_point(point)))
    except UserError as exc:
        print(f"scalerepro simulate: error: {exc}", file=sys.stderr)
        return 2
    return 0
