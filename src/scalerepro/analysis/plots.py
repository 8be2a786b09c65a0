"""Seaborn figures a reader understands without the code: titles, units, legends."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import PercentFormatter

from scalerepro.analysis.accuracy import REFERENCE
from scalerepro.analysis.collect import read_csv

FIGURES = (
    "scaling.png",
    "scaling_efficiency.png",
    "time_to_accuracy.png",
    "allreduce_busbw.png",
    "step_breakdown.png",
    "simulation_validation.png",
    "simulation_scale.png",
    "simulation_sensitivity.png",
    "accuracy_by_algorithm.png",
    "recipe_effects.png",
)


def _save(fig: Figure, path: Path) -> Path:
    """Save as PNG at ``path`` and as SVG beside it, each atomically (temporary name, then rename); close."""
    fig.tight_layout()
    for target in (path, path.with_suffix(".svg")):
        tmp = target.with_name(f".{target.stem}.partial{target.suffix}")
        fig.savefig(tmp, dpi=120)
        tmp.replace(target)
    plt.close(fig)
    return path


def _empty(ax: Axes, what: str) -> None:
    """Say on the figure that there was nothing to draw."""
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes)


def published_rows(comparison: pd.DataFrame, column: str) -> pd.DataFrame:
    """Published results that state ``column`` and an accelerator count."""
    if not len(comparison) or column not in comparison.columns:
        return pd.DataFrame(columns=["work", "accelerators", column])
    pub = comparison[comparison["source"] == "published"]
    return pub[pub[column].notna() & pub["accelerators"].notna()]


def best_simulated(sim: pd.DataFrame) -> pd.DataFrame:
    """Per platform, the float32 curve of the algorithm with the most images/s at the platform's largest count."""
    if not len(sim):
        return sim
    fp32 = sim[sim["dtype"] == "float32"]
    top = fp32.loc[fp32.groupby("platform")["ranks"].transform("max") == fp32["ranks"]]
    best = top.loc[top.groupby("platform")["images_per_s"].idxmax(), ["platform", "algorithm"]]
    return fp32.merge(best, on=["platform", "algorithm"]).sort_values(["platform", "ranks"])


def _simulated_lines(ax: Axes, sim: pd.DataFrame, column: str) -> None:
    """Dashed grey lines: each platform's best simulated algorithm (see :func:`best_simulated`)."""
    for (platform, algo), g in best_simulated(sim).groupby(["platform", "algorithm"]):
        ax.plot(g["ranks"], g[column], ls=":", marker=".", lw=1.2, label=f"simulated: {platform} ({algo})")


def scaling_plot(scale: pd.DataFrame, comparison: pd.DataFrame, path: Path, sim: pd.DataFrame | None = None) -> Path:
    """Images/s vs accelerators (log-log) per algorithm, the ideal linear line, simulated and published points."""
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    if sim is not None and len(sim):
        _simulated_lines(ax, sim, "images_per_s")
    if len(scale):
        sns.lineplot(data=scale, x="world_size", y="images_per_s", hue="setting", marker="o", ax=ax)
        ideal = scale.groupby("world_size", as_index=False)["ideal_images_per_s"].max()
        ax.plot(
            ideal["world_size"], ideal["ideal_images_per_s"], "k--", lw=1, label="ideal (linear, from the smallest)"
        )
    pub = published_rows(comparison, "images_per_s")
    if len(pub):
        ax.scatter(
            pub["accelerators"], pub["images_per_s"], marker="X", s=60, color="black", label="published (ResNet-50)"
        )
        seen: dict[float, int] = {}
        row: Any  # a row of the comparison table: its columns' types are the CSV's, unknown to the type checker
        for row in pub.sort_values("images_per_s", ascending=False).itertuples(index=False):
            k = seen[row.accelerators] = seen.get(row.accelerators, -1) + 1  # stack labels that share an x
            ax.annotate(
                f"{str(row.work).split(' (')[0]}: {row.images_per_s:,.0f}",
                (row.accelerators, row.images_per_s),
                fontsize=7,
                xytext=(-6, -12 - 9 * k),
                textcoords="offset points",
                ha="right",
            )
    if len(scale) or len(pub) or (sim is not None and len(sim)):
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.legend(title="all-reduce-g<BN group> (measured here)", fontsize=7)
    else:
        _empty(ax, "training runs")
    ax.set(title="Training throughput vs accelerators", xlabel="ranks (accelerators)", ylabel="throughput (images/s)")
    return _save(fig, path)


