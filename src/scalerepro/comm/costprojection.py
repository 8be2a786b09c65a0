"""The cost model projected onto described machines, at rank counts and sizes never measured.

A :class:`Topology` describes a machine: a fat tree of nodes with network
rails, or a 2-D torus (the CLI builds one per platform of
config/platforms.yaml). It says where p ranks sit on it
(:class:`~scalerepro.comm.placement.Placement`), the schedule spec each
algorithm runs there, and what its links cost
(:class:`~scalerepro.comm.costterms.Network`), the node's own costs taken
from the measured machine's fit (:class:`~scalerepro.comm.costfit.Fit`)
where the description leaves them out. :func:`projection` prices every
rank's schedule there (:func:`scalerepro.comm.costterms.profile`) per
fit, topology and rank count.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from scalerepro.comm.algorithms import on_grid
from scalerepro.comm.costfit import Fit
from scalerepro.comm.costterms import REDUCTIONS, Network, Profile, modelled_as, profile, schedules
from scalerepro.comm.placement import Placement
from scalerepro.comm.schedule import UNCUT, Spec
from scalerepro.comm.shapes import squarest
from scalerepro.errors import UserError

RESNET50_GRADIENT_BYTES = 25_557_032 * 4  # torchvision ResNet-50 parameters, float32


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

    def placement(self, p: int) -> Placement:
        """Where p ranks sit: nodes of ranks_per_node, or the squarest torus."""
        if self.kind == "torus2d":
            return Placement(torus=squarest(p))
        return Placement(min(self.ranks_per_node, p), self.rails)

    def spec(self, algo: str, p: int, count: int, colors: int) -> Spec:
        """The schedule spec of ``algo`` on p ranks here: nodes of ranks_per_node, or the torus as the grid."""
        if self.kind == "torus2d":
            grid = squarest(p) if on_grid(algo, 2) else ()
            return Spec(p, 0, count, 4, colors, UNCUT, grid)
        g = min(self.ranks_per_node, p)
        return Spec(p, 0, count, 4, colors, UNCUT, (), tuple(r // g for r in range(p)))

    def profile(self, algo: str, p: int, n: float, colors: int) -> Profile:
        """The profile of one all-reduce of n bytes (float32) of ``algo`` on p ranks here."""
        return profile(schedules(algo, self.spec(algo, p, int(n) // 4, colors)), p, 4, self.placement(p))


def project_time(f: Fit, topo: Topology, n: float, p: int, colors: int = 2) -> float:
    """Modelled seconds for one all-reduce of n bytes (float32) on p ranks of ``topo``."""
    return topo.profile(f.algorithm, p, n, colors).cost(topo.network(f)).seconds


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
