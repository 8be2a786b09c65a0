"""Figures a reader can read at a glance: one panel per question, each algorithm in the same colour and with the
same marker in every figure (:func:`algorithm_style`, from the algorithm table), log axes with plain ticks, and
every key beside the data, not on it: a legend outside the axes, or, where more than :data:`MAX_KEY` lines share
a panel, each line labelled at its end.

Each ``*_figure`` function builds a figure from the analysis tables and returns it unsaved, so the tests can
check its layout (tests/analysis/test_figures.py); :func:`plot_all` builds and saves them all.
"""

from __future__ import annotations

import itertools
import math
import textwrap
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, cast

import matplotlib as mpl

mpl.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import seaborn as sns
from matplotlib.axes import Axes
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter, PercentFormatter

from scalerepro.analysis.accuracy import REFERENCE
from scalerepro.analysis.collect import read_csv
from scalerepro.comm.algorithms import ALGORITHMS

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
MAX_KEY = 8  # the most entries one legend holds; past it, each line is labelled at its end
FONT = 7  # keys, labels at lines' ends and annotations (points)

# Qualitative colours for readers with colour-vision deficiency: Paul Tol's muted scheme, then Okabe and Ito's.
# Each algorithm also has its own marker, so no two are told apart by colour alone.
COLOURS = (
    "#CC6677",
    "#DDCC77",
    "#117733",
    "#332288",
    "#88CCEE",
    "#882255",
    "#44AA99",
    "#999933",
    "#AA4499",
    "#E69F00",
    "#0072B2",
    "#D55E00",
    "#56B4E9",
)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">", "p", "h", "*", "d")
OTHER = ("#777777", "o")  # a name the algorithm table does not hold
PUBLISHED: dict[str, Any] = {"marker": "X", "s": 70, "color": "black", "zorder": 5}
SEQUENCE = "viridis"  # runs that differ in something other than the algorithm (ranks, BN group, recipe)


def algorithm_style(name: str) -> tuple[str, str]:
    """(colour, marker) of an algorithm, by its place in the algorithm table: the same in every figure."""
    names = list(ALGORITHMS)
    if name not in names:
        return OTHER
    i = names.index(name)
    return COLOURS[i % len(COLOURS)], MARKERS[i % len(MARKERS)]


def _plain(value: float, _pos: Any = None) -> str:
    """A log tick as a reader writes it: 1, 20, 500, 1k, 2.5M."""
    if value <= 0:
        return ""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= size:
            return f"{value / size:g}{unit}"
    return f"{value:g}"


def _count(value: float, _pos: Any = None) -> str:
    """A rank count: 1, 64, 1,024."""
    return f"{value:,.0f}" if value >= 1 else ""


def _bytes(value: float, _pos: Any = None) -> str:
    """A message size: 8 B, 64 KiB, 4 MiB."""
    for size, unit in ((1 << 30, "GiB"), (1 << 20, "MiB"), (1 << 10, "KiB")):
        if value >= size:
            return f"{value / size:g} {unit}"
    return f"{value:g} B" if value >= 1 else ""


def _log2(ax: Axes, formatter: Callable[[float, Any], str] = _count, most: int = 6) -> None:
    """x on a log-2 axis (ranks, bytes), labelled at powers of two, every second or fourth one where more than
    ``most`` would crowd the axis. Call it once the data are drawn."""
    ax.set_xscale("log", base=2)
    ax.autoscale_view()
    low, high = ax.get_xlim()
    doublings = math.log2(high / low) if low > 0 and high > low else 1.0
    ax.xaxis.set_major_locator(LogLocator(base=2 ** max(1, math.ceil(doublings / most)), numticks=most + 2))
    ax.xaxis.set_major_formatter(FuncFormatter(formatter))
    ax.xaxis.set_minor_formatter(NullFormatter())


def _log10(ax: Axes) -> None:
    """y on a log-10 axis with plain labels: 1, 2, 5, 10 ... over a short range, decades over a long one."""
    ax.set_yscale("log")
    ax.autoscale_view()
    low, high = ax.get_ylim()
    decades = math.log10(high / low) if low > 0 and high > low else 1.0
    subs = (1.0, 2.0, 5.0) if decades < 2.5 else (1.0,)
    ax.yaxis.set_major_locator(LogLocator(base=10, subs=subs, numticks=12))
    ax.yaxis.set_major_formatter(FuncFormatter(_plain))
    ax.yaxis.set_minor_formatter(NullFormatter())


