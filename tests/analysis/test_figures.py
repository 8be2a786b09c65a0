"""Every figure, rendered from small fixed tables, read as a reader would: nothing cut at the edge, no label on
another, no legend on the data, no legend past eight entries; a panel per paper and per study.

tests/analysis/tables holds the analysis tables of a laptop `make run` (results/analysis), trimmed: the
comparison table without its cost-model rows, the benchmark and validation tables at every third size.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd
import pytest
from matplotlib.figure import Figure

from scalerepro.analysis import plots
from scalerepro.analysis.plots import FIGURES, algorithm_style, figures
from scalerepro.comm.algorithms import ALGORITHMS
from tests.analysis.figure_checks import problems

TABLES = Path(__file__).parent / "tables"


def _table(name: str) -> pd.DataFrame:
    return pd.read_csv(TABLES / f"{name}.csv")


@pytest.fixture(autouse=True)
def close_all() -> Iterator[None]:
    yield
    plt.close("all")


def _titles(fig: Figure) -> list[str]:
    return [ax.get_title() for ax in fig.axes if ax.get_visible() and ax.get_title()]


def _texts(fig: Figure) -> str:
    fig.canvas.draw()
    return "\n".join(t.get_text() for t in fig.findobj(plt.Text) if t.get_visible())


@pytest.mark.parametrize("name", FIGURES)
def test_each_figure_of_a_laptop_run_reads_cleanly(name):
    """No text past the edge, none over another, no legend over a point, no legend over eight entries."""
    fig = figures(TABLES)[name]()
    assert problems(fig) == []


@pytest.mark.parametrize("name", FIGURES)
def test_each_figure_of_an_empty_run_says_what_is_missing(tmp_path, name):
    """Tables with their columns but no rows: every figure still builds, says 'no ... in this run', reads
    cleanly."""
    for table in TABLES.glob("*.csv"):
        (tmp_path / table.name).write_text(table.read_text().splitlines()[0] + "\n")
    fig = figures(tmp_path)[name]()
    assert "in this run" in _texts(fig)
    assert problems(fig) == []


def test_scaling_has_a_panel_per_paper_and_the_measured_ones_with_every_published_label():
    fig = plots.scaling_figure(_table("scaling"), _table("comparison"), _table("simulated"), _table("papers"))
    titles = _titles(fig)
    assert [t.split(":")[0] for t in titles[:3]] == ["Cho et al. 2017", "Kumar et al. 2017", "Ying et al. 2018"]
    assert "Measured here, settings at several rank counts" in titles
    assert "Measured here, settings at one rank count" in titles
    text = _texts(fig)
    for value in ("38,435", "40,037", "1,050,000"):
        assert f"published: {value}" in text
    assert problems(fig) == []


def test_time_to_accuracy_has_a_panel_per_study_and_marks_who_reached_the_target():
    runs = _table("runs")
    fig = plots.tta_figure(_table("tta"), runs, _table("studies"))
    assert [t.split(":")[0] for t in _titles(fig)] == ["main", "algorithms", "noise", "batchnorm", "large-batch"]
    text = _texts(fig)
    reached = runs.dropna(subset=["tta_s"])
    assert len(reached)
    assert len(reached) < len(runs)
    assert "target not reached" in text
    assert f"1 rank: {runs.set_index('run').loc['ring-n1-g1-s0-r0', 'tta_s']:.1f} s" in text
    stars = [ln for ax in fig.axes for ln in ax.get_lines() if ln.get_marker() == "*" and ln.get_linestyle() == "None"]
    assert len(stars) == _table("studies")["run"].map(runs.set_index("run")["tta_s"]).notna().sum()  # per panel


def test_many_algorithms_are_labelled_at_their_lines_ends_not_in_a_long_legend():
    """Every algorithm of the table on one platform: past eight names the lines are labelled at their ends."""
    one = _table("simulated").query("platform == 'h100-cluster' and algorithm == 'ring'")
    sim = pd.concat(
        [one.assign(algorithm=a, allreduce_s=one["allreduce_s"] * (1 + i / 10)) for i, a in enumerate(ALGORITHMS)]
    )
    fig = plots.simulation_scale_figure(sim)
    assert not fig.legends
    assert all(ax.get_legend() is None for ax in fig.axes)
    assert set(ALGORITHMS) <= set(_texts(fig).splitlines())
    assert problems(fig) == []


def test_an_algorithm_has_one_colour_and_marker_in_every_figure():
    styles = [algorithm_style(a) for a in ALGORITHMS]
    assert len(set(styles)) == len(styles)
    assert len({colour for colour, _ in styles}) == len(styles)  # no colour repeats within the table
    colour = algorithm_style("multicolor")[0]
    scale = plots.simulation_scale_figure(_table("simulated"))
    assert {ln.get_color() for ax in scale.axes for ln in ax.get_lines() if ln.get_label() == "multicolor"} == {colour}
    scaling = plots.scaling_figure(_table("scaling"), _table("comparison"), _table("simulated"), _table("papers"))
    kumar = next(ax for ax in scaling.axes if ax.get_title().startswith("Kumar"))  # the paper's algorithm
    assert {ln.get_color() for ln in kumar.get_lines() if str(ln.get_label()).startswith("simulated")} == {colour}


def test_log_ticks_are_plain_numbers():
    assert [plots._plain(v) for v in (1, 20, 500, 1000, 2500, 1.05e6)] == ["1", "20", "500", "1k", "2.5k", "1.05M"]
    assert [plots._count(v) for v in (1, 64, 1024, 4096)] == ["1", "64", "1,024", "4,096"]
    assert [plots._bytes(v) for v in (8, 65536, 4 << 20)] == ["8 B", "64 KiB", "4 MiB"]


def test_the_checks_catch_what_a_reader_would():
    """A legend of nine entries over the data, a label past the edge, on another label or on a line: each is
    reported."""
    fig, ax = plt.subplots(figsize=(4, 3))
    for k in range(9):
        ax.plot([0, 1], [k, k + 1], marker="o", label=f"line {k}")
    ax.legend(loc="center")
    ax.text(0.9, 0.5, "a label that runs far past the right edge of the figure", transform=ax.transAxes)
    ax.text(0.1, 0.1, "one label", transform=ax.transAxes)
    ax.text(0.1, 0.1, "another label", transform=ax.transAxes)
    ax.annotate("on a line", (0.5, 4.5), ha="center", va="center")
    found = problems(fig)
    assert "label over plotted data: 'on a line'" in found
    assert any(p.startswith("legend of 9 entries") for p in found)
    assert any(p.startswith("legend ['line 0'") and "plotted point" in p for p in found)
    assert any("past the figure's edge" in p and "far past" in p for p in found)
    assert any(p.startswith("text over text: 'one label' and 'another label'") for p in found)


def test_spread_keeps_labels_apart_and_inside():
    placed = plots._spread([0.5, 0.5, 0.51, 0.99, 0.99], 0.1)
    ordered = sorted(placed)
    assert all(b - a >= 0.1 - 1e-9 for a, b in itertools.pairwise(ordered))
    assert ordered[-1] <= 0.95 + 1e-9
    assert ordered[0] >= 0.05 - 1e-9
