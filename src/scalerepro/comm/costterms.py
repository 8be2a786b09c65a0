"""Alpha-beta-gamma cost of an all-reduce, read off the schedules its ranks run.

The schedules are the ones the executors run; they are priced stage by
stage, with the lanes of one stage index taken together:

    t = sum over stages of  alpha(stage) + max over links of (bytes on it x beta) + gamma x max bytes a rank reduces

where alpha(stage) is the latency of the slowest message class in the
stage. That sums after the stage's messages arrive, as this project's
executors do; a machine that sums as the bytes stream in (``reduction:
streamed``, :data:`REDUCTIONS`) pays per stage the larger of its
transfer (latency included) and its sum instead of both. Which links a
message loads is its :class:`~scalerepro.comm.placement.Placement`'s
(:mod:`scalerepro.comm.placement`); what a link costs is a
:class:`Network`'s. So two algorithms' costs differ exactly where their
schedules do, and the model cannot drift from the code. A library
collective (``native``, ``gloo``, ``nccl``, hierarchical's inter-node
phase) is modelled by the algorithm its library uses for large messages:
Rabenseifner's for MPI (MPICH), the ring for gloo and NCCL.

The closed form leaves pipelining out (:func:`terms` and the projections
build the schedules with ``chunk_bytes`` at
:data:`~scalerepro.comm.schedule.UNCUT`): taking every lane's stage k
together, it cannot see a pipelined tree's levels overlap, so a tree's
byte terms here are its unpipelined ones. The simulator runs the pipeline
(:mod:`scalerepro.sim.engine`).

:func:`schedules` expands the collectives, :func:`profile` reduces every
rank's schedule to per-stage maxima (:class:`Profile`), and
:meth:`Profile.cost` prices them on a :class:`Network`; :func:`terms`
gives the (A, B, G) sums that fitting (:mod:`scalerepro.comm.costfit`)
multiplies by alpha, beta and gamma.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from scalerepro.comm import rabenseifner, ring
from scalerepro.comm.algorithms import ALGORITHMS
from scalerepro.comm.placement import ONE_NODE, Placement, on_node, rail_routes, torus_routes
from scalerepro.comm.schedule import UNCUT, AllReduce, Recv, Schedule, Send, Spec, Stage
from scalerepro.errors import UserError

LIBRARY_MODEL = {"mpi": rabenseifner, "torch": ring}  # what a library collective is modelled as, per executor
# when a rank sums what a stage brought: once it has all arrived (this project's executors), or as it streams in
REDUCTIONS = ("after", "streamed")


@dataclass(frozen=True)
class Network:
    """What a message costs: latency (s) and time per byte (s/B) on a node and on the network, and gamma.

    On a torus every hop is a network link (``inter_*``, latency per hop). ``reduction`` is one of
    :data:`REDUCTIONS`.
    """

    intra_alpha: float
    intra_beta: float
    gamma: float = 0.0
    inter_alpha: float = 0.0
    inter_beta: float = 0.0
    reduction: str = "after"


@dataclass(frozen=True)
class Profile:
    """Per stage: whether it carries a message, the most bytes on any node port, on any network link (adapter
    rail, or torus link), the most hops a message takes (1 for any inter-node message), the most bytes a rank
    reduces. Independent of the costs, so one profile serves every fit."""

    busy: np.ndarray
    intra: np.ndarray
    inter: np.ndarray
    hops: np.ndarray
    reduced: np.ndarray

    def cost(self, net: Network) -> Cost:
        """Seconds on ``net``: per stage its latency, its slowest link, its largest reduction (streamed: the part
        of it longer than the stage's transfer, latency included, as the sum starts with the stage)."""
        alpha = np.where(self.hops > 0, self.hops * net.inter_alpha, self.busy * net.intra_alpha)
        beta = np.maximum(self.intra * net.intra_beta, self.inter * net.inter_beta)
        gamma = self.reduced * net.gamma
        if net.reduction == "streamed":
            gamma = np.maximum(gamma - alpha - beta, 0.0)
        return Cost(float(alpha.sum()), float(beta.sum()), float(gamma.sum()), int(self.busy.sum()))


@dataclass(frozen=True)
class Cost:
    """Seconds of one all-reduce, split into its latency, bandwidth and reduction (the part not streamed under
    the transfers) parts, and its stages."""

    alpha_s: float
    beta_s: float
    gamma_s: float
    stages: int

    @property
    def seconds(self) -> float:
        """The total."""
        return self.alpha_s + self.beta_s + self.gamma_s


def schedules(algo: str, spec: Spec, executor: str = "mpi") -> Iterator[Schedule]:
    """Every rank's schedule of ``algo`` for ``spec`` (collectives expanded into their library's model)."""
    entry = ALGORITHMS.get(algo)
    if entry is None:
        raise UserError(f"no cost model for {algo!r}; modelled: {', '.join(sorted(ALGORITHMS))}")
    model = entry.model or LIBRARY_MODEL[entry.executor or executor].schedule
    for r in range(spec.p):
        yield _expand(entry.schedule(replace(spec, rank=r)), spec, r, model)


def _expand(schedule: Schedule, spec: Spec, rank: int, model: Callable[[Spec], Schedule]) -> Schedule:
    """``schedule`` with each collective stage replaced by the stages of the library's model on the group.

    A lane that is one collective becomes the model's lanes, running side
    by side as the model's do; inside a longer lane the model's lanes run
    one after another.
    """
    if not any(isinstance(s, AllReduce) for s in schedule.steps()):
        return schedule
    if schedule.follows:
        raise ValueError("a schedule with pipelined lanes holds no library collective (none is modelled)")
    lanes: list[tuple[Stage, ...]] = []
    for lane in schedule.lanes:
        stages: list[Stage] = []
        for stage in lane:
            if len(stage) == 1 and isinstance(stage[0], AllReduce):
                inner = _modelled(stage[0], schedule, spec, rank, model)
                if len(lane) == 1:
                    lanes += inner
                    continue
                stages += [st for inner_lane in inner for st in inner_lane]
            else:
                stages.append(stage)
        if stages:
            lanes.append(tuple(stages))
    return Schedule(tuple(lanes), schedule.groups, schedule.info)


def _modelled(
    step: AllReduce, schedule: Schedule, spec: Spec, rank: int, model: Callable[[Spec], Schedule]
) -> list[tuple[Stage, ...]]:
    """The lanes of the library's model for one collective step, in the whole schedule's ranks and offsets."""
    group = next(g for g in schedule.partition(step.group) if rank in g)
    nodes = tuple(spec.node_of(g) for g in group) if spec.nodes else ()
    inner = model(
        Spec(
            len(group),
            group.index(rank),
            step.hi - step.lo,
            spec.itemsize,
            spec.colors,
            spec.chunk_bytes,
            nodes=nodes,
            rails=spec.rails,
        )
    )
    return [tuple(tuple(_moved(s, group, step.lo) for s in st) for st in lane) for lane in inner.lanes]


def _moved(step: Any, group: tuple[int, ...], offset: int) -> Any:
    """A step of a group-local schedule in the whole schedule's ranks and offsets."""
    return type(step)(group[step.peer], step.lo + offset, step.hi + offset, step.reduce)


def profile(ranks: Iterable[Schedule], p: int, itemsize: int, placement: Placement = ONE_NODE) -> Profile:
    """The per-stage profile of the schedules of ranks 0..p-1 placed by ``placement`` (stage indices taken together)."""
    with no_cyclic_gc():  # millions of short tuples (4 M steps for a ring of 1,024): rescanning them doubles the time
        return _profile(ranks, p, itemsize, placement)


@contextmanager
def no_cyclic_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector (these objects hold no cycles), restoring its state after."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def _profile(ranks: Iterable[Schedule], p: int, itemsize: int, placement: Placement) -> Profile:
    """:func:`profile` without the collector."""
    sends: list[tuple[int, int, int, int]] = []  # (stage, src, dst, bytes)
    reduces: list[tuple[int, int, int]] = []  # (stage, rank, bytes)
    send_row, reduce_row = sends.append, reduces.append
    depth = 0
    for r, schedule in enumerate(ranks):
        for lane in schedule.lanes:
            depth = max(depth, len(lane))
            for at, stage in enumerate(lane):
                for step in stage:
                    if type(step) is Send:
                        send_row((at, r, step[0], step[2] - step[1]))
                    elif type(step) is Recv:
                        if step[3]:
                            reduce_row((at, r, step[2] - step[1]))
                    else:
                        raise ValueError("expand collectives before profiling (costterms.schedules does)")
    k, src, dst, nbytes = _columns(sends, 4)
    nbytes *= itemsize
    local = on_node(src, dst, p, placement)
    intra = _max_per_stage(k[local], src[local], nbytes[local], depth)
    if placement.torus is not None:
        link_k, link, link_bytes, hops = torus_routes(k, src, dst, nbytes, placement.torus)
    else:
        link_k, link, link_bytes, hops = rail_routes(k[~local], src[~local], dst[~local], nbytes[~local], p, placement)
    inter = _max_per_stage(link_k, link, link_bytes, depth)
    most_hops = np.zeros(depth)
    np.maximum.at(most_hops, k if placement.torus is not None else k[~local], hops)
    rk, rr, rb = _columns(reduces, 3)
    return Profile((intra > 0) | (inter > 0), intra, inter, most_hops, _max_per_stage(rk, rr, rb * itemsize, depth))


def _columns(rows: list[Any], width: int) -> list[np.ndarray]:
    """Rows of ``width`` integers as int64 columns."""
    table = np.array(rows, dtype=np.int64).reshape(-1, width)
    return [table[:, i] for i in range(width)]


def _max_per_stage(stage: np.ndarray, key: np.ndarray, amount: np.ndarray, depth: int) -> np.ndarray:
    """Per stage, the largest total ``amount`` over the keys (ranks, links) it is summed by."""
    out = np.zeros(depth)
    if stage.size:
        width = int(key.max()) + 1
        cells, where = np.unique(stage * width + key, return_inverse=True)
        np.maximum.at(out, cells // width, np.bincount(where, weights=amount.astype(float)))
    return out


def terms(algo: str, spec: Spec, executor: str = "mpi") -> tuple[float, float, float]:
    """(A, B, G): stages, per-stage maximum bytes a rank sends, per-stage maximum bytes it reduces, summed."""
    prof = profile(schedules(algo, replace(spec, chunk_bytes=UNCUT), executor), spec.p, spec.itemsize)
    return float(prof.busy.sum()), float(prof.intra.sum()), float(prof.reduced.sum())


def modelled_as(algo: str) -> str:
    """The algorithm whose schedule models ``algo`` (a library collective without a model of its own: its
    executor's default model; else itself)."""
    entry = ALGORITHMS[algo]
    return str(LIBRARY_MODEL[entry.executor].NAME) if entry.executor and not entry.model else algo
