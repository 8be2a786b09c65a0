"""Described machines to simulate on (config/platforms.yaml): every number with its source or marked assumed.

A platform is one of two shapes:

- ``torus``: one rank per chip on a 2-D torus of point-to-point links (the
  TPU v3 pod); p ranks take the squarest p-chip slice, wrap-around kept.
- ``fattree``: nodes of ``ranks_per_node`` accelerators, each with its own
  port into the node's switch (NVLink, NVSwitch, shared memory), and
  ``nics_per_node`` network adapters per node (local rank i on adapter
  i mod nics) into a fat tree; ``oversubscription`` > 1 adds one shared core
  link carrying (adapters x link bandwidth / oversubscription).

``sources`` names where each number comes from: a registered fact of
config/sources.yaml (``from``, with ``derived`` where computed from it) or
``assumed`` and why. The loader refuses a number without one and a
reference the registry does not hold, so the file cannot quietly grow
guesses or cite what the project never read. Every assumed number that
sets a time (:data:`RANGED`) also carries ``range: [low, high]``, the values
it could plausibly take; a sourced number may carry one too (several
sources that disagree). The simulation reports each claim over those
ranges (:meth:`Platform.corner`, :meth:`Platform.varied`), not at one guess.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from scalerepro import sources
from scalerepro.comm.costfit import Fit
from scalerepro.comm.costprojection import Topology, projection
from scalerepro.comm.costterms import REDUCTIONS
from scalerepro.comm.shapes import squarest
from scalerepro.errors import UserError
from scalerepro.io import read_yaml, yaml_line
from scalerepro.sim.timeline import OVERLAP_MODES

SHAPES = ("torus", "fattree")
NUMBERS = (
    "max_ranks",
    "ranks_per_node",
    "intra_GBps",
    "intra_latency_us",
    "link_GBps",
    "latency_us",
    "nics_per_node",
    "oversubscription",
    "gamma_s_per_byte",
    "images_per_s_per_accelerator",
    "overlap",
    "reduction",
)
# the numbers that set a time, so an assumed one needs a range; max_ranks and ranks_per_node say which points exist
RANGED = tuple(k for k in NUMBERS if k not in ("max_ranks", "ranks_per_node"))
# the ones the simulated network depends on (a change means simulating again); the rest only enter the step
NETWORK = (
    "link_GBps",
    "latency_us",
    "intra_GBps",
    "intra_latency_us",
    "nics_per_node",
    "oversubscription",
    "gamma_s_per_byte",
    "reduction",
)
# the settings that are modes, not numbers: the ones they may take, and the one that makes a step fastest
MODES = {"overlap": (OVERLAP_MODES, "buckets"), "reduction": (REDUCTIONS, "streamed")}
FASTER_HIGH = {"link_GBps", "intra_GBps", "nics_per_node", "images_per_s_per_accelerator"}  # the rest: faster low


@dataclass(frozen=True)
class Platform:
    """One machine: its shape, links (GB/s per direction, latency in us), reduction cost and ResNet-50 rate."""

    name: str
    shape: str
    max_ranks: int
    link_GBps: float
    latency_us: float
    gamma_s_per_byte: float
    ranks_per_node: int = 1
    intra_GBps: float = 0.0
    intra_latency_us: float = 0.0
    nics_per_node: int = 1
    oversubscription: float = 1.0
    images_per_s_per_accelerator: float | None = None
    overlap: str = "none"
    reduction: str = "after"  # summing a stage's bytes after they arrive, or as they stream in (costterms.REDUCTIONS)
    description: str = ""
    variant: str = ""  # "" as described; else which numbers were moved to an end of their range
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    ranges: dict[str, list[Any]] = field(default_factory=dict, compare=False, hash=False)
    # per number, the sources it cites (ids of config/sources.yaml), and which of those are the reproduced papers
    # (primary): a figure projected from them is not independent of a claim they make (:meth:`resting_on`)
    source_ids: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False, hash=False)
    primary: frozenset[str] = field(default=frozenset(), compare=False, hash=False)

    def __post_init__(self) -> None:
        """Check the description; errors name the platform and the field."""
        where = f"platform {self.name!r}"
        if self.shape not in SHAPES:
            raise UserError(f"{where}: shape {self.shape!r}; choose one of {', '.join(SHAPES)}")
        positive = ["max_ranks", "link_GBps", "ranks_per_node", "nics_per_node", "oversubscription"]
        if self.shape == "fattree" and self.ranks_per_node > 1:
            positive.append("intra_GBps")
        for name in positive:
            if not getattr(self, name) > 0:
                raise UserError(f"{where}: {name} must be > 0, got {getattr(self, name)}")
        for name in ("latency_us", "intra_latency_us", "gamma_s_per_byte"):
            if getattr(self, name) < 0:
                raise UserError(f"{where}: {name} must be >= 0, got {getattr(self, name)}")
        for name, (modes, _) in MODES.items():
            if getattr(self, name) not in modes:
                raise UserError(f"{where}: {name} {getattr(self, name)!r}; choose one of {', '.join(modes)}")
        for name, span in self.ranges.items():
            if name in MODES:
                if getattr(self, name) not in span:
                    raise UserError(f"{where}: {name} {getattr(self, name)!r} is not among its range {span}")
                continue
            low, high = span
            if not low <= getattr(self, name) <= high:
                raise UserError(f"{where}: {name} {getattr(self, name)} lies outside its range [{low}, {high}]")

    def ranks(self, p: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """(torus dims or (), node of every rank) for p ranks; an error if p does not fit."""
        if p < 1 or p > self.max_ranks:
            raise UserError(f"platform {self.name!r} holds 1..{self.max_ranks} ranks, not {p}")
        if self.shape == "torus":
            return tuple(squarest(p)), ()
        g = min(self.ranks_per_node, p)
        if p % g:
            raise UserError(f"platform {self.name!r}: {p} ranks do not fill nodes of {g}; use a multiple of {g}")
        return (), tuple(r // g for r in range(p))

    def holds(self, p: int) -> bool:
        """Whether p ranks fit (whole nodes, at most the platform's size)."""
        try:
            self.ranks(p)
        except UserError:
            return False
        return True

    def as_dict(self) -> dict[str, Any]:
        """Every field, for JSON (sources included; sets as sorted lists)."""
        return {f.name: _plain(getattr(self, f.name)) for f in fields(self)}

    def end(self, name: str, fast: bool) -> Any:
        """The end of ``name``'s range that makes the step faster (``fast``) or slower; its value if unranged."""
        if name not in self.ranges:
            return getattr(self, name)
        if name in MODES:  # the fast mode, or the first other one the range allows
            fastest = MODES[name][1]
            wanted = [m for m in self.ranges[name] if (m == fastest) == fast]
            return wanted[0] if wanted else getattr(self, name)
        low, high = self.ranges[name]
        return high if fast == (name in FASTER_HIGH) else low

    def corner(self, fast: bool) -> Platform:
        """Every ranged network number at the end that makes the all-reduce fastest (or slowest)."""
        moved = {k: self.end(k, fast) for k in NETWORK if k in self.ranges}
        if not moved:
            return self
        return replace(self, **moved, variant="fast network" if fast else "slow network")

    def varied(self, name: str, fast: bool) -> Platform:
        """This platform with only ``name`` at one end of its range (the others as described)."""
        return replace(self, **{name: self.end(name, fast)}, variant=f"{name}={self.end(name, fast)}")

    def topology(self) -> Topology:
        """This platform for the cost model's projections: the simulator's numbers, but for ``oversubscription``
        (the cost model has no shared core link; it projects a full-bisection fabric)."""
        return Topology(
            "torus2d" if self.shape == "torus" else "fattree",
            self.ranks_per_node,
            self.link_GBps,
            self.latency_us,
            self.nics_per_node,
            self.intra_GBps or self.link_GBps,
            self.intra_latency_us,
            self.gamma_s_per_byte,
            self.name,
            self.reduction,
        )

    def resting_on(self, claimed: Iterable[str]) -> list[str]:
        """The numbers that set a time (:data:`RANGED`) citing one of the sources ``claimed`` (a claim's own) or a
        reproduced paper: a figure simulated from them would agree with such a claim by construction. The size of
        a run (max_ranks, ranks_per_node) may cite the paper whose run it is."""
        wanted = set(claimed) | self.primary
        return [k for k, ids in self.source_ids.items() if k in RANGED and wanted & set(ids)]


def load_platforms(path: Path) -> dict[str, Platform]:
    """Every platform in ``path``; errors name the file, the platform and the key."""
    doc = read_yaml(path, "platforms")
    entries = doc.get("platforms") if isinstance(doc, dict) else None
    if not isinstance(entries, dict) or not entries:
        raise UserError(f"{path}: expected a top-level 'platforms:' mapping of name -> description")
    cites = any(
        isinstance(v, dict) and "from" in v for b in entries.values() if isinstance(b, dict) for v in _given(b).values()
    )
    registry = sources.load_beside(path, doc) if cites else None  # a file of assumptions needs no registry
    return {name: _platform(path, name, body, registry) for name, body in entries.items()}


def _plain(value: Any) -> Any:
    """``value`` as JSON takes it: a set as a sorted list."""
    return sorted(value) if isinstance(value, set | frozenset) else value


def _given(body: dict[str, Any]) -> dict[str, Any]:
    """A platform entry's ``sources:`` mapping ({} if absent or not a mapping)."""
    given = body.get("sources")
    return given if isinstance(given, dict) else {}


def _platform(path: Path, name: str, body: Any, registry: sources.Registry | None) -> Platform:
    """One entry of the file as a Platform, every number sourced."""
    if not isinstance(body, dict):
        raise UserError(f"{path}: platform {name!r} must be a mapping of keys")
    known = {f.name for f in fields(Platform)} - {"name"}
    unknown = sorted(set(body) - known)
    if unknown:
        raise UserError(f"{path}: platform {name!r}: unknown key(s) {unknown}; known: {sorted(known)}")
    for key in ("shape", "max_ranks", "link_GBps", "latency_us", "gamma_s_per_byte"):
        if key not in body:
            raise UserError(f"{path}: platform {name!r} lacks key {key!r}")
    for key in NUMBERS:
        value = body.get(key)
        if key not in MODES and value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            line = yaml_line(path, "platforms", name, key)
            at = f", line {line}" if line else ""
            raise UserError(f"{path}{at}: platform {name!r}: {key} {value!r} is not a number; give one, e.g. 12.5")
    given = _given(body)
    unsourced = [k for k in NUMBERS if body.get(k) is not None and k not in given]
    if unsourced:
        raise UserError(
            f"{path}: platform {name!r}: give sources.{unsourced[0]}: {{from: <source id>#<fact key>}} "
            "(config/sources.yaml) or {assumed: why}"
        )
    cited = {k: sources.number_source(registry, v, f"{path}: platform {name!r}, sources.{k}") for k, v in given.items()}
    ids = {k: _sources_of(registry, v) for k, v in given.items()} if registry is not None else {}
    primary = frozenset(i for f in ids.values() for i in f if registry and registry.sources[i].kind == "primary")
    ranges = {k: span for k, v in given.items() if k in RANGED and (span := _range(path, name, k, v, body.get(k)))}
    described = {**body, "sources": cited, "source_ids": ids, "primary": primary, "ranges": ranges}
    try:
        return Platform(name=name, **described)
    except TypeError as exc:
        raise UserError(f"{path}: platform {name!r}: {exc}") from None
    except UserError as exc:  # the description's own checks: name the file and the platform's line
        line = yaml_line(path, "platforms", name)
        raise UserError(f"{path}{f', line {line}' if line else ''}: {exc}") from None


def _range(path: Path, name: str, key: str, entry: Any, value: Any) -> list[Any] | None:
    """A number's ``range: [low, high]`` (for a mode: the modes it may take); required where the number is assumed."""
    where = f"{path}: platform {name!r}, sources.{key}"
    given = entry.get("range") if isinstance(entry, dict) else None
    if given is None:
        if isinstance(entry, dict) and entry.get("assumed") and value is not None:
            raise UserError(f"{where}: an assumed number needs range: [low, high], the values it could take, and why")
        return None
    if key in MODES:
        modes = MODES[key][0]
        if not isinstance(given, list) or not given or any(m not in modes for m in given):
            raise UserError(f"{where}: range {given!r}; give the modes {key} may take, of {', '.join(modes)}")
        return list(given)
    if (
        not isinstance(given, list)
        or len(given) != 2
        or not all(isinstance(v, int | float) and not isinstance(v, bool) for v in given)
        or given[0] > given[1]
    ):
        raise UserError(f"{where}: range {given!r}; give [low, high], two numbers, low first")
    return list(given)


def _sources_of(registry: sources.Registry, entry: Any) -> tuple[str, ...]:
    """The ids of the sources a number's ``from`` names (none for an assumed number)."""
    refs = entry.get("from") if isinstance(entry, dict) else None
    return tuple(sorted({f.source for f in registry.facts(refs, "platform sources")})) if refs else ()


def project(
    fits: list[Fit], platforms: list[Platform], ranks: list[int], nbytes: float, colors: int
) -> list[dict[str, Any]]:
    """The cost model's projection (:func:`scalerepro.comm.costprojection.projection`) onto each platform, at the rank
    counts it holds (:meth:`Platform.holds`)."""
    return [
        row
        for plat in platforms
        for row in projection(fits, [plat.topology()], [p for p in ranks if plat.holds(p)], nbytes, colors)
    ]


def pick(platforms: dict[str, Platform], name: str, path: Path) -> Platform:
    """The platform called ``name``; an error listing the ones there are."""
    if name not in platforms:
        raise UserError(f"{path}: no platform {name!r}; there are: {', '.join(platforms)}")
    return platforms[name]


def fitted(
    name: str, alpha_s: float, beta_s_per_byte: float, gamma_s_per_byte: float, ranks_per_node: int, source: str
) -> Platform:
    """A one-node platform from fitted costs: every rank's port at 1/beta, latency alpha (the measured machine)."""
    gbps = 1.0 / beta_s_per_byte / 1e9 if beta_s_per_byte > 0 else 1e6
    why = dict.fromkeys(("max_ranks", "ranks_per_node", "intra_GBps", "intra_latency_us", "gamma_s_per_byte"), source)
    return Platform(
        name,
        "fattree",
        ranks_per_node,
        link_GBps=gbps,
        latency_us=0.0,
        gamma_s_per_byte=gamma_s_per_byte,
        ranks_per_node=ranks_per_node,
        intra_GBps=gbps,
        intra_latency_us=alpha_s * 1e6,
        description="the measured machine: one node, costs fitted from this run's bench",
        sources=why,
    )
