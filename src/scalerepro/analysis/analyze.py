"""Time-to-accuracy, throughput, scaling efficiency, all-reduce share, baselines -> metrics.

Definitions (docs/experiments.md): time-to-accuracy is the wall
time from ``run_start`` to the first evaluation whose top-1 reaches the
target; start-up before the first epoch is reported beside it, never hidden.
Throughput is the median images/s over epochs after the first (the first
carries warm-up) or the only epoch. Scaling efficiency at N ranks is
throughput(N) / (N/N0 x throughput(N0)) with N0 the smallest measured count.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, SupportsInt, cast

import pandas as pd

from scalerepro.analysis import accuracy
from scalerepro.analysis.collect import read_csv, read_tables
from scalerepro.baselines import load_baselines
from scalerepro.io import read_json, write_json_atomic, write_text_atomic


def time_to_accuracy(evals: pd.DataFrame, target: float) -> float | None:
    """Training seconds from run_start to the first eval with top1 >= target (None if never reached); the
    downtime between a preempted run's segments is not in ``elapsed_s`` (see collect.training_clock)."""
    hit = evals[evals["top1"] >= target].sort_values("elapsed_s")
    return float(hit["elapsed_s"].iloc[0]) if len(hit) else None


def throughput(epochs: pd.DataFrame) -> float:
    """Median images/s over the epochs after the first (or of the only one)."""
    ordered = epochs.sort_values("epoch")
    steady = ordered.iloc[1:] if len(ordered) > 1 else ordered
    return float(steady["images_per_s"].median())


def step_parts(steps: pd.DataFrame) -> pd.Series:
    """Seconds of a run's steps by part: data wait, forward+backward, all-reduce, optimizer.

    The all-reduce part is the time the step waited for its sums after backward (``allreduce_wait_s``,
    measured after a device synchronize): on a GPU, NCCL's calls only enqueue work, and with overlap the
    communication thread's busy time (``allreduce_s``) runs beside backward; the wait is what the step
    paid. Logs without it (older runs) fall back to the busy time.
    """
    wait = (
        steps["allreduce_wait_s"]
        if "allreduce_wait_s" in steps and steps["allreduce_wait_s"].notna().all()
        else steps["allreduce_s"]
    )
    parts = steps[["data_s", "fwd_bwd_s", "optimizer_s"]].sum()
    return pd.Series(
        {
            "data_s": parts["data_s"],
            "fwd_bwd_s": parts["fwd_bwd_s"],
            "allreduce_s": wait.sum(),
            "optimizer_s": parts["optimizer_s"],
        }
    )


