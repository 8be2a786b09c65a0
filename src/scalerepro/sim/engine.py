"""One simulated all-reduce: every rank's schedule run on a described platform in SimGrid.

Each rank is a host; every lane of its schedule runs its stages in order
(see :class:`_Driver`): a stage's messages are host-to-host transfers that
start when both ends have reached them; when they have all arrived, the
rank reduces what it received (a transfer to itself at 1/gamma bytes/s),
or, on a platform with ``reduction: streamed``, it reduces while they
arrive (the sum starts with the stage and the stage ends when both are
done; the last slice's sum after the last byte is left out). A lane that
follows another (``Schedule.follows``, a tree's pipeline chunks) enters
its stage k only once that one has left it, as the executors run them.

Pipeline chunks are simulated as the executor cuts them (``comm.chunk_bytes``,
or the executor's own) where the schedule orders them into pipelines.
Where it does not (the ring algorithms' chunks), every chunk of a part
enters each stage at once, crosses the same links and shares them, so
under max-min sharing the chunks move exactly as one message of their
summed bytes would, and those schedules are simulated uncut, which costs
a fraction of the transfers.
Library collectives are expanded
into their library's algorithm first, as the cost model does
(:func:`scalerepro.comm.costterms.schedules`). Platforms
(:mod:`scalerepro.sim.platforms`): SimGrid's torus zone, or nodes of
ports and adapters on a fat tree with routes for the pairs the schedules
use. The network model is CM02 (latency and bandwidth as given, no TCP
window, latency factor or cross traffic), so on one hop per message a ring's time is
exactly 2(p-1) alpha + 2n(p-1)/p beta + n(p-1)/p gamma; contention between
messages sharing a link is SimGrid's max-min flow sharing.

By default a point is simulated by pattern (:mod:`scalerepro.sim.patterns`):
each distinct stage once, in a child process forked for it, the full
simulation only where that does not hold.

SimGrid's engine can be made once per process, hence one process per
point (:func:`scalerepro.sim.simulate` forks one for each); the process
keeps to one core, where SimGrid's thread switches cost a sixth of what
they cost across two (measured: 9 against 56 us per ``yield``).
"""

from __future__ import annotations

import math
import os
import pickle
import sys
import tempfile
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, fields, replace
from typing import Any, TypeVar, cast

from scalerepro.comm.algorithms import on_grid
from scalerepro.comm.costterms import no_cyclic_gc, schedules
from scalerepro.comm.schedule import UNCUT, Recv, Schedule, Send, Spec, executor_chunk
from scalerepro.errors import UserError
from scalerepro.sim.patterns import (
    APPROXIMATE,
    OUT_OF_STEP,
    PATTERNS,
    Plan,
    group_stages,
    in_step,
    most_summed,
    sent_pairs,
)
from scalerepro.sim.platforms import Platform

_T = TypeVar("_T")
DEBIAN_DIST_PACKAGES = "/usr/lib/python3/dist-packages"  # where Debian's python3-simgrid puts its module
INSTALL = "sudo apt-get install python3-simgrid (Debian/Ubuntu)"


