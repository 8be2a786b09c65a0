"""ResNet-50 at the papers' scale: its gradient buckets simulated per platform, projected to images/s and 90 epochs.

A training step of p ranks is the compute of one per-rank batch (at the
platform's per-accelerator ResNet-50 rate) plus the part of the gradient
all-reduce that does not hide behind it:

    step = compute + max(0, allreduce - overlap x compute),  allreduce = sum over buckets of one simulated all-reduce

with the buckets cut as training cuts them (``train.bucket_mib``), so only
the distinct bucket sizes are simulated. Scaling efficiency is compute /
step (one accelerator has nothing to reduce), images/s is p x batch / step,
and 90 epochs take 90 x images per epoch / images/s.
"""

from __future__ import annotations

import math
from typing import Any

from scalerepro.errors import UserError
from scalerepro.sim.engine import Point
from scalerepro.sim.platforms import Platform

RESNET50_PARAMETERS = 25_557_032  # torchvision ResNet-50
ITEMSIZE = {"float32": 4, "bfloat16": 2}
IMAGES_PER_EPOCH = 1_281_167  # ILSVRC-2012 training set (config/baselines.yaml)


def buckets(parameters: int, itemsize: int, bucket_mib: float) -> dict[int, int]:
    """Bucket size in bytes -> how many buckets of it, for ``parameters`` gradients cut as training cuts them."""
    per = max(1, int(bucket_mib * 2**20) // itemsize)
    full, rest = divmod(parameters, per)
    sizes = {per * itemsize: full} if full else {}
    if rest:
        sizes[rest * itemsize] = sizes.get(rest * itemsize, 0) + 1
    return sizes


def points(
    platform: Platform, algorithms: list[str], ranks: list[int], dtypes: list[str], bucket_mib: float, colors: int
) -> list[Point]:
    """Every distinct (algorithm, ranks, bucket bytes) to simulate on ``platform`` for the ``dtypes``' buckets.

    A bucket's time depends on its bytes, not its type, so a size both
    types cut (a full bucket) is simulated once.
    """
    for dtype in dtypes:
        if dtype not in ITEMSIZE:
            raise UserError(f"--dtypes {dtype}: choose from {', '.join(ITEMSIZE)}")
    sizes = sorted({size for dtype in dtypes for size in buckets(RESNET50_PARAMETERS, ITEMSIZE[dtype], bucket_mib)})
    return [
        Point(algo, p, size, platform, colors, 4 if size % 4 == 0 else 2)
        for p in ranks
        for size in sizes
        for algo in algorithms
    ]


def claim_points(
    claims: list[dict[str, Any]], platforms: list[Platform], bucket_mib: float, colors: int, max_ranks: int
) -> list[Point]:
    """The points the published claims need (their algorithm and the one they are compared with) up to max_ranks."""
    named = {p.name: p for p in platforms}
    out = []
    for c in claims:
        if c["platform"] in named and c["ranks"] <= max_ranks:
            algos = [c["algorithm"]] + ([c["over"]] if c.get("over") else [])
            out += points(named[c["platform"]], algos, [c["ranks"]], [c["dtype"]], bucket_mib, colors)
    return out


def unique(found: list[Point]) -> list[Point]:
    """``found`` without repeats (same platform, algorithm, ranks and bytes), in first-seen order."""
    seen: set[tuple[str, str, int, int]] = set()
    out = []
    for pt in found:
        key = (pt.platform.name, pt.algorithm, pt.ranks, pt.nbytes)
        if key not in seen:
            seen.add(key)
            out.append(pt)
    return out


def steps(rows: list[dict[str, Any]], platform: Platform, bucket_mib: float, batch: int) -> list[dict[str, Any]]:
    """Per (algorithm, ranks, dtype) on ``platform``: the step's all-reduce, images/s, efficiency, 90 epochs."""
    if not platform.images_per_s_per_accelerator:
        raise UserError(f"platform {platform.name!r} has no images_per_s_per_accelerator; add it to project steps")
    compute = batch / platform.images_per_s_per_accelerator
    by_point = {
        (r["algorithm"], r["ranks"], r["bytes"]): r["simulated_s"] for r in rows if r["platform"] == platform.name
    }
    out = []
    for algo, p, dtype in sorted({(a, p, d) for a, p, _ in by_point for d in ITEMSIZE}):
        itemsize = ITEMSIZE[dtype]
        sizes = buckets(RESNET50_PARAMETERS, itemsize, bucket_mib)
        if any((algo, p, size) not in by_point for size in sizes):
            continue
        allreduce = sum(n * by_point[algo, p, size] for size, n in sizes.items())
        step = compute + max(0.0, allreduce - platform.overlap * compute)
        images = p * batch / step
        grad_bytes = RESNET50_PARAMETERS * itemsize
        out.append(
            {
                "platform": platform.name,
                "algorithm": algo,
                "ranks": p,
                "dtype": dtype,
                "gradient_bytes": grad_bytes,
                "buckets": sum(sizes.values()),
                "allreduce_s": allreduce,
                "busbw_GBps": grad_bytes / allreduce * 2 * (p - 1) / p / 1e9 if allreduce > 0 else math.inf,
                "compute_s": compute,
                "step_s": step,
                "images_per_s": images,
                "efficiency": compute / step,
                "time_90_epochs_s": 90 * IMAGES_PER_EPOCH / images,
                "batch_per_rank": batch,
                "overlap": platform.overlap,
                "source": "simulated",
            }
        )
    return out