def _figure(
    panels: int, columns: int, width: float = 4.6, height: float = 3.4, sharey: bool = False
) -> tuple[Figure, list[Axes]]:
    """A figure laid out by matplotlib's constrained layout (titles, labels and keys kept inside), ``panels`` axes
    in rows of ``columns``; unused cells are hidden."""
    columns = max(1, min(columns, panels))
    rows = math.ceil(max(1, panels) / columns)
    fig = plt.figure(figsize=(width * columns + 1.8, height * rows + 0.5), layout="constrained")
    axes = list(fig.subplots(rows, columns, squeeze=False, sharey=sharey).flat)
    for ax in axes[max(1, panels) :]:
        ax.set_visible(False)
    return fig, axes[: max(1, panels)]


def _save(fig: Figure, path: Path) -> Path:
    """Save as PNG at ``path`` and as SVG beside it, each atomically (temporary name, then rename); close."""
    for target in (path, path.with_suffix(".svg")):
        tmp = target.with_name(f".{target.stem}.partial{target.suffix}")
        fig.savefig(tmp, dpi=120)
        tmp.replace(target)
    plt.close(fig)
    return path


def _empty(ax: Axes, what: str) -> None:
    """Say on the panel that there was nothing to draw."""
    ax.text(0.5, 0.5, f"no {what} in this run", ha="center", va="center", transform=ax.transAxes)


def _title(ax: Axes, text: str, width: int = 48) -> None:
    """A panel title, wrapped so that it stays over its panel."""
    ax.set_title(textwrap.fill(text, width), fontsize=9)


def _spread(ys: list[float], gap: float) -> list[float]:
    """``ys`` (axes fractions) moved apart to at least ``gap``, each as little as it can, kept within the axes'
    height where they fit."""
    order = sorted(range(len(ys)), key=ys.__getitem__)
    low, high = gap / 2, 1.0 - gap / 2  # a label centred at the axes' top would reach into the title
    placed = [min(max(ys[i], low), high) for i in order]
    for k in range(1, len(placed)):
        placed[k] = max(placed[k], placed[k - 1] + gap)
    over = placed[-1] - high if placed else 0.0
    if over > 0:
        placed[-1] -= over
        for k in range(len(placed) - 2, -1, -1):
            placed[k] = min(placed[k], placed[k + 1] - gap)
    out = [0.0] * len(ys)
    for k, i in enumerate(order):
        out[i] = placed[k]
    return out


def _end_labels(ax: Axes) -> None:
    """Label each named line at the right of the axes, at the height of its last point, moved apart so that no
    label lies on another; a thin leader in the line's colour joins the two."""
    lines = [ln for ln in ax.get_lines() if not str(ln.get_label()).startswith("_") and np.size(ln.get_xydata())]
    if not lines:
        return
    ax.get_xlim(), ax.get_ylim()  # settle autoscaling before reading the limits
    to_axes = ax.transScale + ax.transLimits
    ends = []
    for ln in lines:
        xy = _finite(np.asarray(ln.get_xydata(), dtype=float))
        ends.append(float(to_axes.transform(xy[-1])[1]) if len(xy) else 0.5)
    fig = ax.get_figure()
    assert isinstance(fig, Figure)
    fig.draw_without_rendering()  # the laid-out height of the axes sets the gap
    height_pt = ax.get_window_extent().height * 72 / fig.dpi
    placed = _spread(ends, 1.6 * FONT / max(height_pt, 1.0))  # a line of text, with its descent and a gap
    for ln, end, y in zip(lines, ends, placed, strict=True):
        ax.annotate(
            str(ln.get_label()),
            xy=(1.0, end),
            xycoords="axes fraction",
            xytext=(1.04, y),
            textcoords="axes fraction",
            color=ln.get_color(),
            fontsize=FONT,
            va="center",
            annotation_clip=False,
            arrowprops={"arrowstyle": "-", "color": ln.get_color(), "lw": 0.6, "relpos": (0.0, 0.5)},
        )


def _key(ax: Axes, title: str | None = None) -> None:
    """The panel's key outside its axes: a legend to the right, or labels at the lines' ends past
    :data:`MAX_KEY` entries."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return
    if len(handles) <= MAX_KEY:
        ax.legend(
            handles,
            labels,
            title=title,
            fontsize=FONT,
            title_fontsize=FONT,
            loc="upper left",
            bbox_to_anchor=(1.02, 1.0),
            borderaxespad=0.0,
            frameon=False,
        )
    else:
        _end_labels(ax)


def _shared_key(fig: Figure, axes: Iterable[Axes], title: str | None = None) -> None:
    """One legend for panels that share their lines' names (right of the figure), or labels at each panel's
    lines' ends past :data:`MAX_KEY` names."""
    axes = list(axes)
    named: dict[str, Any] = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels(), strict=True):
            named.setdefault(label, handle)
    if not named:
        return
    if len(named) <= MAX_KEY:
        fig.legend(
            list(named.values()),
            list(named),
            title=title,
            loc="outside right upper",
            fontsize=FONT,
            title_fontsize=FONT,
            frameon=False,
        )
    else:
        for ax in axes:
            _end_labels(ax)