def efficiency_plot(scale: pd.DataFrame, comparison: pd.DataFrame, path: Path, sim: pd.DataFrame | None = None) -> Path:
    """Scaling efficiency (throughput / (ranks/smallest x throughput at the smallest)) per algorithm, simulated too."""
    fig, ax = plt.subplots(figsize=(6.5, 4.4))
    if sim is not None and len(sim):
        _simulated_lines(ax, sim, "efficiency")
    if len(scale):
        sns.lineplot(data=scale, x="world_size", y="efficiency", hue="setting", marker="o", ax=ax)
        ax.axhline(1.0, color="k", ls="--", lw=1, label="ideal")
    pub = published_rows(comparison, "scaling_efficiency")
    if len(pub):
        ax.scatter(pub["accelerators"], pub["scaling_efficiency"], marker="X", s=60, color="black", label="published")
        for row in pub.itertuples(index=False):
            ax.annotate(
                f"{str(row.work).split(' (')[0]}: {row.scaling_efficiency:.0%}",
                (row.accelerators, row.scaling_efficiency),
                fontsize=7,
                xytext=(-6, -12),
                textcoords="offset points",
                ha="right",
            )
    if len(scale) or len(pub) or (sim is not None and len(sim)):
        ax.set_xscale("log", base=2)
        ax.legend(title="all-reduce-g<BN group> (measured here)", fontsize=7)
    else:
        _empty(ax, "training runs")
    ax.set(
        title="Scaling efficiency vs the smallest rank count",
        xlabel="ranks (accelerators)",
        ylabel="scaling efficiency (fraction of linear)",
    )
    return _save(fig, path)


def tta_plot(tta: pd.DataFrame, runs: pd.DataFrame, path: Path) -> Path:
    """Top-1 vs wall time since run_start, one line per run, target as a dotted line."""
    fig, ax = plt.subplots(figsize=(6, 4.2))
    if len(tta):
        sns.lineplot(data=tta, x="elapsed_s", y="top1", hue="run", marker="o", ax=ax)
        for target in sorted(set(runs["target_top1"].dropna())) if len(runs) else []:
            ax.axhline(target, color="grey", ls=":", lw=1)
            ax.text(ax.get_xlim()[0], target, f" target {target:.0%}", va="bottom", color="grey")
        ax.legend(title="run", fontsize=7)
    else:
        _empty(ax, "evaluations")
    ax.set(title="Validation top-1 vs wall time", xlabel="time since run_start (s)", ylabel="top-1 accuracy (fraction)")
    return _save(fig, path)


def _by_size(ax: Axes, data: pd.DataFrame, y: str) -> None:
    """``y`` against message size (log 2), a line per algorithm and rank count."""
    sns.lineplot(
        data=data.assign(ranks=data["ranks"].astype(str)),
        x="bytes",
        y=y,
        hue="algorithm",
        style="ranks",
        marker="o",
        ax=ax,
    )
    ax.set_xscale("log", base=2)
    ax.legend(title="algorithm / ranks", fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))


