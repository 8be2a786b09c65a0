"""The fast path: a schedule's stages grouped by the pattern of transfers they make, each pattern simulated once.

A ring's 2(p-1) stages are two patterns (every rank sends a chunk to its
right and reduces, or copies, what comes from its left), a 2-D torus
algorithm's a few per phase, recursive halving's one per level. The full
simulation (:class:`scalerepro.sim.engine._Driver` on every stage) pays
for every transfer of every stage: a ring of 4,096 ranks is 33 million.
Here the stages are read once (:func:`group_stages`) and grouped by a *pattern*:
what each rank's each lane sends and receives in the stage (peer, bytes,
whether it reduces). Every distinct pattern is simulated alone, all its
transfers starting together (the same driver, on one-stage schedules,
:func:`scalerepro.sim.engine.run_patterns`), and the all-reduce's time is
the sum over its stages of their pattern's time.

That sum is exact where every rank's every stage starts together, as on
a torus whose ranks all do the same; where some ranks finish a stage
early and start the next while others are still at work (the full
simulation lets them; this sum makes them wait), it is mostly above the
full simulation's. On fat trees whose rings cross node borders the two
agree to the README's table (``scalerepro simulate --method both``), and
a test checks the agreement at small scale on every platform shape and
algorithm.

Why this design over others: the stage boundaries are in the schedules
already, so no algorithm has to declare its symmetry and a new one is
grouped the moment it is listed; the transfers of one stage are still
simulated as SimGrid shares links among them (contention inside a stage
is exact), and only their overlap with a neighbouring stage is lost.

Two stages are one pattern when they make the same transfers and their
message sizes agree to one element or :data:`SIZE_TOLERANCE`: a buffer of
n elements split over p ranks leaves chunks of floor(n/p) and that plus
one, so a ring's stage k and stage k+1 differ in which rank sends the
larger, and would never repeat exactly (at 4,096 ranks in two colors,
ResNet-50's largest bucket leaves chunks of 795 and 796 floats, 0.13%
apart). A stage whose sizes all lie within one element or the tolerance
of its largest is simulated with every message at the largest (so the
sum can only err upwards, by one element a message or the tolerance); a
stage with sizes of several magnitudes is grouped only with stages of
exactly its sizes. The full simulation runs instead where the sum does not hold:

* schedules whose lanes are ordered into pipelines (``Schedule.follows``:
  the pipelined trees), where a stage's point is to overlap the next;
* schedules whose stages do not match within themselves (a message sent
  in one stage and received in another);
* lanes out of step: the sum makes a schedule's lanes (torus2d's halves,
  multicolor's colors) enter each stage together, as the torch executor
  runs them, where the MPI executor and the full simulation let each run
  ahead. Where a pattern's lanes end within :data:`LANE_TOLERANCE` of
  each other that changes nothing; where they do not (torus2d's halves on
  a fat tree, one in its node's ring while the other crosses the
  network, up to 9% apart at 256 ranks), the pattern run is thrown away;
* lanes of one rank that end a stage apart, where the rank sums after the
  bytes arrive (``reduction: after``) on one rate its lanes share: the
  full simulation lets one lane sum while another still receives, where
  this sum makes them sum together. NCCL's rings (one per adapter, each
  crossing the nodes at other ranks) do; with sums at a tenth of the
  link's rate that cost 12% (``tests/sim/test_patterns.py``). So where
  a rank's sums take over :data:`SUM_SHARE` of such a pattern, the full
  simulation runs;
* ranks that end a stage apart while messages share a network link (a
  fat tree's 2:1 core, an adapter two messages leave by, a torus route
  of several hops): in the full simulation the ranks that finish early
  start their next messages and the shared link carries fewer at once,
  where this sum makes them all cross it together. The ring over Kumar
  et al.'s cluster with its core at 2:1 came out 21% slow at 26 MB before
  this rule. Ranks that end apart on links of their own (a ring's node
  borders on a full-bisection fat tree) change nothing: the ring's chain
  of messages makes every stage wait for its slowest link either way.

Where the full simulation would start more messages than
``Point.full_max_messages`` (a ring of 4,096 ranks at a 2:1 corner: 33
million), a schedule found out of step keeps its sum over patterns,
marked :data:`APPROXIMATE`: on the test's platforms and Kumar et al.'s
slow corner it came 2% under to 22% over the full simulation
(``tests/sim/test_patterns.py``), so such a figure is a projection, not a
measurement of the simulator.

The schedules are read twice (once to group the stages, once to keep the
first stage of each pattern) rather than kept, so that a ring of 4,096
ranks, whose schedules hold 67 million steps, is never in memory whole.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import cast

from scalerepro.comm.schedule import Lane, Recv, Schedule, Send

LANE_TOLERANCE = 1e-3  # a pattern's lanes may end this share of its time apart (module docstring)
SUM_SHARE = 0.1  # ... and one rank's lanes further apart only where its sums take at most this share of it
SIZE_TOLERANCE = 1e-3  # two stages' message sizes agree within this share of the larger (module docstring)
MASK = (1 << 64) - 1


@dataclass(frozen=True)
class Plan:
    """A schedule's stages grouped into patterns: each pattern's stage count and its one-stage schedules (per rank)."""

    counts: tuple[int, ...]  # per pattern, how many stages make it
    patterns: tuple[tuple[Schedule, ...], ...]  # per pattern, every rank's one-stage schedule (lanes kept in place)
    stages: int  # stages in all

    def messages(self) -> int:
        """The messages of the whole schedule: what its full simulation starts."""
        return sum(n * len(sent_pairs(p)) for n, p in zip(self.counts, self.patterns, strict=True))

    def total(self, seconds: Iterable[float]) -> float:
        """The all-reduce's time from each pattern's simulated time."""
        return sum(n * t for n, t in zip(self.counts, seconds, strict=True))


_Key = tuple[str, int, tuple[tuple[int, int], ...]]  # uniform or exact, a hash, per lane the size to pad to


@dataclass
class _Stage:
    """What pass one keeps of one stage: the sum of its transfers' hashes without and with sizes, and per lane the
    range of its message sizes."""

    shape: int = 0
    exact: int = 0
    sizes: dict[int, tuple[int, int]] = field(default_factory=dict)  # lane -> (smallest, largest) message

    def key(self) -> _Key:
        """The stage's pattern (module docstring): its transfers and each lane's largest size where each lane's sizes
        agree, else its exact sizes."""
        if all(high <= max(low * (1 + SIZE_TOLERANCE), low + 1) for low, high in self.sizes.values()):
            return ("uniform", self.shape, tuple(sorted((lane, high) for lane, (_, high) in self.sizes.items())))
        return ("exact", self.exact, ())


PATTERNS = "patterns"  # a row's method: the sum over patterns, every one in step
APPROXIMATE = "patterns (approximate)"  # ... some out of step, the full simulation over Point.full_max_messages
PIPELINED = "pipelined lanes"
UNMATCHED = "stages that do not match within themselves"
OUT_OF_STEP = "ranks or lanes out of step"  # found by scalerepro.sim.engine when a pattern's lanes end apart


def group_stages(read: Callable[[], Iterable[Schedule]]) -> Plan | str:
    """The stages of the schedules ``read()`` yields (every rank's, in rank order) grouped into patterns, or why the
    fast path does not apply (:data:`PIPELINED`, :data:`UNMATCHED`). ``read`` is called twice."""
    stages: list[_Stage] = []
    for rank, sched in enumerate(read()):
        if sched.follows:
            return PIPELINED
        for index, lane in enumerate(sched.lanes):
            _tally(rank, index, lane, stages)
    keys = [s.key() for s in stages]
    first: dict[_Key, int] = {}
    counts: dict[_Key, int] = {}
    for k, key in enumerate(keys):
        first.setdefault(key, k)
        counts[key] = counts.get(key, 0) + 1
    wanted = {k: dict(key[2]) for key, k in first.items()}  # stage -> per lane the size to pad to (none: as they are)
    kept: dict[int, list[Schedule]] = {k: [] for k in wanted}
    for sched in read():
        for k, pads in wanted.items():
            kept[k].append(_one_stage(sched, k, pads))
    patterns = tuple(tuple(kept[k]) for k in first.values())
    if not all(_matched(p) for p in patterns):
        return UNMATCHED
    return Plan(tuple(counts[key] for key in first), patterns, len(stages))


def _matched(pattern: Iterable[Schedule]) -> bool:
    """Every message of the one-stage schedules ``pattern`` is both sent and received in it (by sender, receiver
    and lane), so the stage runs alone; stages of one pattern make the same messages, so one checks them all."""
    balance: Counter[tuple[int, int, int]] = Counter()
    for rank, sched in enumerate(pattern):
        for index, lane in enumerate(sched.lanes):
            for step in _messages(lane)[0] if lane else ():
                balance[(rank, step[0], index) if type(step) is Send else (step[0], rank, index)] += (
                    1 if type(step) is Send else -1
                )
    return not any(balance.values())


def _tally(rank: int, index: int, lane: Lane, stages: list[_Stage]) -> None:
    """Add lane ``index`` of ``rank`` to the per-stage sums."""
    while len(stages) < len(lane):
        stages.append(_Stage())
    for k, stage in enumerate(_messages(lane)):
        if not stage:
            continue
        acc = stages[k]
        shape, exact = acc.shape, acc.exact
        low, high = acc.sizes.get(index, (1 << 62, 0))
        for step in stage:
            size = step[2] - step[1]
            what = (rank, index, type(step) is Send, step[0], step[3])
            shape += hash(what)
            exact += hash((what, size))
            low = min(low, size)
            high = max(high, size)
        acc.shape, acc.exact, acc.sizes[index] = shape & MASK, exact & MASK, (low, high)


def in_step(
    took: float, lanes_apart: float, rank_apart: float, units_apart: float, summing: float, shared: bool
) -> bool:
    """Whether a pattern that took ``took`` seconds ran in step (module docstring): its lanes ended within
    :data:`LANE_TOLERANCE` of ``took`` of each other (``lanes_apart``, each lane at its last rank); where one
    rank's lanes ended further apart (``rank_apart``), the rank's sums (``summing`` seconds, 0 where it sums as the
    bytes stream in) are at most :data:`SUM_SHARE` of it; and where its units ended further apart
    (``units_apart``), no two of its messages share a network link (``shared``)."""
    tolerance = LANE_TOLERANCE * took
    if lanes_apart > tolerance:
        return False
    if units_apart > tolerance and shared:
        return False
    return rank_apart <= tolerance or summing <= SUM_SHARE * took


def most_summed(pattern: Iterable[Schedule]) -> int:
    """The most elements one rank of the one-stage schedules ``pattern`` adds into its buffer, over its lanes."""
    return max(
        (
            sum(
                s.hi - s.lo
                for lane in sched.lanes
                for stage in _messages(lane)
                for s in stage
                if type(s) is Recv and s.reduce
            )
            for sched in pattern
        ),
        default=0,
    )


def sent_pairs(schedules: Iterable[Schedule]) -> list[tuple[int, int]]:
    """(sender, receiver) of every message the schedules (every rank's, in rank order) send, once per message."""
    return [(r, step.peer) for r, s in enumerate(schedules) for step in s.steps() if isinstance(step, Send)]


def _one_stage(sched: Schedule, k: int, pads: Mapping[int, int]) -> Schedule:
    """Stage ``k`` of every lane of ``sched`` as a schedule of one stage per lane (empty where a lane has no stage k),
    every message of lane i ``pads[i]`` elements long where that is given."""
    lanes: list[Lane] = []
    for index, lane in enumerate(sched.lanes):
        if k >= len(lane):
            lanes.append(())
            continue
        stage, pad = _messages(lane)[k], pads.get(index, 0)
        if pad:
            stage = tuple(
                Send(s.peer, 0, pad, s.reduce) if type(s) is Send else Recv(s.peer, 0, pad, s.reduce) for s in stage
            )
        lanes.append((stage,))
    return Schedule(tuple(lanes))


def _messages(lane: Lane) -> tuple[tuple[Send | Recv, ...], ...]:
    """``lane`` as the simulator takes it: every collective expanded (costterms.schedules) into sends and receives."""
    return cast("tuple[tuple[Send | Recv, ...], ...]", lane)
