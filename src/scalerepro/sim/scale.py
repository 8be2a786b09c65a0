"""ResNet-50 at the papers' scale: its gradient buckets simulated per platform, each step laid out as a timeline.

For every (platform, algorithm, ranks, gradient type) the step comes from
:mod:`scalerepro.sim.timeline`: one per-rank batch at the platform's
single-node rate is the whole step of one accelerator; the optimizer's
share of it (its bytes at the memory bandwidth) goes after the gradients'
sum, the rest is forward and backward, spread over ResNet-50's layers by
their FLOPs; the buckets are cut as training cuts them
(``train.bucket_mib``), each summed in its simulated all-reduce time.
Scaling efficiency is the step of one accelerator (nothing to reduce) over
this step, images/s is p x batch / step, and 90 epochs take 90 x images
per epoch / images/s.

Each figure is also given as a band over the platform's ranges
(:mod:`scalerepro.sim.platforms`): the network simulated with every ranged
number at its slow and at its fast end (the corners; the simulated
all-reduce gets no faster when a link gets slower, so the corners bound
it), each combined with the rate's range and the overlap modes. Only the
smallest and the largest bucket of a gradient type are simulated; the
others are interpolated linearly in their bytes (an all-reduce of a fixed
schedule costs latency plus bytes over bandwidth). A row's
``approximate`` names the network variants whose all-reduce was too
large to simulate stage by stage where its ranks ran out of step
(``simulate.full_max_messages``): their times are sums over patterns
(:data:`scalerepro.sim.patterns.APPROXIMATE`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Collection, Iterable, Mapping
from functools import lru_cache
from typing import Any

from scalerepro.errors import UserError
from scalerepro.sim import timeline
from scalerepro.sim.engine import Point
from scalerepro.sim.patterns import APPROXIMATE
from scalerepro.sim.platforms import NETWORK, Platform

ITEMSIZE = {"float32": 4, "bfloat16": 2}
IMAGES_PER_EPOCH = 1_281_167  # ILSVRC-2012 training set (config/sources.yaml: ilsvrc2012#train-images)
METRICS = ("images_per_s", "efficiency", "time_90_epochs_s")


@lru_cache
def bucket_list(dtype: str, bucket_mib: float) -> tuple[timeline.Bucket, ...]:
    """ResNet-50's gradient buckets of ``dtype`` as training cuts them, in the order the backward pass readies them
    (cut once per type and size: every step of every band asks for them)."""
    if dtype not in ITEMSIZE:
        raise UserError(f"--dtypes {dtype}: choose from {', '.join(ITEMSIZE)}")
    return tuple(timeline.buckets(timeline.resnet50(), ITEMSIZE[dtype], bucket_mib))


def simulated_sizes(dtype: str, bucket_mib: float) -> list[int]:
    """The bucket sizes to simulate for ``dtype``: the smallest and the largest (the rest are interpolated)."""
    sizes = [b.nbytes for b in bucket_list(dtype, bucket_mib)]
    return sorted({min(sizes), max(sizes)})


def variants(platform: Platform, corners: bool = True, sensitivity: bool = False) -> list[Platform]:
    """The platform as described, (``corners``) its slow and fast network corners, and (``sensitivity``) each
    ranged network number alone at either end."""
    out = [platform] + ([platform.corner(False), platform.corner(True)] if corners else [])
    if sensitivity:
        out += [platform.varied(k, fast) for k in NETWORK if k in platform.ranges for fast in (False, True)]
    return list({v.variant: v for v in out}.values())


def points(
    platform: Platform,
    algorithms: Iterable[str],
    ranks: Iterable[int],
    dtypes: Iterable[str],
    bucket_mib: float,
    shape: Mapping[str, Any],
    corners: bool = True,
    sensitivity: bool = False,
) -> list[Point]:
    """Every (variant, algorithm, ranks, bucket bytes) to simulate on ``platform`` for the ``dtypes``' buckets,
    with the comm parameters ``shape`` (:func:`~scalerepro.sim.engine.shape_of`).

    A bucket's time depends on its bytes, not its type, so a size both
    types cut is simulated once. Without ``corners`` only the platform as
    described: its steps' bands then span the compute rate and overlap only.
    """
    sizes = sorted({size for dtype in dtypes for size in simulated_sizes(dtype, bucket_mib)})
    return [
        Point(algo, p, size, plat, itemsize=4 if size % 4 == 0 else 2, **shape)
        for plat in variants(platform, corners, sensitivity)
        for p in ranks
        for size in sizes
        for algo in algorithms
    ]


def claim_points(
    claims: list[dict[str, Any]],
    platforms: list[Platform],
    bucket_mib: float,
    shape: Mapping[str, Any],
    max_ranks: int,
    sensitivity: bool = False,
    left_out: Collection[str] = (),
) -> list[Point]:
    """The points the published claims need (their algorithm and the one they are compared with) up to max_ranks,
    but for the claims ``left_out``."""
    named = {p.name: p for p in platforms}
    out = []
    for c in claims:
        if c["platform"] in named and c["ranks"] <= max_ranks and c["id"] not in left_out:
            algos = [c["algorithm"]] + ([c["over"]] if c.get("over") else [])
            out += points(named[c["platform"]], algos, [c["ranks"]], [c["dtype"]], bucket_mib, shape, True, sensitivity)
    return out


def unique(found: list[Point]) -> list[Point]:
    """``found`` without repeats (same platform variant, algorithm, ranks and bytes), in first-seen order."""
    seen: set[tuple[str, str, str, int, int]] = set()
    out = []
    for pt in found:
        key = (pt.platform.name, pt.platform.variant, pt.algorithm, pt.ranks, pt.nbytes)
        if key not in seen:
            seen.add(key)
            out.append(pt)
    return out


def interpolate_seconds(known: dict[int, float], nbytes: int) -> float:
    """Seconds for ``nbytes`` from simulated (bytes -> seconds): exact where simulated, else linear between (or
    beyond) the nearest two."""
    if nbytes in known:
        return known[nbytes]
    sizes = sorted(known)
    if len(sizes) == 1:
        return known[sizes[0]] * nbytes / sizes[0]
    lo, hi = (sizes[0], sizes[1]) if nbytes < sizes[0] else (sizes[-2], sizes[-1])
    for a, b in itertools.pairwise(sizes):
        if a < nbytes < b:
            lo, hi = a, b
    return known[lo] + (known[hi] - known[lo]) * (nbytes - lo) / (hi - lo)


class Projection:
    """Simulated all-reduce times of one platform (all its variants), turned into steps and their metrics."""

    def __init__(self, rows: list[dict[str, Any]], platform: Platform, bucket_mib: float, batch: int) -> None:
        """Index ``rows`` (simulated points) for ``platform``; ``batch`` images per rank per step."""
        if not platform.images_per_s_per_accelerator:
            raise UserError(f"platform {platform.name!r} has no images_per_s_per_accelerator; add it to project steps")
        self.platform, self.bucket_mib, self.batch = platform, bucket_mib, batch
        self.times: dict[tuple[str, str, int], dict[int, float]] = {}
        self.approximate: set[tuple[str, str, int]] = set()  # sums over patterns out of step (patterns.APPROXIMATE)
        for r in rows:
            if r["platform"] == platform.name:
                key = (r.get("variant", ""), r["algorithm"], r["ranks"])
                self.times.setdefault(key, {})[r["bytes"]] = r["simulated_s"]
                if r.get("method") == APPROXIMATE:
                    self.approximate.add(key)
        self.model = timeline.resnet50()
        self.networks = {v.variant: v for v in variants(platform, True, True)}

    def simulated(self, variant: str, algo: str, p: int, dtype: str) -> bool:
        """Whether the buckets of ``dtype`` were simulated for (variant, algo, p)."""
        known = self.times.get((variant, algo, p), {})
        return all(size in known for size in simulated_sizes(dtype, self.bucket_mib))

    def step(
        self, algo: str, p: int, dtype: str, variant: str = "", rate: float | None = None, overlap: str = ""
    ) -> timeline.Step:
        """One step of ``algo`` on p ranks with the network ``variant``, at ``rate`` and ``overlap`` (default: as
        described)."""
        plat = self.platform
        ready = bucket_list(dtype, self.bucket_mib)
        known = self.times[variant, algo, p]
        seconds = [interpolate_seconds(known, b.nbytes) for b in ready]
        # the single-node rate times a whole step (optimizer included): the optimizer's share comes out of it
        whole = self.batch / (rate or plat.images_per_s_per_accelerator or 1.0)
        gamma = self.networks.get(variant, plat).gamma_s_per_byte
        optimizer = min(timeline.optimizer_seconds(self.model.parameters, gamma), whole / 2)
        return timeline.step(self.model, ready, seconds, whole - optimizer, optimizer, overlap or plat.overlap)

    def metrics(self, s: timeline.Step, p: int) -> dict[str, float]:
        """images/s, efficiency and 90-epoch time of step ``s`` on p ranks."""
        images = p * self.batch / s.step_s
        return {
            "images_per_s": images,
            "efficiency": (s.compute_s + s.optimizer_s) / s.step_s,
            "time_90_epochs_s": 90 * IMAGES_PER_EPOCH / images,
        }

    def settings(self) -> list[tuple[str, float, str]]:
        """Every (network variant, rate, overlap) the band spans: simulated corners x rate ends x overlap modes."""
        plat = self.platform
        nets = [v.variant for v in variants(plat)]
        rates = sorted({plat.images_per_s_per_accelerator or 1.0, *plat.ranges.get("images_per_s_per_accelerator", [])})
        modes = plat.ranges.get("overlap") or [plat.overlap]
        return [(n, r, m) for n in nets for r in rates for m in modes]

    def row(self, algo: str, p: int, dtype: str) -> dict[str, Any] | None:
        """The step's row: as described, its parts, and each metric's band; None if not simulated."""
        plat = self.platform
        if not self.simulated("", algo, p, dtype):
            return None
        nominal = self.step(algo, p, dtype)
        band: dict[str, list[float]] = {m: [] for m in METRICS}
        nets = set()
        for net, rate, mode in self.settings():
            if self.simulated(net, algo, p, dtype):
                nets.add(net)
                for m, v in self.metrics(self.step(algo, p, dtype, net, rate, mode), p).items():
                    band[m].append(v)
        grad_bytes = self.model.parameters * ITEMSIZE[dtype]
        return {
            "platform": plat.name,
            "algorithm": algo,
            "ranks": p,
            "dtype": dtype,
            "gradient_bytes": grad_bytes,
            "buckets": len(bucket_list(dtype, self.bucket_mib)),
            "allreduce_s": nominal.allreduce_s,
            "busbw_GBps": grad_bytes / nominal.allreduce_s * 2 * (p - 1) / p / 1e9 if nominal.allreduce_s else math.inf,
            "compute_s": nominal.compute_s,
            "optimizer_s": nominal.optimizer_s,
            "exposed_s": nominal.exposed_s,
            "hidden": nominal.hidden,
            "step_s": nominal.step_s,
            **self.metrics(nominal, p),
            **{f"{m}_low": min(v) for m, v in band.items()},
            **{f"{m}_high": max(v) for m, v in band.items()},
            "band_spans_network": len(nets) == len(variants(plat)),  # else the rate and overlap only
            "approximate": "; ".join(n or "as described" for n in sorted(nets) if (n, algo, p) in self.approximate),
            "batch_per_rank": self.batch,
            "overlap": plat.overlap,
            "source": "simulated",
        }


def steps(proj: Projection) -> list[dict[str, Any]]:
    """Per (algorithm, ranks, dtype) simulated on the projection's platform: the step, its metrics and bands."""
    keys = sorted({(a, p) for v, a, p in proj.times if v == ""})
    found = [proj.row(a, p, d) for a, p in keys for d in ITEMSIZE]
    return [r for r in found if r is not None]