def per_run(tables: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """One row per run: tta, throughput, final accuracy, all-reduce share of step time."""
    rows = []
    run: Any  # a row of the runs table: its columns' types are the CSV's, unknown to the type checker
    for run in tables["runs"].itertuples(index=False):
        ev = tables["evals"][tables["evals"]["run"] == run.run]
        ep = tables["epochs"][tables["epochs"]["run"] == run.run]
        st = tables["steps"][tables["steps"]["run"] == run.run]
        step_total = step_parts(st)
        rows.append(
            {
                "run": run.run,
                "setting": run.setting,
                "variant": run.variant,
                "algorithm": run.algorithm,
                "world_size": int(run.world_size),
                "bn_group": str(run.bn_group),
                "seed": int(run.seed),
                "repetition": int(run.repetition),
                "optimizer": run.optimizer,
                "global_batch": int(run.global_batch),
                "steps": int(st["step"].max()) + 1 if len(st) else None,  # optimizer steps taken (numbered from 0)
                "dataset": getattr(run, "dataset", None),
                "synthetic": getattr(run, "synthetic", None),
                "status": run.status,
                "target_top1": run.target_top1,
                "final_top1": run.final_top1,
                "best_top1": float(ev["top1"].max()) if len(ev) else None,
                "val_samples": int(ev["samples"].iloc[-1])
                if len(ev) and "samples" in ev and ev["samples"].notna().any()
                else None,
                "tta_s": time_to_accuracy(ev, run.target_top1),
                "startup_s": run.startup_s,
                "stage_s": run.stage_s,
                "downtime_s": getattr(run, "downtime_s", None),
                "images_per_s": throughput(ep) if len(ep) else None,
                "allreduce_share": float(step_total["allreduce_s"] / step_total.sum())
                if step_total.sum() > 0
                else None,
                **{
                    f"{k}_share": float(step_total[f"{k}_s"] / step_total.sum()) if step_total.sum() > 0 else None
                    for k in ("data", "fwd_bwd", "optimizer")
                },
                "source": "measured",
            }
        )
    return pd.DataFrame(rows)


SCALING_COLUMNS = [
    "setting",
    "algorithm",
    "bn_group",
    "world_size",
    "runs",
    "images_per_s",
    "ideal_images_per_s",
    "efficiency",
    "tta_median_s",
    "tta_mlperf_s",
    "source",
]
MLPERF_MIN_RUNS = 5  # MLPerf ResNet: 5 runs, the fastest and the slowest dropped, the rest averaged


def mlperf_score(tta: pd.Series) -> float | None:
    """MLPerf's time-to-train score of some runs: drop the fastest and slowest, mean the rest.

    A run that never reached the target counts as infinitely slow (so one may be dropped); None
    with fewer than 5 runs, or when a run that did not converge is left after dropping.
    """
    times = sorted(math.inf if pd.isna(t) else float(t) for t in tta)
    if len(times) < MLPERF_MIN_RUNS or math.isinf(times[-2]):
        return None
    kept = times[1:-1]
    return sum(kept) / len(kept)


def scaling(runs: pd.DataFrame) -> pd.DataFrame:
    """Per setting (algorithm, BN group) and rank count: median images/s over seeds and repetitions, the
    scaling efficiency against the smallest rank count of that setting, and the median and MLPerf-scored
    time to accuracy."""
    parts = []
    for _, group in runs.dropna(subset=["images_per_s"]).groupby("setting"):
        g = (
            group.groupby(["setting", "algorithm", "bn_group", "world_size"], as_index=False)
            .agg(
                runs=("run", "count"),
                images_per_s=("images_per_s", "median"),
                tta_median_s=("tta_s", "median"),
                tta_mlperf_s=("tta_s", mlperf_score),
            )
            .sort_values("world_size")
        )
        n0, t0 = g["world_size"].iloc[0], g["images_per_s"].iloc[0]
        g["ideal_images_per_s"] = g["world_size"] / n0 * t0
        g["efficiency"] = g["images_per_s"] / g["ideal_images_per_s"]
        g["source"] = "measured"
        parts.append(g[SCALING_COLUMNS])
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(columns=SCALING_COLUMNS)


def comparison(
    runs: pd.DataFrame,
    baselines: pd.DataFrame,
    scale: pd.DataFrame | None = None,
    projected: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Measured runs, cost-model projections and published results, each row saying which it is; a reproduced
    paper's published rows name it (``paper``, its title as papers.csv's)."""
    measured = pd.DataFrame(
        {
            "work": "this cluster: " + runs["run"],
            "accelerators": runs["world_size"],
            "top1": runs["best_top1"],
            "time_s": runs["tta_s"],
            "images_per_s": runs["images_per_s"],
            "cite": "measured here",
            "source": "measured",
        }
    )
    if scale is not None and len(scale) and len(runs):
        eff = runs[["setting", "world_size"]].merge(
            scale[["setting", "world_size", "efficiency"]], how="left", on=["setting", "world_size"]
        )
        measured["scaling_efficiency"] = eff["efficiency"].to_numpy()
    cols = [
        "work",
        "accelerators",
        "top1",
        "time_s",
        "images_per_s",
        "scaling_efficiency",
        "allreduce_ms",
        "cite",
        "source",
        "paper",
    ]
    parts = [measured.reindex(columns=cols), baselines.reindex(columns=cols)]
    if projected is not None and len(projected):
        parts.insert(1, projected.reindex(columns=cols))
    return pd.concat(parts, ignore_index=True)


def projections(costmodel_path: Path | None) -> pd.DataFrame:
    """The cost model's projected time per all-reduce of ResNet-50's gradients at the papers' scales."""
    cols = ["work", "accelerators", "allreduce_ms", "cite", "source"]
    if costmodel_path is None:
        return pd.DataFrame(columns=cols)
    doc = read_json(costmodel_path)
    rows = [
        {
            "work": f"projected: {p['algorithm']} on a {p['topology']} ({p['fit_regime']} fit)",
            "accelerators": p["ranks"],
            "allreduce_ms": p["ms"],
            "cite": "cost model fitted here",
            "source": "projected",
        }
        for p in doc.get("projection", [])
    ]
    return pd.DataFrame(rows, columns=cols)


SIMULATED_COLUMNS = [
    "platform",
    "algorithm",
    "ranks",
    "dtype",
    "allreduce_s",
    "busbw_GBps",
    "images_per_s",
    "images_per_s_low",
    "images_per_s_high",
    "efficiency",
    "efficiency_low",
    "efficiency_high",
    "time_90_epochs_s",
    "time_90_epochs_s_low",
    "time_90_epochs_s_high",
    "hidden",
    "approximate",
    "source",
]
SENSITIVITY_COLUMNS = [
    "id",
    "metric",
    "assumption",
    "slow_end",
    "fast_end",
    "at_slow_end",
    "at_fast_end",
    "as_described",
    "swing",
]
PAPERS_COLUMNS = [
    "id",
    "paper",
    "claim",
    "platform",
    "algorithm",
    "ranks",
    "dtype",
    "metric",
    "bound",
    "published",
    "simulated",
    "simulated_low",
    "simulated_high",
    "simulated_over_published",
    "verdict",
    "outside_by",
    "assumption_to_revisit",
    "cite",
    "independent",
    "depends_on",
    "rests_on",
    "rests_on_ends",
    "rests_on_low",
    "rests_on_high",
    "why_not",
]
VALIDATION_COLUMNS = [
    "algorithm",
    "modelled_as",
    "ranks",
    "bytes",
    "regime",
    "platform",
    "measured_s",
    "simulated_s",
    "ratio",
]


STUDY_COLUMNS = ["study", "description", "run"]


def study_table(grids: dict[str, list[str]], descriptions: dict[str, str]) -> pd.DataFrame:
    """One row per run of each grid (config's TrainConfig.grids: the main grid, then each study)."""
    rows = [(name, descriptions.get(name, ""), run) for name, runs in grids.items() for run in runs]
    return pd.DataFrame(rows, columns=STUDY_COLUMNS)


def simulation(sim_dir: Path | None) -> dict[str, pd.DataFrame]:
    """The simulation's tables (scale -> simulated, papers, validation); empty ones when it did not run."""
    names = {
        "simulated.csv": ("scale.csv", "simulate-scale", SIMULATED_COLUMNS),
        "papers.csv": ("papers.csv", "simulate-scale", PAPERS_COLUMNS),
        "sensitivity.csv": ("sensitivity.csv", "simulate-scale", SENSITIVITY_COLUMNS),
        "validation.csv": ("validation.csv", "simulate-validate", VALIDATION_COLUMNS),
    }
    out = {}
    for name, (source, writer, cols) in names.items():
        out[name] = (
            read_csv(sim_dir / source, writer).reindex(columns=cols)
            if sim_dir is not None
            else pd.DataFrame(columns=cols)
        )
    return out


def simulated_rows(scale: pd.DataFrame) -> pd.DataFrame:
    """Simulated ResNet-50 steps as comparison rows: images/s, efficiency, 90 epochs, all-reduce per step."""
    cols = ["work", "accelerators", "time_s", "images_per_s", "scaling_efficiency", "allreduce_ms", "cite", "source"]
    if not len(scale):
        return pd.DataFrame(columns=cols)
    return pd.DataFrame(
        {
            "work": "simulated: " + scale["algorithm"] + " on " + scale["platform"] + " (" + scale["dtype"] + ")",
            "accelerators": scale["ranks"],
            "time_s": scale["time_90_epochs_s"],
            "images_per_s": scale["images_per_s"],
            "scaling_efficiency": scale["efficiency"],
            "allreduce_ms": scale["allreduce_s"] * 1e3,
            "cite": "SimGrid on config/platforms.yaml",
            "source": "simulated",
        },
        columns=cols,
    )


def simulation_metrics(sim: dict[str, pd.DataFrame]) -> dict[str, Any]:
    """For DVC: the simulator's median error against this machine per rank count, and each claim's simulated value."""
    val = sim["validation.csv"]
    big = val[val["bytes"] >= 64 << 10] if len(val) else val
    errors = (
        {f"n{int(cast(SupportsInt, n))}": _clean((g["ratio"] - 1).abs().median()) for n, g in big.groupby("ranks")}
        if len(big)
        else {}
    )
    claims = {
        str(r["id"]): {k: _clean(r[k]) for k in ("simulated", "simulated_low", "simulated_high")}
        for _, r in sim["papers.csv"].iterrows()
    }
    return {"validation_median_abs_error_64KiB_up": errors, "claims": claims}


def busbw(bench: pd.DataFrame) -> pd.DataFrame:
    """Benchmark points for the busbw plot and the cards: each with what it ran on (hosts, ranks per core) and
    its per-round times (``round_us``, JSON)."""
    cols = [
        "algorithm",
        "world_size",
        "hosts",
        "ranks_per_core",
        "bytes",
        "time_us",
        "round_us",
        "algbw_GBps",
        "busbw_GBps",
        "wrong",
        "schedule",
    ]
    return bench.reindex(columns=cols) if len(bench) else pd.DataFrame(columns=cols)


def _clean(value: Any) -> Any:
    """JSON-safe scalar: NaN -> None, numpy -> Python."""
    if value is None:
        return None
    if isinstance(value, float) and math.isnan(value):
        return None
    return value.item() if hasattr(value, "item") else value


def metrics(runs: pd.DataFrame, scale: pd.DataFrame, bench: pd.DataFrame) -> dict[str, Any]:
    """The DVC metrics document: a summary plus per-run and per-benchmark numbers."""
    per = {
        r["run"]: {
            k: _clean(r.get(k))
            for k in ("tta_s", "best_top1", "images_per_s", "allreduce_share", "startup_s", "stage_s", "downtime_s")
        }
        for _, r in runs.iterrows()
    }
    scaled = {
        f"{r['setting']}-n{int(r['world_size'])}": {
            "images_per_s": _clean(r["images_per_s"]),
            "efficiency": _clean(r["efficiency"]),
            "runs": int(r["runs"]),
            "tta_median_s": _clean(r["tta_median_s"]),
            "tta_mlperf_s": _clean(r["tta_mlperf_s"]),
        }
        for _, r in scale.iterrows()
    }
    peak = (
        {
            f"{a}-n{int(cast(SupportsInt, n))}": _clean(g["busbw_GBps"].max())
            for (a, n), g in bench.groupby(["algorithm", "world_size"])
        }
        if len(bench)
        else {}
    )
    reached = runs["tta_s"].notna() if len(runs) else pd.Series(dtype=bool)
    summary = {
        "runs": len(runs),
        "runs_reaching_target": int(reached.sum()),
        "best_top1": _clean(runs["best_top1"].max()) if len(runs) else None,
        "fastest_tta_s": _clean(runs["tta_s"].min()) if reached.any() else None,
        "max_images_per_s": _clean(runs["images_per_s"].max()) if len(runs) else None,
        "bench_wrong": _bench_wrong(bench),
    }
    return {"summary": summary, "runs": per, "scaling": scaled, "bench_peak_busbw_GBps": peak}


def _bench_wrong(bench: pd.DataFrame) -> int:
    """Wrong elements over every bench row, in place and out of place (old benches have no oop_wrong column)."""
    columns = [c for c in ("wrong", "oop_wrong") if c in bench.columns]
    return int(bench[columns].fillna(0).to_numpy().sum()) if len(bench) and columns else 0


def analyze(
    tables_dir: Path,
    baselines_path: Path,
    metrics_path: Path,
    out: Path,
    costmodel_path: Path | None = None,
    sim_dir: Path | None = None,
    studies: pd.DataFrame | None = None,
) -> dict[str, Any]:
    """Write metrics.json and the analysis CSVs; return the metrics. ``studies`` (:func:`study_table`) names
    the grid or grids each run was trained for; without it, studies.csv has no rows."""
    tables = read_tables(tables_dir)
    runs = (
        per_run(tables)
        if len(tables["runs"])
        else pd.DataFrame(
            columns=[
                "run",
                "setting",
                "variant",
                "algorithm",
                "world_size",
                "bn_group",
                "seed",
                "repetition",
                "optimizer",
                "global_batch",
                "tta_s",
                "best_top1",
                "final_top1",
                "status",
                "images_per_s",
                "source",
            ]
        )
    )
    scale = scaling(runs)
    bench = busbw(tables["bench"])
    sim = simulation(sim_dir)
    projected = pd.concat([projections(costmodel_path), simulated_rows(sim["simulated.csv"])], ignore_index=True)
    out.mkdir(parents=True, exist_ok=True)
    outputs = {
        "runs.csv": runs,
        "scaling.csv": scale,
        "busbw.csv": bench,
        "comparison.csv": comparison(runs, load_baselines(baselines_path), scale, projected),
        "tta.csv": tables["evals"][["run", "algorithm", "world_size", "epoch", "elapsed_s", "top1", "top5"]]
        if len(tables["evals"])
        else pd.DataFrame(columns=["run", "algorithm", "world_size", "epoch", "elapsed_s", "top1", "top5"]),
        "accuracy.csv": accuracy.agreement(runs),
        "recipes.csv": accuracy.recipes(runs),
        "studies.csv": studies if studies is not None else pd.DataFrame(columns=STUDY_COLUMNS),
        **sim,
    }
    for name, frame in outputs.items():
        write_text_atomic(out / name, frame.to_csv(index=False))
    result = metrics(runs, scale, tables["bench"]) | {"simulation": simulation_metrics(sim)}
    write_json_atomic(metrics_path, result)
    return result
