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
guesses or cite what the project never read.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from scalerepro import sources
from scalerepro.comm.shapes import squarest
from scalerepro.errors import UserError

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
)


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
    overlap: float = 0.0
    description: str = ""
    sources: dict[str, str] = field(default_factory=dict, compare=False, hash=False)
    # the numbers taken from the reproduced papers' own results (a primary source): a figure projected from
    # one of them is not independent of those papers' claims
    from_papers: tuple[str, ...] = field(default=(), compare=False, hash=False)

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
        if not 0 <= self.overlap <= 1:
            raise UserError(f"{where}: overlap is the fraction of compute the all-reduce can hide behind, 0..1")

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
        """Every field, for JSON (sources included)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def rate_from_papers(self) -> bool:
        """Whether the ResNet-50 compute rate comes from a reproduced paper's own results."""
        return "images_per_s_per_accelerator" in self.from_papers


def load(path: Path) -> dict[str, Platform]:
    """Every platform in ``path``; errors name the file, the platform and the key."""
    if not path.is_file():
        raise UserError(f"platforms file {path} not found; it ships as config/platforms.yaml")
    doc = yaml.safe_load(path.read_text()) or {}
    entries = doc.get("platforms")
    if not isinstance(entries, dict) or not entries:
        raise UserError(f"{path}: expected a top-level 'platforms:' mapping of name -> description")
    cites = any(
        isinstance(v, dict) and "from" in v for b in entries.values() if isinstance(b, dict) for v in _given(b).values()
    )
    registry = sources.load_beside(path, doc) if cites else None  # a file of assumptions needs no registry
    return {name: _platform(path, name, body, registry) for name, body in entries.items()}


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
    given = _given(body)
    unsourced = [k for k in NUMBERS if body.get(k) is not None and k not in given]
    if unsourced:
        raise UserError(
            f"{path}: platform {name!r}: give sources.{unsourced[0]}: {{from: <source id>#<fact key>}} "
            "(config/sources.yaml) or {assumed: why}"
        )
    cited = {k: sources.number_source(registry, v, f"{path}: platform {name!r}, sources.{k}") for k, v in given.items()}
    from_papers = tuple(k for k, v in given.items() if registry is not None and _primary(registry, v))
    try:
        return Platform(name=name, **{**body, "sources": cited, "from_papers": from_papers})
    except TypeError as exc:
        raise UserError(f"{path}: platform {name!r}: {exc}") from None


def _primary(registry: sources.Registry, entry: Any) -> bool:
    """Whether a number's ``from`` names a fact of a primary source (one of the reproduced papers)."""
    refs = entry.get("from") if isinstance(entry, dict) else None
    facts = registry.facts(refs, "platform sources") if refs else []
    return any(registry.sources[f.source].kind == "primary" for f in facts)


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