@dataclass(frozen=True)
class Point:
    """One simulation: ``algorithm`` over ``ranks`` of ``platform``, ``nbytes`` of ``itemsize``-byte floats."""

    algorithm: str
    ranks: int
    nbytes: int
    platform: Platform
    colors: int = 2
    itemsize: int = 4
    executor: str = "mpi"
    grid: tuple[int, ...] = ()  # the rank grid of the 2-D algorithms, if not the platform's
    dim_algorithms: tuple[str, ...] = ()  # multiring's per-dimension algorithms (comm.dim_algorithms)
    tree_arity: int = 2  # multicolor's trees (comm.tree_arity)
    chunk_bytes: int = 0  # pipeline chunk (comm.chunk_bytes; 0: the executor's own)
    method: str = "fast"  # "fast": by pattern where the schedule allows (scalerepro.sim.patterns); "full": every stage
    full_max_messages: int = 0  # out of step above this many messages: the sum over patterns, approximate (0: none)

    def __post_init__(self) -> None:
        """Check the point fits the platform; errors name the field."""
        self.platform.ranks(self.ranks)
        if self.nbytes < self.itemsize:
            raise UserError(f"simulate: {self.nbytes} bytes hold no {self.itemsize}-byte element")

    def spec(self) -> Spec:
        """The schedule spec: the torus slice as the grid of the 2-D algorithms, or the nodes of a fat tree; the
        executor's pipeline chunk."""
        dims, nodes = self.platform.ranks(self.ranks)
        grid = self.grid or (dims if dims and on_grid(self.algorithm, 2) else ())
        return Spec(
            self.ranks,
            0,
            self.nbytes // self.itemsize,
            self.itemsize,
            self.colors,
            executor_chunk(self.executor, self.chunk_bytes),
            grid,
            nodes,
            self.dim_algorithms,
            self.platform.nics_per_node if nodes else 1,
            self.tree_arity,
        )

    def schedules(self) -> list[Schedule]:
        """Every rank's schedule as simulated (:meth:`read`)."""
        return list(self.read())

    def read(self) -> Iterator[Schedule]:
        """Every rank's schedule as simulated, in rank order: pipeline chunks where they are ordered, else uncut
        (module docstring), collectives expanded."""
        spec = self.spec()
        ranks = schedules(self.algorithm, spec, self.executor)
        first = next(ranks, None)
        if first is None:
            return
        if first.follows:
            yield first
            yield from ranks
            return
        yield from schedules(self.algorithm, replace(spec, chunk_bytes=UNCUT), self.executor)


SHAPE_KEYS = ("colors", "tree_arity", "chunk_bytes")  # the comm keys of the config a simulated schedule takes


def shape_of(comm: Any) -> dict[str, Any]:
    """The :data:`SHAPE_KEYS` of a ``comm`` config section (its dataclass, or a mapping such as a bench row's,
    missing keys at :class:`Point`'s defaults), as :class:`Point` fields."""
    if isinstance(comm, Mapping):
        defaults = {f.name: f.default for f in fields(Point)}
        return {k: comm.get(k, defaults[k]) for k in SHAPE_KEYS}
    return {k: getattr(comm, k) for k in SHAPE_KEYS}


def load_simgrid() -> Any:  # python3-simgrid ships no type information: its module and objects are Any here
    """The simgrid module (Debian's, from its dist-packages if the venv lacks it); a one-line UserError if absent.

    Importing it prints a line of SimGrid's configuration log (``[xbt_cfg/INFO] Configuration change: Set
    'contexts/factory' to 'thread'``) before any engine exists to take a ``--log`` option, so ahead of every
    message of the command; the import runs with that line held back (:func:`_without_config_lines`).
    """
    loaded = sys.modules.get("simgrid")
    if loaded is not None:
        return loaded
    with _without_config_lines():
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


CONFIG_LOG = b"[xbt_cfg/INFO]"  # SimGrid's configuration log at level INFO: the settings it takes, not problems