def _algorithm_line(ax: Axes, x: Any, y: Any, algorithm: str, label: str, **kw: Any) -> Line2D:
    """One line in the algorithm's colour and marker."""
    colour, marker = algorithm_style(algorithm)
    style: dict[str, Any] = {"color": colour, "marker": marker, "markersize": 5, "lw": 1.4} | kw
    (line,) = ax.plot(x, y, label=label, **style)
    return line


def published_rows(comparison: pd.DataFrame, column: str) -> pd.DataFrame:
    """Published results that state ``column`` and an accelerator count."""
    if not len(comparison) or column not in comparison.columns:
        return pd.DataFrame(columns=["work", "accelerators", column, "paper"])
    pub = comparison[comparison["source"] == "published"]
    return pub[pub[column].notna() & pub["accelerators"].notna()]


def reproduced_papers(comparison: pd.DataFrame, papers: pd.DataFrame) -> list[str]:
    """The reproduced papers, by title: those whose claims were simulated, then those with published rows."""
    titles = list(papers["paper"]) if len(papers) else []
    if len(comparison) and "paper" in comparison.columns:
        titles += list(comparison["paper"].dropna())
    return list(dict.fromkeys(titles))


HEADLINE_METRICS = ("images_per_s", "time_90_epochs_s", "efficiency")


def headline(papers: pd.DataFrame, title: str) -> tuple[str, str] | None:
    """(platform, algorithm) of a paper's first claim about its whole run (throughput, time or efficiency)."""
    if not len(papers):
        return None
    own = papers[(papers["paper"] == title) & papers["metric"].isin(HEADLINE_METRICS)]
    own = own[~own["algorithm"].astype(str).str.contains(" vs ")]
    return (str(own["platform"].iloc[0]), str(own["algorithm"].iloc[0])) if len(own) else None


def _paper_panel(
    ax: Axes, title: str, comparison: pd.DataFrame, sim: pd.DataFrame, papers: pd.DataFrame, column: str
) -> list[tuple[str, float, float]]:
    """A reproduced paper: its platform's simulated curve for its algorithm with the band of the platform's
    assumptions, the ideal line from the curve's smallest count, and its published points; returns their labels
    (text, x, y) for :func:`_label_points`."""
    head = headline(papers, title)
    curve = pd.DataFrame()
    labels: list[tuple[str, float, float]] = []
    if head is not None and len(sim):
        platform, algorithm = head
        curve = sim[(sim["platform"] == platform) & (sim["algorithm"] == algorithm)].sort_values("ranks")
        for dtype, g in curve.groupby("dtype", sort=False):
            line = _algorithm_line(ax, g["ranks"], g[column], algorithm, f"simulated, {dtype}")
            if f"{column}_low" in g.columns:
                ax.fill_between(
                    g["ranks"],
                    g[f"{column}_low"],
                    g[f"{column}_high"],
                    color=line.get_color(),
                    alpha=0.18,
                    lw=0,
                    label=f"{dtype}: assumptions' range",
                )
        _title(ax, f"{title}: {algorithm} on {platform}, simulated")
    else:
        _title(ax, f"{title}: not simulated in this run")
    pub = published_rows(comparison, column)
    pub = pub[pub["paper"] == title] if "paper" in pub.columns else pub.iloc[:0]
    if len(curve):
        first = curve[curve["dtype"] == curve["dtype"].iloc[0]].iloc[0]
        top = max([float(curve["ranks"].max()), *pub["accelerators"].astype(float)])
        xs = [float(first["ranks"]), top]
        ideal = [1.0, 1.0] if column == "efficiency" else [first[column] * x / xs[0] for x in xs]
        ax.plot(xs, ideal, "k--", lw=0.9, label="ideal (linear)")
    if len(pub):
        ax.scatter(pub["accelerators"], pub[column], label="published", **PUBLISHED)
        for row in pub.itertuples(index=False):
            value = getattr(row, column)
            text = f"{value:.0%}" if column == "efficiency" else f"{value:,.0f}"
            labels.append((f"published: {text}", float(row.accelerators), float(value)))  # type: ignore[arg-type]
    if not len(curve) and not len(pub):
        _empty(ax, "simulated or published figure")
    return labels


# Where a point's label may go, nearest first: (offset right, offset up) in points, horizontal and vertical
# alignment. One further than its first ring is joined to its point by a thin line.
BESIDE = tuple(
    (dx * far, dy * far, ha, va)
    for far in (1, 3, 5)
    for dx, dy, ha, va in (
        (-8, 6, "right", "bottom"),
        (-8, -6, "right", "top"),
        (8, -6, "left", "top"),
        (8, 6, "left", "bottom"),
        (0, 10, "center", "bottom"),
        (0, -10, "center", "top"),
    )
)


