"""What a reader would notice on a figure, checked on its drawn layout: text cut at the figure's edge, a label
on another label or on the plotted data, a legend on the data, a legend too long to read."""

from __future__ import annotations

from itertools import combinations

from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.legend import Legend
from matplotlib.text import Text
from matplotlib.transforms import Bbox

from scalerepro.analysis.plots import MAX_KEY, plotted

SLACK = 1.0  # pixels: rounding of a drawn extent


def _drawn_ticks(fig: Figure) -> tuple[set[int], set[int]]:
    """Ids of the tick labels matplotlib draws (those inside the view) and of all the others it holds."""
    drawn: set[int] = set()
    every: set[int] = set()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            for tick in axis.get_major_ticks() + axis.get_minor_ticks():
                every.update({id(tick.label1), id(tick.label2)})
            for tick in axis._update_ticks():  # type: ignore[union-attr]  # the ticks a draw shows: no public call
                drawn.update({id(tick.label1), id(tick.label2)} if tick.get_visible() else set())
    return drawn, every


def _texts(fig: Figure) -> list[Text]:
    """Every text the figure draws (titles, labels, tick labels in view, legends, annotations)."""
    drawn, ticks = _drawn_ticks(fig)
    return [
        t
        for t in fig.findobj(Text)
        if t.get_visible()
        and t.get_text().strip()
        and (t.axes is None or t.axes.get_visible())
        and (id(t) not in ticks or id(t) in drawn)
    ]


def _legends(fig: Figure) -> list[Legend]:
    return [legend for ax in fig.axes if (legend := ax.get_legend()) is not None] + list(fig.legends)


def _points(fig: Figure) -> list[tuple[float, float]]:
    """Display positions of what is plotted in every axes (:func:`_points_of`)."""
    return [p for ax in fig.axes if ax.get_visible() for p in _points_of(ax)]


def _points_of(ax: Axes) -> list[tuple[float, float]]:
    """What ``ax`` plots (markers, and points along its lines: :func:`scalerepro.analysis.plots.plotted`), inside
    the axes: a point clipped away hides behind nothing."""
    box = ax.get_window_extent()
    return [(float(x), float(y)) for x, y in plotted(ax) if box.x0 <= x <= box.x1 and box.y0 <= y <= box.y1]


def _overlap(a: Bbox, b: Bbox) -> bool:
    return bool(a.x0 < b.x1 - SLACK and b.x0 < a.x1 - SLACK and a.y0 < b.y1 - SLACK and b.y0 < a.y1 - SLACK)


def problems(fig: Figure) -> list[str]:
    """Every layout problem of ``fig`` as drawn, each naming the text or legend at fault; empty when none."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]  # Agg's canvas has one
    edge = fig.bbox
    found = []
    texts = _texts(fig)
    boxes = [Text.get_window_extent(t, renderer) for t in texts]  # an annotation's text, not its leader line
    for t, b in zip(texts, boxes, strict=True):
        if b.x0 < edge.x0 - SLACK or b.y0 < edge.y0 - SLACK or b.x1 > edge.x1 + SLACK or b.y1 > edge.y1 + SLACK:
            found.append(f"text past the figure's edge: {t.get_text()!r}")
    for (t, a), (u, b) in combinations(zip(texts, boxes, strict=True), 2):
        if _overlap(a, b):
            found.append(f"text over text: {t.get_text()!r} and {u.get_text()!r}")
    for ax in fig.axes:
        for label in (t for t in ax.texts if t.get_visible() and t.get_text().strip()):
            box = Text.get_window_extent(label, renderer)
            if any(box.contains(x, y) for x, y in _points_of(ax)):
                found.append(f"label over plotted data: {label.get_text()!r}")
    points = _points(fig)
    for legend in _legends(fig):
        entries = [t.get_text() for t in legend.get_texts() if t.get_text()]
        if len(entries) > MAX_KEY:
            found.append(f"legend of {len(entries)} entries (more than {MAX_KEY}): {entries}")
        box = legend.get_window_extent(renderer)
        covered = [p for p in points if box.x0 <= p[0] <= box.x1 and box.y0 <= p[1] <= box.y1]
        if covered:
            found.append(f"legend {entries[:3]}... over {len(covered)} plotted point(s)")
    return found
