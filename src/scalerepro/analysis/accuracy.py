"""Accuracy across all-reduce algorithms, and across the recipes that should change it.

At the same seed every all-reduce algorithm computes the same sums up to
float summation order, so its final top-1 must match the ring's within the
run-to-run noise. Two sources make up that noise, and the larger is the
tolerance: the spread of the ring's final top-1 over seeds with everything
else equal (measured: the `noise` study of config/config.yaml), and the
sampling error of comparing two top-1 accuracies on n validation images
(two standard errors of a difference, 2 sqrt(2 p (1 - p) / n)), which a
handful of seeds underestimates. Distributed batch norm, LARS and the
global batch are meant to change accuracy; :func:`recipes` lays their runs
side by side.
"""

from __future__ import annotations

import math
from typing import Any, SupportsInt, cast

import pandas as pd

REFERENCE = "ring"
SAME = ["variant", "world_size", "bn_group", "seed", "repetition"]  # what a comparison holds fixed
AGREEMENT_COLUMNS = [
    "variant",
    "world_size",
    "bn_group",
    "seed",
    "algorithm",
    "run",
    "final_top1",
    "ring_top1",
    "diff",
    "seed_range",
    "noise_seeds",
    "eval_error",
    "noise",
    "within_noise",
    "val_samples",
    "dataset",
    "synthetic",
]
RECIPE_COLUMNS = [
    "run",
    "variant",
    "world_size",
    "bn_group",
    "optimizer",
    "global_batch",
    "steps",
    "seed",
    "final_top1",
    "best_top1",
    "tta_s",
    "status",
    "val_samples",
    "dataset",
    "synthetic",
]


def seed_range(runs: pd.DataFrame, variant: str, world: int, bn: str | int) -> tuple[float | None, int]:
    """Range of the ring's final top-1 over seeds (first repetitions) at one variant, rank count and BN group."""
    ring = runs[
        (runs["algorithm"] == REFERENCE)
        & (runs["variant"] == variant)
        & (runs["world_size"] == world)
        & (runs["bn_group"].astype(str) == str(bn))
        & (runs["repetition"] == 0)
    ].dropna(subset=["final_top1"])
    seeds = ring.groupby("seed")["final_top1"].first()
    return (float(seeds.max() - seeds.min()) if len(seeds) > 1 else None), len(seeds)


def eval_error(top1: float, samples: float | None) -> float | None:
    """Two standard errors of the difference of two top-1 accuracies near ``top1`` on ``samples`` images."""
    if samples is None or pd.isna(samples) or samples <= 0:
        return None
    return 2 * math.sqrt(2 * top1 * (1 - top1) / samples)


def agreement(runs: pd.DataFrame) -> pd.DataFrame:
    """Per run compared with the ring at the same variant, ranks, BN group, seed and repetition: the final
    top-1 difference, the noise there (the larger of the ring's seed range and the evaluation's sampling
    error; None when neither is known), and whether the difference is within it."""
    rows = []
    for key, group in runs.groupby(SAME):
        ring = group[group["algorithm"] == REFERENCE]
        if ring.empty or group["algorithm"].nunique() < 2:
            continue
        variant, world, bn, seed, _ = cast("tuple[str, int, str | int, int, int]", key)  # the SAME columns' values
        spread, seeds = seed_range(runs, variant, world, bn)
        ref = float(ring["final_top1"].iloc[0])
        sampling = eval_error(ref, ring["val_samples"].iloc[0] if "val_samples" in ring else None)
        known = [v for v in (spread, sampling) if v is not None]
        noise = max(known) if known else None
        run: Any  # a row of the runs table: its columns' types are the CSV's, unknown to the type checker
        for run in group[group["algorithm"] != REFERENCE].itertuples(index=False):
            diff = float(run.final_top1) - ref
            rows.append(
                {
                    "variant": variant,
                    "world_size": int(world),
                    "bn_group": str(bn),
                    "seed": int(seed),
                    "algorithm": run.algorithm,
                    "run": run.run,
                    "final_top1": float(run.final_top1),
                    "ring_top1": ref,
                    "diff": diff,
                    "seed_range": spread,
                    "noise_seeds": seeds,
                    "eval_error": sampling,
                    "noise": noise,
                    "within_noise": None if noise is None else bool(abs(diff) <= noise + 1e-9),
                    "val_samples": getattr(run, "val_samples", None),
                    "dataset": getattr(run, "dataset", None),
                    "synthetic": getattr(run, "synthetic", None),
                }
            )
    return pd.DataFrame(rows, columns=AGREEMENT_COLUMNS)


def recipes(runs: pd.DataFrame) -> pd.DataFrame:
    """The ring's runs at the rank count where recipes were varied (BN group, optimizer, global batch)."""
    ring = runs[runs["algorithm"] == REFERENCE]
    if ring.empty:
        return pd.DataFrame(columns=RECIPE_COLUMNS)
    varied = ring.groupby("world_size").apply(
        lambda g: g[["variant", "bn_group", "optimizer", "global_batch"]].drop_duplicates().shape[0]
    )
    world = int(cast(SupportsInt, varied.idxmax()))  # a world_size value
    return (
        ring[ring["world_size"] == world].reindex(columns=RECIPE_COLUMNS).sort_values(["variant", "bn_group", "seed"])
    )