def _finite(xy: np.ndarray) -> np.ndarray:
    """The rows of an (n, 2) array of points with both coordinates finite."""
    return xy[np.isfinite(xy).all(axis=1)] if len(xy) else xy.reshape(0, 2)


def plotted(ax: Axes, step: float = 3.0) -> np.ndarray:
    """Display positions of what ``ax`` plots, (n, 2): scatter markers, and every visible line's vertices with
    points every ``step`` pixels between them (a label or legend on a curve hides it as much as one on a marker).
    Labels are placed by it here; tests/analysis/figure_checks.py checks with it."""
    found = [np.empty((0, 2))]
    for ln in (ln for ln in ax.get_lines() if ln.get_visible()):
        xy = _finite(ln.get_transform().transform(np.asarray(ln.get_xydata(), dtype=float)))
        found.append(xy)
        for a, b in itertools.pairwise(xy):
            n = max(1, int(np.hypot(*(b - a)) // step))
            found.append(a + np.outer(np.arange(1, n) / n, b - a))
    found += [
        _finite(c.get_offset_transform().transform(np.asarray(c.get_offsets(), dtype=float)))
        for c in ax.collections
        if isinstance(c, PathCollection)
    ]
    return np.concatenate(found)


def _box(at: np.ndarray, place: tuple[int, int, str, str], size: tuple[float, float], px: float) -> tuple[float, ...]:
    """(x0, y0, x1, y1) in pixels of a label of ``size`` pixels put at ``place`` (:data:`BESIDE`) from ``at``."""
    dx, dy, ha, va = place
    x0 = at[0] + dx * px - {"right": size[0], "center": size[0] / 2, "left": 0.0}[ha]
    y0 = at[1] + dy * px - {"top": size[1], "bottom": 0.0}[va]
    return x0, y0, x0 + size[0], y0 + size[1]


def _cost(box: tuple[float, ...], axes: Any, plotted: np.ndarray, taken: list[tuple[float, ...]]) -> float:
    """How badly a label at ``box`` sits: the plotted points it covers, and far worse, leaving the axes or
    covering a label already placed."""
    x0, y0, x1, y1 = box
    outside = not (axes.x0 <= x0 and x1 <= axes.x1 and axes.y0 <= y0 and y1 <= axes.y1)
    inside = (plotted[:, 0] >= x0) & (plotted[:, 0] <= x1) & (plotted[:, 1] >= y0) & (plotted[:, 1] <= y1)
    clash = sum(x0 < b[2] and b[0] < x1 and y0 < b[3] and b[1] < y1 for b in taken)
    return float(inside.sum()) + 1000.0 * (outside + clash)


def _label_points(ax: Axes, labels: list[tuple[str, float, float]]) -> None:
    """Write each label beside its point (data coordinates) where it covers the least of what is plotted, inside
    the axes; call it once the figure's keys are placed, so that the layout is settled."""
    if not labels:
        return
    fig = ax.get_figure()
    assert isinstance(fig, Figure)
    fig.draw_without_rendering()
    axes, px = ax.get_window_extent(), fig.dpi / 72
    points, taken = plotted(ax), list[tuple[float, ...]]()
    for text, x, y in labels:
        at = ax.transData.transform((x, y))
        size = (len(text) * 0.6 * FONT * px, 1.3 * FONT * px)  # a character is about 0.6 of the font size wide
        place = min(BESIDE, key=lambda p: _cost(_box(at, p, size, px), axes, points, taken))
        taken.append(_box(at, place, size, px))
        dx, dy, ha, va = place
        leader = {"arrowstyle": "-", "color": "grey", "lw": 0.6} if abs(dx) > 8 or abs(dy) > 10 else None
        ax.annotate(
            text, (x, y), xytext=(dx, dy), textcoords="offset points", ha=ha, va=va, fontsize=FONT, arrowprops=leader
        )


def _setting_lines(ax: Axes, scale: pd.DataFrame, column: str) -> None:
    """Settings measured at two or more rank counts: a line each, with its own ideal line (dashed)."""
    seen: dict[str, int] = {}
    for setting, g in scale.groupby("setting", sort=False):
        g = g.sort_values("world_size")
        algorithm = str(g["algorithm"].iloc[0])
        k = seen[algorithm] = seen.get(algorithm, -1) + 1
        line = _algorithm_line(ax, g["world_size"], g[column], algorithm, str(setting), ls=("-", "-.", ":")[k % 3])
        if column != "efficiency":
            ax.plot(
                g["world_size"],
                g["ideal_images_per_s"],
                ls="--",
                lw=0.9,
                color=line.get_color(),
                label=f"ideal for {setting}",
            )
    if column == "efficiency":
        ax.axhline(1.0, color="k", ls="--", lw=0.9)


def _setting_bars(ax: Axes, single: pd.DataFrame, column: str) -> None:
    """Settings measured at one rank count: a bar each, in its algorithm's colour."""
    single = single.sort_values(["world_size", column])
    names = [f"{s} ({n} ranks)" for s, n in zip(single["setting"], single["world_size"], strict=True)]
    colours = [algorithm_style(str(a))[0] for a in single["algorithm"]]
    ax.barh(names, single[column], color=colours)
    ax.tick_params(axis="y", labelsize=FONT)
    ax.set_xlabel("throughput (images/s)")
    _title(ax, "Measured here, settings at one rank count")


def _measured(scale: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The scaling table split: settings at two or more rank counts, and settings at one."""
    if not len(scale):
        return scale, scale
    counts = scale.groupby("setting")["world_size"].transform("nunique")
    return scale[counts > 1], scale[counts == 1]


def scaling_figure(
    scale: pd.DataFrame, comparison: pd.DataFrame, sim: pd.DataFrame, papers: pd.DataFrame, column: str = "images_per_s"
) -> Figure:
    """One panel per reproduced paper (simulated curve, band, ideal, published point), then what this run
    measured: settings at several rank counts as lines with their ideal lines, and, for throughput, settings at one
    rank count as bars."""
    efficiency = column == "efficiency"
    published = "scaling_efficiency" if efficiency else column
    titles = reproduced_papers(comparison, papers)
    lines, single = _measured(scale)
    bars = not efficiency and len(single) > 0
    fig, axes = _figure(len(titles) + 1 + bars, 2, width=5.2, height=3.4)
    source = comparison.rename(columns={published: column}) if efficiency else comparison
    labels = {ax: _paper_panel(ax, title, source, sim, papers, column) for ax, title in zip(axes, titles, strict=False)}
    measured = axes[len(titles)]
    if len(lines):
        _setting_lines(measured, lines, column)
        _title(measured, "Measured here, settings at several rank counts")
    else:
        _empty(measured, "setting at two or more rank counts")
    if bars:
        _setting_bars(axes[-1], single, column)
    for ax in axes[: len(titles) + 1]:
        if ax.has_data():
            _log2(ax)
            if not efficiency:
                _log10(ax)
        ax.set_xlabel("ranks (accelerators)")
        ax.set_ylabel("scaling efficiency (fraction of linear)" if efficiency else "throughput (images/s)")
        _key(ax)
    fig.suptitle(
        ("Scaling efficiency" if efficiency else "Training throughput")
        + " against accelerators: each paper's platform simulated, and this run measured",
        fontsize=10,
    )
    for ax, written in labels.items():
        _label_points(ax, written)
    return fig


def _varying(members: pd.DataFrame) -> tuple[list[str], list[str]]:
    """Of a study's runs: the columns that tell them apart, and the ones they share."""
    columns = ["variant", "algorithm", "world_size", "bn_group", "seed", "repetition"]
    present = [c for c in columns if c in members.columns]
    vary = [c for c in present if members[c].astype(str).nunique() > 1]
    return vary, [c for c in present if c not in vary]


def _describe(row: pd.Series, columns: list[str]) -> str:
    """A run's values of ``columns``, as a reader says them: 'multicolor, 4 ranks, BN over 4'."""
    say: dict[str, Callable[[Any], str]] = {
        "variant": lambda v: f"{v} recipe",
        "algorithm": str,
        "world_size": lambda v: f"{v} rank{'s' if int(v) != 1 else ''}",
        "bn_group": lambda v: f"BN over {v}",
        "seed": lambda v: f"seed {v}",
        "repetition": lambda v: f"repetition {v}",
    }
    return ", ".join(say[c](row[c]) for c in columns) or str(row["run"])


def _study_panel(ax: Axes, study: str, members: pd.DataFrame, tta: pd.DataFrame) -> None:
    """A study's runs: top-1 against time, the target line, and a star where each run first reached it."""
    vary, same = _varying(members)
    by_algorithm = "algorithm" in vary
    shades = sns.color_palette(SEQUENCE, max(2, len(members)))
    for k, (_, run) in enumerate(members.iterrows()):
        curve = tta[tta["run"] == run["run"]].sort_values("elapsed_s")
        reached = run.get("tta_s")
        label = _describe(run, vary) + (f": {reached:.1f} s" if pd.notna(reached) else ": target not reached")
        style = {} if by_algorithm else {"color": shades[k], "marker": "o"}
        line = _algorithm_line(ax, curve["elapsed_s"], curve["top1"], str(run["algorithm"]), label, **style)
        first = curve[curve["top1"] >= run["target_top1"]].head(1)  # the evaluation that reached it
        if pd.notna(reached) and len(first):
            ax.plot(
                first["elapsed_s"],
                first["top1"],
                marker="*",
                markersize=11,
                color=line.get_color(),
                markeredgecolor="black",
                markeredgewidth=0.6,
                ls="none",
                zorder=5,
            )
    for target in sorted(set(members["target_top1"].dropna())):
        ax.axhline(target, color="grey", ls=":", lw=1, label=f"target top-1 {target:.0%}")
    fixed = _describe(members.iloc[0], [c for c in same if c != "repetition"])
    _title(ax, f"{study}: {fixed}" if fixed else study)
    ax.set(xlabel="time since run_start (s)", ylabel="validation top-1")
    ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    _key(ax)


def tta_figure(tta: pd.DataFrame, runs: pd.DataFrame, studies: pd.DataFrame) -> Figure:
    """One panel per study (results/analysis/studies.csv; all runs in one panel without it): each run's top-1
    against wall time, the target and where each run first reached it."""
    if len(studies) and len(runs):
        groups = [(name, g["run"]) for name, g in studies.groupby("study", sort=False)]
    else:
        groups = [("all runs", runs["run"])] if len(runs) else []
    fig, axes = _figure(len(groups), 2, width=4.4, height=3.2)
    if not groups or not len(tta):
        _empty(axes[0], "evaluations")
        return fig
    for ax, (name, members) in zip(axes, groups, strict=True):
        rows = runs.set_index("run").reindex(list(members)).dropna(how="all").reset_index()
        rows = rows[rows["run"].isin(tta["run"])]
        if len(rows):
            _study_panel(ax, str(name), rows, tta)
        else:
            _empty(ax, f"evaluations of study {name}")
    fig.suptitle(
        "Validation top-1 against wall time, one panel per study (a star: the target first reached)", fontsize=10
    )
    return fig


def _by_size(data: pd.DataFrame, y: str, ylabel: str, missing: str) -> tuple[Figure, list[Axes]]:
    """``y`` against message size (log 2): one panel per rank count (``ranks``), a line per algorithm; one panel
    saying that there are no ``missing`` where ``data`` is empty. A key is left to the caller."""
    counts = sorted(data["ranks"].unique()) if len(data) else []
    fig, axes = _figure(len(counts), len(counts), width=4.2, height=3.1, sharey=True)
    if not counts:
        _empty(axes[0], missing)
    for ax, ranks in zip(axes, counts, strict=False):
        for algorithm, g in data[data["ranks"] == ranks].groupby("algorithm", sort=False):
            g = g.sort_values("bytes")
            _algorithm_line(ax, g["bytes"], g[y], str(algorithm), str(algorithm), markersize=4, lw=1.1)
        _log2(ax, _bytes)
        ax.set_title(f"{ranks} ranks", fontsize=9)
        ax.set_xlabel("message size per rank")
    axes[0].set_ylabel(ylabel)
    return fig, axes


def busbw_figure(bench: pd.DataFrame) -> Figure:
    """Bus bandwidth against message size, one panel per rank count, a line per algorithm."""
    fig, axes = _by_size(bench.assign(ranks=bench["world_size"]), "busbw_GBps", "busbw (GB/s)", "benchmark points")
    _shared_key(fig, axes, "algorithm")
    fig.suptitle("All-reduce bus bandwidth measured here (busbw = algbw x 2(p-1)/p)", fontsize=10)
    return fig


PHASES = {
    "data_share": ("data wait", "#BBBBBB"),
    "fwd_bwd_share": ("forward+backward", "#77AADD"),
    "allreduce_share": ("all-reduce", "#EE8866"),
    "optimizer_share": ("optimizer", "#44BB99"),
}


def breakdown_figure(runs: pd.DataFrame) -> Figure:
    """Share of step time in data wait, forward+backward, all-reduce and optimizer, per run."""
    fig, (ax,) = _figure(1, 1, width=7.0, height=3.8)
    if len(runs) and set(PHASES) <= set(runs.columns):
        shares = runs.set_index("run")[list(PHASES)].rename(columns={k: v[0] for k, v in PHASES.items()})
        shares.plot.barh(stacked=True, ax=ax, color=[c for _, c in PHASES.values()], width=0.75)
        ax.tick_params(axis="y", labelsize=FONT)
        ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.invert_yaxis()
        _key(ax, "phase")
    else:
        _empty(ax, "training steps")
    ax.set(title="Where a training step's time goes", xlabel="share of step time", ylabel="run")
    return fig


def validation_figure(validation: pd.DataFrame) -> Figure:
    """Simulated / measured all-reduce time against message size, one panel per rank count (1 = exact)."""
    fig, axes = _by_size(validation, "ratio", "simulated / measured time", "simulation of this machine")
    for ax in axes if len(validation) else []:
        ax.axhline(1.0, color="k", lw=1)
        for bound in (0.75, 1.25):
            ax.axhline(bound, color="grey", ls=":", lw=1)
        ax.axvline(64 << 10, color="grey", ls="--", lw=1)
        _log10(ax)
    _shared_key(fig, axes, "algorithm")
    fig.suptitle("SimGrid against this machine (dotted: +-25%, dashed: 64 KiB)", fontsize=10)
    return fig


def simulation_scale_figure(sim: pd.DataFrame) -> Figure:
    """ResNet-50's gradient all-reduce per step (float32) against ranks: a panel per platform, a line per
    algorithm."""
    data = sim[sim["dtype"] == "float32"] if len(sim) else sim
    platforms = list(dict.fromkeys(data["platform"])) if len(data) else []
    fig, axes = _figure(len(platforms), 3, width=3.8, height=3.0)
    if not platforms:
        _empty(axes[0], "simulation at scale")
        return fig
    for ax, platform in zip(axes, platforms, strict=True):
        for algorithm, g in data[data["platform"] == platform].groupby("algorithm", sort=False):
            g = g.sort_values("ranks")
            _algorithm_line(ax, g["ranks"], g["allreduce_s"] * 1e3, str(algorithm), str(algorithm))
        _log2(ax)
        _log10(ax)
        ax.set_title(platform, fontsize=9)
        ax.set(xlabel="ranks (accelerators)", ylabel="all-reduce per step (ms)")
    _shared_key(fig, axes, "algorithm")
    fig.suptitle("ResNet-50 gradients (float32, as training buckets them), simulated", fontsize=10)
    return fig


UNITS = {
    "images_per_s": "images/s",
    "time_90_epochs_s": "s",
    "efficiency": "fraction of linear",
    "speedup_over": "times",
    "step_speedup_over": "times",
}


def sensitivity_figure(table: pd.DataFrame) -> Figure:
    """Per simulated claim, a pair of bars per ranged assumption: the claim's figure with that assumption alone
    at the slow end and at the fast end of its range, as a change from the platform as described."""
    claims = list(dict.fromkeys(table["id"])) if len(table) else []
    most = int(table["id"].value_counts().max()) if claims else 1  # bars of the claim with the most assumptions
    fig, axes = _figure(len(claims), 2, width=5.0, height=0.9 + 0.42 * most)
    if not claims:
        _empty(axes[0], "sensitivity (simulate-scale)")
        return fig
    for ax, claim in zip(axes, claims, strict=True):
        rows = table[table["id"] == claim].sort_values("swing")
        names = [
            f"{a} ({s} to {f})" for a, s, f in zip(rows["assumption"], rows["slow_end"], rows["fast_end"], strict=True)
        ]
        at = range(len(rows))
        ax.barh(
            [i - 0.19 for i in at],
            rows["at_slow_end"] / rows["as_described"] - 1,
            height=0.36,
            color="#EE8866",
            label="at the range's slow end",
        )
        ax.barh(
            [i + 0.19 for i in at],
            rows["at_fast_end"] / rows["as_described"] - 1,
            height=0.36,
            color="#77AADD",
            label="at the range's fast end",
        )
        ax.set_yticks(list(at), names, fontsize=FONT)
        ax.axvline(0, color="black", linewidth=0.8)
        metric = str(rows["metric"].iloc[0])
        described = float(rows["as_described"].iloc[0])
        said = f"{described:,.0f}" if described >= 1000 else f"{described:.3g}"
        _title(ax, f"{claim}: {metric} ({UNITS.get(metric, metric)}), {said} as described", 56)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=4))
        ax.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        ax.set_xlabel("change from the platform as described")
    _shared_key(fig, axes)
    fig.suptitle(
        "What each claim's simulated figure rests on: one assumption at a time at each end of its range", fontsize=10
    )
    return fig


def _curves(tta: pd.DataFrame, labels: pd.Series) -> pd.DataFrame:
    """Top-1 per epoch of the runs named in ``labels`` (index: run), each labelled."""
    curves = tta[tta["run"].isin(labels.index)].copy()
    curves["label"] = curves["run"].map(labels)
    return curves


def accuracy_figure(tta: pd.DataFrame, agreement: pd.DataFrame, runs: pd.DataFrame) -> Figure:
    """Top-1 per epoch of every algorithm at one seed (the largest comparison), the ring's other seeds dashed."""
    fig, (ax,) = _figure(1, 1, width=6.0, height=3.8)
    if len(agreement):
        key = agreement.groupby(["variant", "world_size", "bn_group", "seed"]).size().idxmax()
        variant, world, bn, seed = cast("tuple[str, int, str | int, int]", key)  # the grouped columns' values
        same = runs[
            (runs["variant"] == variant) & (runs["world_size"] == world) & (runs["bn_group"].astype(str) == str(bn))
        ]
        for run_name, algorithm in same[same["seed"] == seed].set_index("run")["algorithm"].items():
            g = tta[tta["run"] == run_name].sort_values("epoch")
            _algorithm_line(ax, g["epoch"], g["top1"], str(algorithm), str(algorithm), lw=1)
        others = same[(same["algorithm"] == REFERENCE) & (same["seed"] != seed)].set_index("run")["seed"]
        for run_name, g in _curves(tta, others).groupby("run"):
            ax.plot(g["epoch"], g["top1"], ls="--", color="grey", label=f"{REFERENCE}, seed {others[run_name]}")
        _title(
            ax,
            f"Same seed, every all-reduce ({world} ranks, {variant} recipe, seed {seed}): accuracy agrees "
            "up to summation order",
            70,
        )
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        _key(ax)
    else:
        _empty(ax, "algorithm comparison")
        ax.set_title("Same seed, every all-reduce")
    ax.set(xlabel="epoch", ylabel="validation top-1")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    return fig


def _prefer_base(runs: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """One run per value of ``keys``, the base recipe's where there is one (e.g. not its two-nodes twin)."""
    return runs.sort_values("variant", key=lambda v: v != "base").drop_duplicates(keys)


def _labelled_lines(ax: Axes, tta: pd.DataFrame, labels: pd.Series) -> None:
    """Top-1 per epoch of each run in ``labels`` (index: run), in sequence colours."""
    shades = sns.color_palette(SEQUENCE, max(2, len(labels)))
    for k, (run_name, label) in enumerate(labels.items()):
        g = tta[tta["run"] == run_name].sort_values("epoch")
        ax.plot(g["epoch"], g["top1"], marker="o", markersize=4, color=shades[k], label=str(label))


def recipe_figure(tta: pd.DataFrame, recipes: pd.DataFrame) -> Figure:
    """Two panels: top-1 per epoch by BN group (same global batch), and by optimizer and global batch."""
    fig, axes = _figure(2, 2, width=4.6, height=3.4)
    if len(recipes):
        small = recipes["global_batch"].min()
        bn = recipes[
            (recipes["optimizer"] == "sgd")
            & (recipes["global_batch"] == small)
            & (recipes["seed"] == recipes["seed"].min())
        ]
        labels = _prefer_base(bn, ["bn_group"]).set_index("run")["bn_group"].map(lambda g: f"BN over {g} rank(s)")
        _labelled_lines(axes[0], tta, labels)
        opt = recipes[(recipes["bn_group"].astype(str) == "1") & (recipes["seed"] == recipes["seed"].min())]
        opt = _prefer_base(opt, ["optimizer", "global_batch"])
        labels = opt.set_index("run").apply(lambda r: f"{r['optimizer']}, global batch {r['global_batch']}", axis=1)
        _labelled_lines(axes[1], tta, labels)
        world = int(recipes["world_size"].iloc[0])
        _title(axes[0], f"Distributed batch norm ({world} ranks, global batch {small})")
        _title(axes[1], f"Momentum SGD against LARS as the batch grows ({world} ranks)")
    else:
        for ax in axes:
            _empty(ax, "recipe runs")
    for ax in axes:
        ax.set(xlabel="epoch", ylabel="validation top-1")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.yaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
        _key(ax)
    return fig


def figures(analysis_dir: Path) -> dict[str, Callable[[], Figure]]:
    """Each figure's file name and how to build it from the analysis CSVs in ``analysis_dir``."""

    def read(name: str) -> pd.DataFrame:
        return read_csv(analysis_dir / name, "analyze")

    def studies() -> pd.DataFrame:
        path = analysis_dir / "studies.csv"
        return read("studies.csv") if path.exists() else pd.DataFrame(columns=["study", "description", "run"])

    builders: list[Callable[[], Figure]] = [
        lambda: scaling_figure(read("scaling.csv"), read("comparison.csv"), read("simulated.csv"), read("papers.csv")),
        lambda: scaling_figure(
            read("scaling.csv"), read("comparison.csv"), read("simulated.csv"), read("papers.csv"), "efficiency"
        ),
        lambda: tta_figure(read("tta.csv"), read("runs.csv"), studies()),
        lambda: busbw_figure(read("busbw.csv")),
        lambda: breakdown_figure(read("runs.csv")),
        lambda: validation_figure(read("validation.csv")),
        lambda: simulation_scale_figure(read("simulated.csv")),
        lambda: sensitivity_figure(read("sensitivity.csv")),
        lambda: accuracy_figure(read("tta.csv"), read("accuracy.csv"), read("runs.csv")),
        lambda: recipe_figure(read("tta.csv"), read("recipes.csv")),
    ]
    return dict(zip(FIGURES, builders, strict=True))


def plot_all(analysis_dir: Path, out: Path) -> list[Path]:
    """Every figure, from the analysis CSVs."""
    sns.set_theme(style="whitegrid", context="notebook")
    out.mkdir(parents=True, exist_ok=True)
    return [_save(build(), out / name) for name, build in figures(analysis_dir).items()]