@contextmanager
def _without_config_lines() -> Iterator[None]:
    """Inside, what is written to file descriptor 2 (stderr, where SimGrid's C++ log writes) is held in a
    temporary file; after, it is written to stderr less SimGrid's :data:`CONFIG_LOG` lines."""
    sys.stderr.flush()
    with tempfile.TemporaryFile() as held:
        saved = os.dup(2)
        os.dup2(held.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            held.seek(0)
            kept = b"".join(line for line in held.read().splitlines(keepends=True) if CONFIG_LOG not in line)
            if kept:
                os.write(2, kept)


def _torus(sg: Any, dims: tuple[int, ...], platform: Platform) -> list[Any]:
    """SimGrid's torus zone of ``dims`` chips (split-duplex links, its own dimension-order routing); the hosts.

    Each chip's loopback link runs at 1/gamma bytes/s: a reduction of n
    bytes is a transfer of n bytes from the chip to itself.
    """

    def netpoint(zone: Any, _coord: list[int], ident: int) -> tuple[Any, None]:
        return zone.create_host(f"rank{ident}", 1e12).seal().netpoint, None

    def loopback(zone: Any, _coord: list[int], ident: int) -> Any:
        return zone.create_link(f"rank{ident}.reduce", _reduce_rate(platform)).seal()

    sg.NetZone.create_torus_zone(
        "torus",
        None,
        list(dims),
        sg.ClusterCallbacks(netpoint, loopback, None),
        platform.link_GBps * 1e9,
        platform.latency_us * 1e-6,
        sg.Link.SharingPolicy.SPLITDUPLEX,
    ).seal()
    return [sg.Host.by_name(f"rank{r}") for r in range(math.prod(dims))]


def _reduce_rate(platform: Platform) -> float:
    """Bytes per second a rank reduces (1/gamma; effectively instant when gamma is 0)."""
    return 1.0 / platform.gamma_s_per_byte if platform.gamma_s_per_byte > 0 else 1e18


def _fattree(sg: Any, nodes: tuple[int, ...], platform: Platform, pairs: set[tuple[int, int]]) -> list[Any]:
    """Nodes of ranks with a port each (in and out), adapters per node, a core link if oversubscribed; the hosts.

    Routes are added for the (sender, receiver) pairs the schedules use only,
    so a thousand ranks do not need a million routes; a rank's route to
    itself is its reduction link (1/gamma bytes/s).
    """
    zone = sg.NetZone.create_full_zone("fattree")
    p, nics, nic = len(nodes), platform.nics_per_node, _nic(platform, len(nodes))
    hosts = [zone.create_host(f"rank{r}", 1e12).seal() for r in range(p)]

    def link(name: str, rate: float, latency_us: float = 0.0) -> Any:
        made = zone.create_link(name, rate)
        made.set_latency(latency_us * 1e-6)
        return made.seal()

    intra = (platform.intra_GBps or platform.link_GBps) * 1e9
    port = [(link(f"r{r}.out", intra, platform.intra_latency_us), link(f"r{r}.in", intra)) for r in range(p)]
    adapter = (
        {
            (n, k): (
                link(f"n{n}.nic{k}.out", platform.link_GBps * 1e9, platform.latency_us),
                link(f"n{n}.nic{k}.in", platform.link_GBps * 1e9),
            )
            for n in set(nodes)
            for k in range(nics)
        }
        if len(set(nodes)) > 1
        else {}
    )
    core = []
    if platform.oversubscription > 1 and adapter:
        core = [link("core", len(adapter) * platform.link_GBps * 1e9 / platform.oversubscription)]
    for src, dst in sorted(pairs | {(r, r) for r in range(p)}):
        if src == dst:
            route = [link(f"r{src}.reduce", _reduce_rate(platform))]
        elif nodes[src] == nodes[dst]:
            route = [port[src][0], port[dst][1]]
        else:
            route = [adapter[nodes[src], nic(src)][0], *core, adapter[nodes[dst], nic(dst)][1]]
        zone.add_route(hosts[src].netpoint, hosts[dst].netpoint, None, None, [sg.LinkInRoute(x) for x in route], False)
    zone.seal()
    return hosts


def _shared(point: Point, pattern: Sequence[Schedule]) -> bool:
    """Whether two messages of the one-stage schedules ``pattern`` cross one network link: a node's adapter or
    the core link of a fat tree (a rank's own port is its alone), or a torus link (:func:`_torus_links`)."""
    dims, nodes = point.platform.ranks(point.ranks)
    sent = sent_pairs(pattern)
    if dims:
        used = Counter(link for a, b in sent for link in _torus_links(dims, a, b))
        return any(n > 1 for n in used.values())
    crossing = [(a, b) for a, b in sent if nodes[a] != nodes[b]]
    if point.platform.oversubscription > 1 and len(crossing) > 1:
        return True
    nic = _nic(point.platform, len(nodes))
    out = Counter((nodes[a], nic(a)) for a, _ in crossing)
    into = Counter((nodes[b], nic(b)) for _, b in crossing)
    return any(n > 1 for n in (*out.values(), *into.values()))


def _nic(platform: Platform, ranks: int) -> Callable[[int], int]:
    """The adapter of its node a rank's messages to other nodes take (local rank i on adapter i mod nics)."""
    g, nics = min(platform.ranks_per_node, ranks), platform.nics_per_node
    return lambda rank: (rank % g) % nics


def _torus_links(dims: tuple[int, ...], a: int, b: int) -> list[tuple[int, int, int]]:
    """The links (rank, dimension, +1 or -1) a message from rank a to rank b takes on a torus of ``dims`` (first
    dimension fastest in the rank), routed dimension by dimension the shorter way round: an estimate of
    SimGrid's routes, enough to tell messages that share a link from those that do not."""
    strides = [math.prod(dims[:k]) for k in range(len(dims))]
    at, links = a, []
    for k, d in enumerate(dims):
        here, there = at // strides[k] % d, b // strides[k] % d
        step = 1 if (there - here) % d <= (here - there) % d else -1
        while here != there:
            links.append((at, k, step))
            at += (((here + step) % d) - here) * strides[k]
            here = (here + step) % d
    return links


def _pairs(schedules: Sequence[Schedule]) -> set[tuple[int, int]]:
    """Every (sender, receiver) pair the schedules send on."""
    return set(sent_pairs(schedules))


class _Driver:
    """Runs every rank's schedule from a few actors: host-to-host transfers, started as both ends reach them.

    Each lane of each rank (a *unit*) runs its stages in order, lanes
    independently, as the executors run them, except that a unit whose
    lane follows another (``Schedule.follows``) enters its stage k only
    once that lane's unit on the same rank has left it. A message starts
    when its sender and its receiver have both reached the stages holding
    it (matched in order per sender, receiver and lane, as MPI matches); a
    unit's stage ends when all its messages have arrived, then it reduces
    (a transfer from its rank to itself, on the rank's 1/gamma link, which
    the rank's lanes share) and moves on; when ``streamed``, that reduction
    starts with the stage's messages and counts as one of them. SimGrid's Python actors are
    threads: a thousand of them (one per rank) spend most of the time
    switching, and one actor waiting on every transfer at once spends it
    in ``wait_any`` over thousands. So a few actors each wait on the
    transfers they started, handing half to a new actor when they hold
    more than ``2 x PER_ACTOR``. Actors run one at a time, so they share
    the units' state safely; a unit's counts are set before its first
    transfer starts, so no completion can be seen before them. Units move
    on through a work list (:meth:`_run`), not by recursion, since one
    unit leaving a stage may let a chain of followers through many empty
    stages.
    """

    def __init__(
        self,
        sg: Any,
        schedules: Sequence[Schedule],
        hosts: list[Any],
        itemsize: int,
        gamma: float,
        streamed: bool,
        done: Callable[[], None] | None = None,
    ) -> None:
        """Ready to run ``schedules`` on ``hosts``; ``done`` is called when the last lane has left its last stage."""
        self.sg, self.hosts, self.itemsize, self.gamma, self.streamed = sg, hosts, itemsize, gamma, streamed
        self.done = done
        self.base = [0]
        for sched in schedules:
            self.base.append(self.base[-1] + len(sched.lanes))
        self.rank = [r for r, sched in enumerate(schedules) for _ in sched.lanes]
        self.lane = [(i, lane) for sched in schedules for i, lane in enumerate(sched.lanes)]
        n = len(self.rank)
        self.leader = [
            self.base[r] + sched.after(i) if sched.after(i) >= 0 else -1
            for r, sched in enumerate(schedules)
            for i in range(len(sched.lanes))
        ]
        self.followers: list[list[int]] = [[] for _ in range(n)]
        for u, lead in enumerate(self.leader):
            if lead >= 0:
                self.followers[lead].append(u)
        self.stage, self.pending, self.reduced = [0] * n, [0] * n, [0] * n
        self.entered = [-1] * n  # the stage each unit has posted the messages of (-1: none yet)
        self.running = sum(1 for _, lane in self.lane if lane)  # units that have not left their last stage
        self.ended = [-1.0] * n  # when each unit left its last stage (-1: it had none, or has not)
        self.sends: dict[tuple[int, int, int], deque[int]] = defaultdict(deque)
        self.recvs: dict[tuple[int, int, int], int] = defaultdict(int)

    def spreads(self) -> tuple[float, float, float]:
        """How far apart the lanes ended (each lane at its last rank), the most one rank's lanes ended apart, and
        how far apart the first and the last unit ended."""
        lanes: dict[int, float] = {}
        ranks: dict[int, list[float]] = defaultdict(list)
        for u, end in enumerate(self.ended):
            if end >= 0:
                index = self.lane[u][0]
                lanes[index] = max(lanes.get(index, 0.0), end)
                ranks[self.rank[u]].append(end)
        if not lanes:
            return 0.0, 0.0, 0.0
        ends = [e for e in self.ended if e >= 0]
        return (
            max(lanes.values()) - min(lanes.values()),
            max(max(e) - min(e) for e in ranks.values()),
            max(ends) - min(ends),
        )

    def unfinished(self) -> list[int]:
        """The ranks with a lane that did not run to its end."""
        return sorted({self.rank[u] for u, (_, lane) in enumerate(self.lane) if self.stage[u] < len(lane)})

    def actor(self, first: range) -> Any:
        """The body of one actor: units ``first`` enter their first stage; it then serves what it started."""

        def run() -> None:
            out: _Started = ([], [])
            self._run(list(first), out)
            self._serve(out)

        return run

    def _serve(self, out: _Started) -> None:
        """Wait on the transfers in ``out`` as they complete, handing half to a new actor when there are too many."""
        active, what = out
        while active:
            if len(active) > 2 * PER_ACTOR:
                split: _Started = (active[PER_ACTOR:], what[PER_ACTOR:])
                del active[PER_ACTOR:], what[PER_ACTOR:]
                self.sg.Actor.create("driver", self.hosts[0], self._serve, split)
            i = self.sg.Comm.wait_any(active)
            src, dst = what[i]
            active[i], what[i] = active[-1], what[-1]
            active.pop()
            what.pop()
            moved: list[int] = []
            if src == dst and not self.streamed:
                self._advance(src, moved)
            elif src == dst:
                self._arrived(src, out, moved)
            else:
                self._arrived(src, out, moved)
                self._arrived(dst, out, moved)
            self._run(moved, out)

    def _run(self, todo: list[int], out: _Started) -> None:
        """Units ``todo`` enter their current stage, and so on for every unit that lets through."""
        while todo:
            self._enter(todo.pop(), out, todo)

    def _enter(self, u: int, out: _Started, moved: list[int]) -> None:
        """Unit u posts the messages of its current stage, unless it has, or it must wait for its leader."""
        (index, lane), k = self.lane[u], self.stage[u]
        if k >= len(lane) or self.entered[u] == k:
            return
        lead = self.leader[u]
        if lead >= 0 and self.stage[lead] <= k and self.stage[lead] < len(self.lane[lead][1]):
            return  # the leader's advance lets it in
        self.entered[u] = k
        steps = cast("tuple[Send | Recv, ...]", lane[k])  # schedules() expanded every AllReduce into sends and receives
        self.pending[u] = len(steps)
        self.reduced[u] = sum((s[2] - s[1]) * self.itemsize for s in steps if type(s) is Recv and s[3])
        if self.streamed and self.reduced[u] and self.gamma:  # the sum runs beside the messages, one more of them
            self.pending[u] += 1
            self._start(u, u, self.reduced[u], out)
            self.reduced[u] = 0
        if not steps:
            self._finish(u, out, moved)
        for step in steps:
            size, peer = (step[2] - step[1]) * self.itemsize, self.base[step[0]] + index
            if type(step) is Send:
                key = (u, peer, index)
                if self.recvs[key]:
                    self.recvs[key] -= 1
                    self._start(u, peer, size, out)
                else:
                    self.sends[key].append(size)
            else:
                key = (peer, u, index)
                if self.sends[key]:
                    self._start(peer, u, self.sends[key].popleft(), out)
                else:
                    self.recvs[key] += 1

    def _start(self, src: int, dst: int, size: int, out: _Started) -> None:
        """A transfer of ``size`` bytes from unit src's host to dst's (a reduction when src == dst), in ``out``."""
        out[1].append((src, dst))
        out[0].append(self.sg.Comm.sendto_async(self.hosts[self.rank[src]], self.hosts[self.rank[dst]], size))

    def _arrived(self, u: int, out: _Started, moved: list[int]) -> None:
        """One of unit u's messages is done."""
        self.pending[u] -= 1
        if self.pending[u] == 0:
            self._finish(u, out, moved)

    def _finish(self, u: int, out: _Started, moved: list[int]) -> None:
        """Unit u's messages are done: reduce what it received, then move on."""
        if self.reduced[u] and self.gamma:
            self._start(u, u, self.reduced[u], out)
        else:
            self._advance(u, moved)

    def _advance(self, u: int, moved: list[int]) -> None:
        """Unit u leaves its stage: it and the units that follow it are to enter their next."""
        self.stage[u] += 1
        moved.append(u)
        if self.stage[u] == len(self.lane[u][1]):
            self.ended[u] = self.sg.Engine.clock
            self.running -= 1
            if self.running == 0 and self.done is not None:
                self.done()
        moved.extend(self.followers[u])


_Started = tuple[list[Any], list[tuple[int, int]]]  # one actor's transfers in flight and (sender, receiver) of each
ACTORS = 32  # driver actors at the start
PER_ACTOR = 16  # transfers one actor waits on before it hands half to a new one: wait_any's cost grows with the list


def run_point(point: Point) -> dict[str, Any]:
    """Simulate ``point`` in this process (once per process); its result row.

    By pattern (:mod:`scalerepro.sim.patterns`) where ``point.method`` is
    ``fast`` and the schedule allows it: the patterns run in a forked
    child (one engine per process), so that where they show the lanes out
    of step this process still has its engine for the full simulation.
    """
    load_simgrid()
    t0 = time.perf_counter()
    with no_cyclic_gc():
        found = group_stages(point.read) if point.method == "fast" else "asked for (method full)"
        seconds, method = None, "full"
        if isinstance(found, Plan):
            grouped, sent = found, found.messages()
            over = 0 < point.full_max_messages < sent
            seconds, steady = _forked(lambda: _run_patterns(point, grouped, over))
            method = PATTERNS if steady else APPROXIMATE if seconds is not None else "full"
            found = grouped if steady else f"{OUT_OF_STEP}, {sent} messages" if over else OUT_OF_STEP
        if seconds is None:
            ranks = point.schedules()
            seconds, patterns, stages = _run_full(point, ranks), 0, _stages(ranks)
        else:
            patterns, stages = len(grouped.counts), grouped.stages
    dims, nodes = point.platform.ranks(point.ranks)
    algbw = point.nbytes / seconds / 1e9 if seconds > 0 else 0.0
    return {
        "platform": point.platform.name,
        "variant": point.platform.variant,
        "algorithm": point.algorithm,
        "ranks": point.ranks,
        "bytes": point.nbytes,
        "itemsize": point.itemsize,
        "shape": list(dims) if dims else [min(point.platform.ranks_per_node, point.ranks), len(set(nodes))],
        "simulated_s": seconds,
        "algbw_GBps": algbw,
        "busbw_GBps": algbw * 2 * (point.ranks - 1) / point.ranks,
        "method": method,
        "why_full": "" if isinstance(found, Plan) else found,
        "stages": stages,
        "patterns": patterns,
        "wall_s": time.perf_counter() - t0,
    }


def _engine() -> Any:
    """SimGrid's engine for this process, CM02 without cross traffic, its log at critical only."""
    return load_simgrid().Engine(
        ["scalerepro", "--log=root.thres:critical", "--cfg=network/model:CM02", "--cfg=network/crosstraffic:0"]
    )


def _forked(work: Callable[[], _T]) -> _T:
    """``work()`` run in a forked child (which makes its own engine); its answer, or its UserError raised here."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: answer down the pipe and exit, never unwind into the caller
        os.close(read)
        try:
            answer: tuple[str, Any] = ("ok", work())
        except BaseException as exc:
            answer = ("error", str(exc))
        data = pickle.dumps(answer)
        while data:
            data = data[os.write(write, data) :]
        os._exit(0)
    os.close(write)
    chunks = []
    while chunk := os.read(read, 1 << 16):
        chunks.append(chunk)
    os.close(read)
    status = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    if not chunks:
        raise UserError(f"simulate: the process simulating the patterns ended (exit status {status}) without an answer")
    kind, value = pickle.loads(b"".join(chunks))
    if kind == "error":
        raise UserError(value)
    return cast("_T", value)


def _stages(ranks: list[Schedule]) -> int:
    """The stages of the longest lane."""
    return max((len(lane) for s in ranks for lane in s.lanes), default=0)


def _hosts(sg: Any, point: Point, pairs: set[tuple[int, int]]) -> list[Any]:
    """The platform's hosts for ``point``, routes for ``pairs`` where the platform is a fat tree."""
    dims, nodes = point.platform.ranks(point.ranks)
    return _torus(sg, dims, point.platform) if dims else _fattree(sg, nodes, point.platform, pairs)


def _driver(
    sg: Any, point: Point, ranks: Sequence[Schedule], hosts: list[Any], done: Callable[[], None] | None
) -> _Driver:
    """A driver for ``ranks`` on ``hosts``, its actors created (they start when the engine runs or at once)."""
    plat = point.platform
    driver = _Driver(sg, ranks, hosts, point.itemsize, plat.gamma_s_per_byte, plat.reduction == "streamed", done)
    units, actors = len(driver.rank), min(ACTORS, point.ranks)
    for j in range(actors):
        sg.Actor.create(f"driver{j}", hosts[j], driver.actor(range(j, units, actors)))
    return driver


def _stuck(point: Point, driver: _Driver) -> None:
    """A UserError where a rank of ``driver`` did not finish (its schedule's messages do not match)."""
    unfinished = driver.unfinished()
    if unfinished:
        raise UserError(
            f"simulate: {point.algorithm} on {point.ranks} ranks stopped with rank {unfinished[0]} "
            "waiting for a message (a schedule whose messages do not match)"
        )


def _run_full(point: Point, ranks: list[Schedule]) -> float:
    """Every stage of every rank in one run of the engine; the simulated seconds."""
    engine, sg = _engine(), load_simgrid()
    driver = _driver(sg, point, ranks, _hosts(sg, point, _pairs(ranks)), None)
    engine.run()
    _stuck(point, driver)
    return float(engine.clock)


def _run_patterns(point: Point, found: Plan, anyway: bool) -> tuple[float | None, bool]:
    """Each pattern of ``found`` alone, one after another in one run of the engine: (the all-reduce's seconds, the
    sum over stages of their pattern's time; whether every pattern ran in step). Where a pattern runs out of step,
    the seconds are None and the run stops there, unless ``anyway`` asks for the sum all the same (approximate:
    :mod:`scalerepro.sim.patterns`)."""
    engine, sg = _engine(), load_simgrid()
    hosts = _hosts(sg, point, set().union(*(_pairs(p) for p in found.patterns)))
    gamma = point.platform.gamma_s_per_byte * point.itemsize if point.platform.reduction == "after" else 0.0
    seconds: list[float] = []
    drivers: list[_Driver] = []
    steady = [True]

    def start() -> None:
        pattern, begun = found.patterns[len(drivers)], float(engine.clock)

        def done() -> None:
            took = float(engine.clock) - begun
            if not in_step(took, *drivers[-1].spreads(), gamma * most_summed(pattern), _shared(point, pattern)):
                steady[0] = False
                if not anyway:
                    return
            seconds.append(took)
            if len(drivers) < len(found.patterns):
                start()

        drivers.append(_driver(sg, point, pattern, hosts, done))

    start()
    engine.run()
    for driver in drivers:
        _stuck(point, driver)
    if len(seconds) < len(found.patterns):
        return None, False
    return found.total(seconds), steady[0]