def busbw_plot(bench: pd.DataFrame, path: Path) -> Path:
    """Bus bandwidth vs message size per algorithm and rank count."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if len(bench):
        _by_size(ax, bench.assign(ranks=bench["world_size"]), "busbw_GBps")
    else:
        _empty(ax, "benchmark points")
    ax.set(
        title="All-reduce bus bandwidth (busbw = algbw x 2(p-1)/p)",
        xlabel="message size per rank (bytes)",
        ylabel="busbw (GB/s)",
    )
    return _save(fig, path)


def breakdown_plot(runs: pd.DataFrame, path: Path) -> Path:
    """Share of step time in data wait, forward+backward, all-reduce and optimizer, per run."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    cols = {
        "data_share": "data wait",
        "fwd_bwd_share": "forward+backward",
        "allreduce_share": "all-reduce",
        "optimizer_share": "optimizer",
    }
    if len(runs) and set(cols) <= set(runs.columns):
        shares = runs.set_index("run")[list(cols)].rename(columns=cols)
        shares.plot.bar(stacked=True, ax=ax, colormap="tab10", rot=20)
        ax.legend(title="phase", fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    else:
        _empty(ax, "training steps")
    ax.set(
        title="Where a training step's time goes",
        xlabel="run (algorithm-n<ranks>-g<BN group>-s<seed>-r<repetition>)",
        ylabel="share of step time",
    )
    return _save(fig, path)


def validation_plot(validation: pd.DataFrame, path: Path) -> Path:
    """Simulated / measured all-reduce time vs message size, per algorithm and rank count (1 = exact)."""
    fig, ax = plt.subplots(figsize=(7.5, 4.2))
    if len(validation):
        _by_size(ax, validation, "ratio")
        ax.axhline(1.0, color="k", lw=1)
        for bound in (0.75, 1.25):
            ax.axhline(bound, color="grey", ls=":", lw=1)
        ax.axvline(64 << 10, color="grey", ls="--", lw=1)
        ax.set_yscale("log")
    else:
        _empty(ax, "simulation of this machine")
    ax.set(
        title="SimGrid against this machine (dotted: +-25%, dashed: 64 KiB)",
        xlabel="message size per rank (bytes)",
        ylabel="simulated / measured time",
    )
    return _save(fig, path)


def simulation_scale_plot(sim: pd.DataFrame, path: Path) -> Path:
    """ResNet-50's gradient all-reduce per step (float32) vs ranks, one panel per platform, one line per algorithm."""
    data = sim[sim["dtype"] == "float32"] if len(sim) else sim
    if not len(data):
        fig, ax = plt.subplots(figsize=(6, 4))
        _empty(ax, "simulation at scale")
        return _save(fig, path)
    grid = sns.relplot(
        data=data.assign(ms=data["allreduce_s"] * 1e3),
        x="ranks",
        y="ms",
        hue="algorithm",
        col="platform",
        col_wrap=2,
        kind="line",
        marker="o",
        height=3,
        aspect=1.3,
        facet_kws={"sharey": False},
    )
    grid.set(xscale="log", yscale="log")
    grid.set_axis_labels("ranks (accelerators)", "all-reduce per step (ms)")
    grid.figure.suptitle("ResNet-50 gradients (float32, as training buckets them), simulated", y=1.02)
    return _save(grid.figure, path)


def sensitivity_plot(table: pd.DataFrame, path: Path) -> Path:
    """Per simulated claim, one bar per ranged assumption: the claim's metric with that assumption alone at its slow
    and at its fast end, relative to the platform as described (the widest bar moves the claim most)."""
    claims = list(dict.fromkeys(table["id"])) if len(table) else []
    fig, axes = plt.subplots(max(1, len(claims)), 1, figsize=(7, 1.2 + 1.1 * max(1, len(claims))), squeeze=False)
    if not claims:
        _empty(axes[0][0], "sensitivity (simulate-scale)")
        return _save(fig, path)
    for ax, claim in zip(axes[:, 0], claims, strict=True):
        rows = table[table["id"] == claim].sort_values("swing")
        lo = rows["at_slow_end"] / rows["as_described"] - 1
        hi = rows["at_fast_end"] / rows["as_described"] - 1
        ax.barh(rows["assumption"], hi - lo, left=lo, color="tab:blue")
        ax.axvline(0, color="black", linewidth=0.8)
        ax.set_title(f"{claim} ({rows['metric'].iloc[0]})", fontsize=9)
        ax.tick_params(labelsize=7)
        ax.xaxis.set_major_formatter(PercentFormatter(1.0))
    axes[-1][0].set_xlabel("change from as described, one assumption from its slow to its fast end")
    return _save(fig, path)


def _curves(tta: pd.DataFrame, labels: pd.Series) -> pd.DataFrame:
    """Top-1 per epoch of the runs named in ``labels`` (index: run), each labelled."""
    curves = tta[tta["run"].isin(labels.index)].copy()
    curves["label"] = curves["run"].map(labels)
    return curves


def accuracy_plot(tta: pd.DataFrame, agreement: pd.DataFrame, runs: pd.DataFrame, path: Path) -> Path:
    """Top-1 per epoch of every algorithm at one seed (the largest comparison), the ring's other seeds dashed."""
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    if len(agreement):
        key = agreement.groupby(["variant", "world_size", "bn_group", "seed"]).size().idxmax()
        variant, world, bn, seed = cast("tuple[str, int, str | int, int]", key)  # the grouped columns' values
        same = runs[
            (runs["variant"] == variant) & (runs["world_size"] == world) & (runs["bn_group"].astype(str) == str(bn))
        ]
        at_seed = same[same["seed"] == seed].set_index("run")["algorithm"]
        sns.lineplot(data=_curves(tta, at_seed), x="epoch", y="top1", hue="label", marker="o", ax=ax, lw=1)
        others = same[(same["algorithm"] == REFERENCE) & (same["seed"] != seed)].set_index("run")["seed"]
        for run_name, g in _curves(tta, others).groupby("run"):
            ax.plot(g["epoch"], g["top1"], ls="--", color="grey", label=f"ring, seed {others[run_name]}")
        ax.legend(title=f"{world} ranks, {variant}, seed {seed}", fontsize=7)
    else:
        _empty(ax, "algorithm comparison")
    ax.set(
        title="Same seed, every all-reduce: accuracy agrees up to summation order",
        xlabel="epoch",
        ylabel="validation top-1 (fraction)",
    )
    return _save(fig, path)


def _prefer_base(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One run per value of ``keys``, the base recipe's where there is one (e.g. not its two-nodes twin)."""
    return runs.sort_values("variant", key=lambda v: v != "base").drop_duplicates(keys)


def recipe_plot(tta: pd.DataFrame, recipes: pd.DataFrame, path: Path) -> Path:
    """Two panels: top-1 per epoch by BN group (same global batch), and by optimizer and global batch."""
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    if len(recipes):
        small = recipes["global_batch"].min()
        bn = recipes[
            (recipes["optimizer"] == "sgd")
            & (recipes["global_batch"] == small)
            & (recipes["seed"] == recipes["seed"].min())
        ]
        labels = _prefer_base(bn, ["bn_group"]).set_index("run")["bn_group"].map(lambda g: f"BN over {g} rank(s)")
        sns.lineplot(data=_curves(tta, labels), x="epoch", y="top1", hue="label", marker="o", ax=axes[0])
        opt = recipes[(recipes["bn_group"].astype(str) == "1") & (recipes["seed"] == recipes["seed"].min())]
        opt = _prefer_base(opt, ["optimizer", "global_batch"])
        labels = opt.set_index("run").apply(lambda r: f"{r['optimizer']}, global batch {r['global_batch']}", axis=1)
        sns.lineplot(data=_curves(tta, labels), x="epoch", y="top1", hue="label", marker="o", ax=axes[1])
        world = int(recipes["world_size"].iloc[0])
        axes[0].set_title(f"Distributed batch norm ({world} ranks, global batch {small})")
        axes[1].set_title(f"Momentum SGD vs LARS as the batch grows ({world} ranks)")
        for ax in axes:
            ax.legend(fontsize=7)
    else:
        for ax in axes:
            _empty(ax, "recipe runs")
    for ax in axes:
        ax.set(xlabel="epoch", ylabel="validation top-1 (fraction)")
    return _save(fig, path)


def plot_all(analysis_dir: Path, out: Path) -> list[Path]:
    """Every figure, from the analysis CSVs."""

    def read(name: str) -> pd.DataFrame:
        return read_csv(analysis_dir / name, "analyze")

    sns.set_theme(style="whitegrid", context="notebook")
    out.mkdir(parents=True, exist_ok=True)
    runs, scale, comparison = read("runs.csv"), read("scaling.csv"), read("comparison.csv")
    sim = read("simulated.csv")
    return [
        scaling_plot(scale, comparison, out / FIGURES[0], sim),
        efficiency_plot(scale, comparison, out / FIGURES[1], sim),
        tta_plot(read("tta.csv"), runs, out / FIGURES[2]),
        busbw_plot(read("busbw.csv"), out / FIGURES[3]),
        breakdown_plot(runs, out / FIGURES[4]),
        validation_plot(read("validation.csv"), out / FIGURES[5]),
        simulation_scale_plot(sim, out / FIGURES[6]),
        sensitivity_plot(read("sensitivity.csv"), out / FIGURES[7]),
        accuracy_plot(read("tta.csv"), read("accuracy.csv"), runs, out / FIGURES[8]),
        recipe_plot(read("tta.csv"), read("recipes.csv"), out / FIGURES[9]),
    ]
