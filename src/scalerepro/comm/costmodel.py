"""Alpha-beta-gamma cost of a schedule; fits per algorithm from a sweep; projections to the papers' scales.

The cost of an all-reduce is read off the schedules its ranks run (the
same ones the executors run), stage by stage, with the lanes of one stage
index taken together:

    t = sum over stages of  alpha(stage) + max over links of (bytes on it x beta) + gamma x max bytes a rank reduces

where alpha(stage) is the latency of the slowest message class in the
stage. That sums after the stage's messages arrive, as this project's
executors do; a machine that sums as the bytes stream in (``reduction:
streamed``, :data:`REDUCTIONS`) pays per stage the larger of its
transfer (latency included) and its sum instead of both. A :class:`Network` says which links a message loads: on a node
(shared memory or NVLink) the sender's own port; between nodes the
sending and receiving nodes' network adapters (rank i of a node on rail
i mod rails); on a 2-D torus every link of its dimension-order route. So
two algorithms' projections differ exactly where their schedules do, and
the model cannot drift from the code. A library collective (``native``,
``gloo``, ``nccl``, hierarchical's inter-node phase) is modelled by the
algorithm its library uses for large messages: Rabenseifner's for MPI
(MPICH), the ring for gloo and NCCL.

Fitting: on the measured machine every message is on one node, so t =
A alpha + B beta + G gamma with A the stages, B the per-stage maximum bytes
a rank sends, G the per-stage maximum it reduces, all from the schedules.
For the ring family B = 2G, so beta and gamma cannot be told apart from
all-reduce timings alone: gamma is measured directly (the bench times the
in-place add, ``reduction_s_per_byte``), and alpha, beta >= 0 are fitted by
least squares on relative error, so small and large messages weigh alike.

Regimes: a node running more ranks than cores (the laptop's 4 ranks on 2
cores) is a different machine: every step waits on the scheduler and the
copies share cores, so its alpha is ~10x and its beta ~2x the one-rank-
per-core values, and one fit across both explains neither. Points are
fitted per regime (``dedicated`` / ``oversubscribed``, from the bench
JSON's ranks and cores per node; ``unknown`` for older files), and the
projection uses the dedicated fit when there is one, as on a cluster.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from scalerepro.comm import rabenseifner, ring
from scalerepro.comm.algorithms import ALGORITHMS, on_grid
from scalerepro.comm.benchfile import ran
from scalerepro.comm.schedule import AllReduce, Recv, Schedule, Send, Spec, Stage
from scalerepro.comm.shapes import squarest
from scalerepro.errors import UserError

RESNET50_GRADIENT_BYTES = 25_557_032 * 4  # torchvision ResNet-50 parameters, float32
UNPIPELINED = 1 << 62  # chunk_bytes for modelling: pipeline chunks only split a stage's bytes, so leave them out
LIBRARY_MODEL = {"mpi": rabenseifner, "torch": ring}  # what a library collective is modelled as, per executor
# when a rank sums what a stage brought: once it has all arrived (this project's executors), or as it streams in
REDUCTIONS = ("after", "streamed")


@dataclass(frozen=True)
class Layout:
    """Where the ranks sit: ``ranks_per_node`` consecutive ranks per node (0: all on one), network rails per
    node, or a 2-D ``torus`` (X, Y) with one rank per chip at (r mod X, r div X)."""

    ranks_per_node: int = 0
    rails: int = 1
    torus: tuple[int, int] | None = None


ONE_NODE = Layout()


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


def profile(ranks: Iterable[Schedule], p: int, itemsize: int, layout: Layout = ONE_NODE) -> Profile:
    """The per-stage profile of the schedules of ranks 0..p-1 placed by ``layout`` (stage indices taken together)."""
    with no_cyclic_gc():  # millions of short tuples (4 M steps for a ring of 1,024): rescanning them doubles the time
        return _profile(ranks, p, itemsize, layout)


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


def _profile(ranks: Iterable[Schedule], p: int, itemsize: int, layout: Layout) -> Profile:
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
                        raise ValueError("expand collectives before profiling (costmodel.schedules does)")
    k, src, dst, nbytes = _columns(sends, 4)
    nbytes *= itemsize
    on_node = (src // (layout.ranks_per_node or p) == dst // (layout.ranks_per_node or p)) & (layout.torus is None)
    intra = _max_per_stage(k[on_node], src[on_node], nbytes[on_node], depth)
    if layout.torus is not None:
        link_k, link, link_bytes, hops = _torus_routes(k, src, dst, nbytes, layout.torus)
    else:
        link_k, link, link_bytes, hops = _rail_routes(
            k[~on_node], src[~on_node], dst[~on_node], nbytes[~on_node], p, layout
        )
    inter = _max_per_stage(link_k, link, link_bytes, depth)
    most_hops = np.zeros(depth)
    np.maximum.at(most_hops, k if layout.torus is not None else k[~on_node], hops)
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


def _rail_routes(
    k: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, p: int, layout: Layout
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Inter-node messages on the sender's outgoing and the receiver's incoming rail (local rank mod rails)."""
    g, rails = layout.ranks_per_node or p, layout.rails
    nodes = -(-p // g)
    out_rail = (src // g) * rails + (src % g) % rails
    in_rail = (nodes + dst // g) * rails + (dst % g) % rails
    return (
        np.concatenate([k, k]),
        np.concatenate([out_rail, in_rail]),
        np.concatenate([nbytes, nbytes]),
        np.ones(k.size),
    )


def _torus_routes(
    k: np.ndarray, src: np.ndarray, dst: np.ndarray, nbytes: np.ndarray, dims: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Dimension-order routes (X first, the shorter way round): every hop's directed link, and each message's hops."""
    at = [src % dims[0], src // dims[0]]
    to = [dst % dims[0], dst // dims[0]]
    hops = np.zeros(k.size)
    parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
    for d in (0, 1):
        n = dims[d]
        ahead = (to[d] - at[d]) % n
        step = np.where(ahead <= n // 2, 1, -1)
        left = np.where(step > 0, ahead, n - ahead)
        hops += left
        for h in range(int(left.max(initial=0))):
            moving = left > h
            here = at[0][moving] + dims[0] * at[1][moving]
            parts.append((k[moving], 4 * here + 2 * d + (step[moving] < 0), nbytes[moving]))
            at[d] = np.where(moving, (at[d] + step) % n, at[d])
    if not parts:
        empty = np.zeros(0, dtype=np.int64)
        return empty, empty, empty, hops
    return (
        np.concatenate([x[0] for x in parts]),
        np.concatenate([x[1] for x in parts]),
        np.concatenate([x[2] for x in parts]),
        hops,
    )


def terms(algo: str, spec: Spec, executor: str = "mpi") -> tuple[float, float, float]:
    """(A, B, G): stages, per-stage maximum bytes a rank sends, per-stage maximum bytes it reduces, summed."""
    prof = profile(schedules(algo, replace(spec, chunk_bytes=UNPIPELINED), executor), spec.p, spec.itemsize)
    return float(prof.busy.sum()), float(prof.intra.sum()), float(prof.reduced.sum())


REGIMES = ("dedicated", "unknown", "oversubscribed")  # the projection's order of preference


def regime(row: Mapping[str, Any]) -> str:
    """``dedicated`` (a core per rank), ``oversubscribed`` or ``unknown`` (no ranks_per_core recorded)."""
    load = row.get("ranks_per_core")
    if load is None:
        return "unknown"
    return "oversubscribed" if load > 1 else "dedicated"


@dataclass(frozen=True)
class Fit:
    """Fitted parameters of one algorithm in one regime and how well they explain the measurements."""

    algorithm: str
    regime: str
    alpha_s: float
    beta_s_per_byte: float
    gamma_s_per_byte: float
    points: int
    median_rel_residual: float
    max_rel_residual: float
    residuals: tuple[tuple[int, int, float, float], ...]  # (ranks, bytes, measured s, modelled s)

    def seconds(self, abg: tuple[float, float, float]) -> float:
        """Modelled seconds for (A, B, G) terms."""
        return abg[0] * self.alpha_s + abg[1] * self.beta_s_per_byte + abg[2] * self.gamma_s_per_byte


def _nnls2(m: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Least squares for two non-negative unknowns (tries every active set)."""
    best, best_err = np.zeros(2), float(np.sum(y**2))
    for cols in ([0, 1], [0], [1]):
        x, *_ = np.linalg.lstsq(m[:, cols], y, rcond=None)
        if np.all(x >= 0):
            full = np.zeros(2)
            full[cols] = x
            err = float(np.sum((m @ full - y) ** 2))
            if err < best_err:
                best, best_err = full, err
    return best


def row_spec(row: Mapping[str, Any]) -> Spec:
    """The schedule spec of a bench row: ranks, elements, item size, and the comm parameters it ran with."""
    itemsize = 8 if row.get("dtype") == "float64" else 4
    comm = row.get("comm") or {}
    return Spec(
        int(row["world_size"]),
        0,
        int(row["bytes"]) // itemsize,
        itemsize,
        int(comm.get("colors", 2)),
        UNPIPELINED,
        tuple(comm.get("grid") or ()),
        tuple(row.get("nodes") or ()),
        tuple(comm.get("dim_algorithms") or ()),
    )


def row_terms(row: Mapping[str, Any]) -> tuple[float, float, float]:
    """(A, B, G) of the schedule a bench row measured (:func:`scalerepro.comm.benchfile.ran`) at its size and ranks."""
    return terms(ran(row), row_spec(row), row.get("executor") or "mpi")


def fit(algorithm: str, rows: Sequence[Mapping[str, Any]], gamma: float, where: str | None = None) -> Fit:
    """Fit alpha and beta of ``algorithm`` to its rows (world_size, bytes, time_us) in regime ``where`` (None: any)."""
    if algorithm not in ALGORITHMS:
        raise UserError(f"no cost model for {algorithm!r}; modelled: {', '.join(sorted(ALGORITHMS))}")
    return _fit(algorithm, _points(rows, algorithm, where), gamma, where)


def fit_machine(rows: Sequence[Mapping[str, Any]], gamma: float, where: str | None = None) -> Fit:
    """One alpha and beta for the machine: every modelled algorithm's points in regime ``where`` together."""
    pts = [r for algo in sorted({r["algorithm"] for r in rows} & set(ALGORITHMS)) for r in _points(rows, algo, where)]
    return _fit("machine", pts, gamma, where)


def _fit(name: str, pts: Sequence[Mapping[str, Any]], gamma: float, where: str | None) -> Fit:
    """Least squares on relative error for alpha, beta >= 0 over ``pts``, gamma given."""
    if len(pts) < 2:
        raise UserError(f"{name}: need at least 2 benchmark points at >= 2 ranks to fit, got {len(pts)}")
    abg = np.array([row_terms(r) for r in pts])
    t = np.array([r["time_us"] * 1e-6 for r in pts])
    y = (t - abg[:, 2] * gamma) / t  # relative: divide each row by its measured time
    alpha, beta = _nnls2(abg[:, :2] / t[:, None], y)
    model = abg @ np.array([alpha, beta, gamma])
    rel = np.abs(model - t) / t
    return Fit(
        name,
        where or "any",
        float(alpha),
        float(beta),
        gamma,
        len(pts),
        float(np.median(rel)),
        float(np.max(rel)),
        tuple(
            (int(r["world_size"]), int(r["bytes"]), float(ti), float(mi))
            for r, ti, mi in zip(pts, t, model, strict=True)
        ),
    )


def _points(rows: Sequence[Mapping[str, Any]], algorithm: str, where: str | None) -> list[Mapping[str, Any]]:
    """The fittable points of ``algorithm`` (>= 2 ranks, a positive time) in regime ``where`` (None: any)."""
    return [
        r
        for r in rows
        if r["algorithm"] == algorithm and r["world_size"] > 1 and r["time_us"] > 0 and where in (None, regime(r))
    ]


def fit_regimes(algorithms: Iterable[str], rows: Sequence[Mapping[str, Any]], gamma: float) -> list[Fit]:
    """One fit per algorithm and regime that has at least 2 points."""
    fits = []
    for algo in algorithms:
        found = [fit(algo, rows, gamma, where) for where in REGIMES if len(_points(rows, algo, where)) >= 2]
        fits += found or [fit(algo, rows, gamma)]  # too few per regime: fit them together (or raise)
    return fits


def for_projection(fits: list[Fit]) -> list[Fit]:
    """Per algorithm, the fit of the most cluster-like regime (dedicated, then unknown, then oversubscribed)."""
    rank = {name: i for i, name in enumerate(REGIMES)}
    best: dict[str, Fit] = {}
    for f in fits:
        if f.algorithm not in best or rank.get(f.regime, len(rank)) < rank.get(best[f.algorithm].regime, len(rank)):
            best[f.algorithm] = f
    return list(best.values())


@dataclass(frozen=True)
class Topology:
    """A described machine to project onto (the CLI builds one per platform of config/platforms.yaml)."""

    kind: str  # "fattree" or "torus2d"
    ranks_per_node: int = 8
    link_GBps: float = 12.5  # per direction
    latency_us: float = 2.0
    rails: int = 1
    intra_GBps: float | None = None  # None: the measured node's fitted beta
    intra_latency_us: float | None = None  # None: the measured node's fitted alpha
    gamma_s_per_byte: float | None = None  # None: the measured machine's reduction cost
    name: str = ""  # the platform's name, for tables (default: the kind)
    reduction: str = "after"  # one of REDUCTIONS

    def __post_init__(self) -> None:
        """Check the description; errors name the field."""
        if self.kind not in ("fattree", "torus2d"):
            raise UserError(f"topology kind {self.kind!r}: choose fattree or torus2d")
        if self.ranks_per_node < 1 or self.link_GBps <= 0 or self.latency_us < 0 or self.rails < 1:
            raise UserError("topology: ranks_per_node >= 1, link_GBps > 0, latency_us >= 0 and rails >= 1 are required")
        if self.reduction not in REDUCTIONS:
            raise UserError(f"topology reduction {self.reduction!r}: choose one of {', '.join(REDUCTIONS)}")

    def network(self, f: Fit) -> Network:
        """This topology's costs, the node's own from fit ``f`` unless given."""
        intra_alpha = f.alpha_s if self.intra_latency_us is None else self.intra_latency_us * 1e-6
        intra_beta = f.beta_s_per_byte if self.intra_GBps is None else 1.0 / (self.intra_GBps * 1e9)
        gamma = f.gamma_s_per_byte if self.gamma_s_per_byte is None else self.gamma_s_per_byte
        inter_beta = 1.0 / (self.link_GBps * 1e9)
        return Network(intra_alpha, intra_beta, gamma, self.latency_us * 1e-6, inter_beta, self.reduction)

    def layout(self, p: int) -> Layout:
        """Where p ranks sit: nodes of ranks_per_node, or the squarest torus."""
        if self.kind == "torus2d":
            return Layout(torus=squarest(p))
        return Layout(min(self.ranks_per_node, p), self.rails)

    def spec(self, algo: str, p: int, count: int, colors: int) -> Spec:
        """The schedule spec of ``algo`` on p ranks here: nodes of ranks_per_node, or the torus as the grid."""
        if self.kind == "torus2d":
            grid = squarest(p) if on_grid(algo, 2) else ()
            return Spec(p, 0, count, 4, colors, UNPIPELINED, grid)
        g = min(self.ranks_per_node, p)
        return Spec(p, 0, count, 4, colors, UNPIPELINED, (), tuple(r // g for r in range(p)))

    def profile(self, algo: str, p: int, n: float, colors: int) -> Profile:
        """The profile of one all-reduce of n bytes (float32) of ``algo`` on p ranks here."""
        return profile(schedules(algo, self.spec(algo, p, int(n) // 4, colors)), p, 4, self.layout(p))


def project_time(f: Fit, topo: Topology, n: float, p: int, colors: int = 2) -> float:
    """Modelled seconds for one all-reduce of n bytes (float32) on p ranks of ``topo``."""
    return topo.profile(f.algorithm, p, n, colors).cost(topo.network(f)).seconds


def modelled_as(algo: str) -> str:
    """The algorithm whose schedule models ``algo`` (a library collective without a model of its own: its
    executor's default model; else itself)."""
    entry = ALGORITHMS[algo]
    return str(LIBRARY_MODEL[entry.executor].NAME) if entry.executor and not entry.model else algo


def projection(
    fits: list[Fit], topos: list[Topology], ranks: Iterable[int], n: float, colors: int
) -> list[dict[str, Any]]:
    """Rows: algorithm x topology x ranks -> modelled ms per all-reduce of n bytes (each profile made once)."""
    profiles: dict[tuple[str, Topology, int], Profile] = {}
    rows = []
    for f in fits:
        for t in topos:
            for p in ranks:
                key = (modelled_as(f.algorithm), t, p)
                if key not in profiles:
                    profiles[key] = t.profile(key[0], p, n, colors)
                rows.append(
                    {
                        "algorithm": f.algorithm,
                        "fit_regime": f.regime,
                        "topology": t.name or t.kind,
                        "ranks": p,
                        "bytes": n,
                        "ms": profiles[key].cost(t.network(f)).seconds * 1e3,
                        "source": "projected",
                    }
                )
    return rows


def format_fits(fits: list[Fit]) -> str:
    """The fits as a table: alpha, beta and gamma as bandwidths, and the relative residuals."""
    lines = [
        (
            f"{'algorithm':>15} {'regime':>14} {'alpha(us)':>10} {'beta(GB/s)':>11} {'gamma(GB/s)':>12} {'points':>7} "
            f"{'median|res|':>11} {'max|res|':>9}"
        )
    ]
    for f in fits:
        bw = 1 / f.beta_s_per_byte / 1e9 if f.beta_s_per_byte else float("inf")
        lines.append(
            f"{f.algorithm:>15} {f.regime:>14} {f.alpha_s * 1e6:>10.2f} {bw:>11.2f} "
            f"{1 / f.gamma_s_per_byte / 1e9:>12.2f} "
            f"{f.points:>7} {f.median_rel_residual:>10.1%} {f.max_rel_residual:>9.1%}"
        )
    return "\n".join(lines)


def format_projection(
    chosen: list[Fit], topos: list[Topology], ranks: list[int], proj: list[dict[str, Any]], nbytes: float
) -> str:
    """The projection as a table: ms per all-reduce of ``nbytes`` per algorithm and topology, one column per rank
    count."""
    lines = [
        (
            f"\n# projected ms per all-reduce of {nbytes / 1e6:.1f} MB (ResNet-50 gradients, float32), "
            "from each algorithm's most cluster-like fit"
        ),
        f"{'algorithm':>15} {'from regime':>14} {'platform':>13} " + " ".join(f"{p:>9}" for p in ranks),
    ]
    for f in chosen:
        for t in topos:
            name = t.name or t.kind
            ms = {r["ranks"]: r["ms"] for r in proj if r["algorithm"] == f.algorithm and r["topology"] == name}
            cells = " ".join(f"{ms[p]:>9.2f}" if p in ms else f"{'-':>9}" for p in ranks)
            lines.append(f"{f.algorithm:>15} {f.regime:>14} {name:>13} " + cells)
    return "\n".join(lines)
