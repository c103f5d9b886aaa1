"""The report's PNG plots: speed-up ratios with CIs, time per phase, learning curves.

matplotlib is imported lazily and drawn through the Agg canvas (no GUI backend, no pyplot state).
"""

from __future__ import annotations

import io
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from rlsweep.records import PHASES
from rlsweep.report.model import Report
from rlsweep.report.render import cell_marks, ratio_intervals


def _new_figure(width_in: float, height_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def png_bytes(fig: Any | None) -> bytes | None:
    """A figure of :data:`PLOTS` as PNG (None: the plot had no data)."""
    if fig is None:
        return None
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return buf.getvalue()


#: the two measures of ratio.png, one colour each (the legend names them)
STEADY_COLOR = "#4c72b0"
END_TO_END_COLOR = "#dd8452"
NOT_CLEAN_COLOR = "#c0392b"
LEARNING_COLOR = "#7b2cbf"


class _Row(NamedTuple):
    """One row of ratio.png: a toggle's own effect or a cell, its two ratios and their intervals."""

    label: str
    steady: tuple[float | None, float | None, float | None]
    end_to_end: tuple[float | None, float | None, float | None]
    marks: list[str]


def _ratio_rows(report: Report) -> list[_Row]:
    """Each toggle's own effect first (what the terminal leads with), then the cells."""
    rows = [_Row(f"{e.label} (own effect)", (e.effect, e.ci_low, e.ci_high),
                 (e.end_to_end, e.end_to_end_ci_low, e.end_to_end_ci_high),
                 ["NOT CLEAN"] * (e.clean is False) + ["LEARNING"] * (e.learning or "").startswith("NUMBERS CHANGED"))
            for e in report.marginal_effects if e.effect is not None]
    return rows + [_Row(c.label + (" (baseline)" if c.is_baseline else ""), *ratio_intervals(c), cell_marks(c))
                   for c in report.cells if c.ratio is not None or c.end_to_end_ratio is not None]


def ratio_figure(report: Report) -> Any | None:
    """ratio.png's figure: each toggle's own effect, then each cell: the steady-state and end-to-end ratios
    with their 95% intervals on a log axis fitted to them, the NOT CLEAN and LEARNING marks of the tables."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch
    from matplotlib.ticker import FuncFormatter

    rows = _ratio_rows(report)
    if not rows:
        return None
    fig = _new_figure(10.0, max(4.2, 0.5 * len(rows) + 2.6))
    ax = fig.add_subplot(1, 1, 1)
    ys = np.arange(len(rows))[::-1].astype(float)
    values = [1.0]
    for offset, part, color in ((0.17, "steady", STEADY_COLOR), (-0.17, "end_to_end", END_TO_END_COLOR)):
        keep = [(y, getattr(r, part)) for y, r in zip(ys, rows) if getattr(r, part)[0] is not None]
        x = np.array([v for _, (v, _, _) in keep])
        err = np.array([[v - lo if lo is not None else 0.0, hi - v if hi is not None else 0.0]
                        for _, (v, lo, hi) in keep]).T.reshape(2, len(keep))
        ax.errorbar(x, [y + offset for y, _ in keep], xerr=err, fmt="o", color=color, capsize=3, markersize=5)
        values += [b for _, t in keep for b in t if b is not None]
    ax.axvline(1.0, color="black", linewidth=0.8)
    n_effects = sum(r.label.endswith("(own effect)") for r in rows)
    if 0 < n_effects < len(rows):
        ax.axhline(ys[n_effects - 1] - 0.5, color="grey", linewidth=0.6, linestyle=":")
    ax.set_xscale("log")
    lo, hi = min(values), max(values)  # fitted to the data, 1 always in view
    pad = (hi / lo) ** 0.08
    ax.set_xlim(lo / pad, hi * pad)
    ticks = FuncFormatter(lambda x, _: f"{x:.3g}x")
    ax.xaxis.set_major_formatter(ticks)
    ax.xaxis.set_minor_formatter(ticks)
    ax.tick_params(axis="x", which="minor", labelsize=7)
    ax.set_yticks(ys, [r.label for r in rows], fontsize=8)
    for y, r, tick in zip(ys, rows, ax.get_yticklabels()):
        colors = [LEARNING_COLOR if mark == "LEARNING" else NOT_CLEAN_COLOR for mark in r.marks]
        for k, (mark, color) in enumerate(zip(r.marks, colors)):  # right of the axes, one above the other
            ax.text(1.01, y + (0.2 - k * 0.4 if len(r.marks) > 1 else 0.0), mark, va="center", ha="left",
                    fontsize=8, fontweight="bold", color=color, transform=ax.get_yaxis_transform())
        if r.marks:  # the row's name in its first mark's colour
            tick.set_color(colors[0])
    ax.set(xlabel="ratio vs baseline (> 1: faster; log scale), 95% interval over seeds",
           title="Each toggle's own effect, then each cell: steady state and end to end")
    handles = [
        Line2D([], [], color=STEADY_COLOR, marker="o", label="steady state (env steps/s)"),
        Line2D([], [], color=END_TO_END_COLOR, marker="o", label="end to end (whole-job wall time)"),
        Line2D([], [], color="black", linewidth=0.8, label="1 = baseline"),
    ]
    if any("NOT CLEAN" in m for r in rows for m in r.marks):
        handles.append(Patch(color=NOT_CLEAN_COLOR, label="NOT CLEAN: measurement flag (summary.md)"))
    if any("LEARNING" in r.marks for r in rows):
        handles.append(Patch(color=LEARNING_COLOR, label="LEARNING: final return differs"))
    ax.legend(handles=handles, fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=3)
    return fig


def phases_figure(report: Report) -> Any | None:
    """phases.png's figure: stacked bars of each phase's steady-state total seconds for each cell (median over seeds)."""
    cells = [c for c in report.cells if any(v is not None for v in c.phase_total_s.values())]
    if not cells:
        return None
    fig = _new_figure(9.0, max(3.5, 0.45 * len(cells) + 1.5))  # one bar per cell, tall enough for the labels
    ax = fig.add_subplot(1, 1, 1)
    ys = np.arange(len(cells))[::-1]
    left = np.zeros(len(cells))
    for phase in PHASES:
        widths = np.array([c.phase_total_s.get(phase) or 0.0 for c in cells])
        if not widths.any():
            continue
        ax.barh(ys, widths, left=left, label=phase)
        left += widths
    ax.set_yticks(ys, [c.label for c in cells], fontsize=8)
    ax.set(xlabel="steady-state total seconds in each phase (median over seeds of a job's total)",
           title="Where the time goes")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(PHASES))
    return fig


def _smoothed(values: list[float]) -> np.ndarray:
    """A running mean over ~1/20 of an episode-return curve (episode returns are noisy)."""
    a = np.asarray(values, dtype=float)
    w = max(1, len(a) // 20)
    if w == 1:
        return a
    c = np.cumsum(np.insert(a, 0, 0.0))
    head = c[1:w] / np.arange(1, w)  # the first points average what exists so far
    return np.concatenate([head, (c[w:] - c[:-w]) / w])


def _median_band(curves: list[tuple[list[float], list[float]]]) -> tuple[np.ndarray, ...] | None:
    """Seeds' smoothed curves on one x grid (up to the shortest seed's end): x, median, q25, q75."""
    usable = [(np.asarray(x, dtype=float), _smoothed(y)) for x, y in curves if len(x) == len(y) >= 2]
    if len(usable) < 2:
        return None
    lo, hi = max(x[0] for x, _ in usable), min(x[-1] for x, _ in usable)
    if hi <= lo:
        return None
    grid = np.linspace(lo, hi, 100)
    ys = np.vstack([np.interp(grid, x, y) for x, y in usable])
    q25, med, q75 = np.percentile(ys, [25, 50, 75], axis=0)
    return grid, med, q25, q75


LINE_STYLES = ("-", "--", ":", "-.")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def cell_styles(n: int) -> list[dict[str, Any]]:
    """One (colour, line style, marker) per cell, no two alike, so that cells with identical
    curves stay apart: a dashed line over a solid one and their markers at different points."""
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "viridis"]
    return [
        {"color": cmap(i if n <= 10 else i / max(1, n - 1)), "linestyle": LINE_STYLES[i % len(LINE_STYLES)],
         "linewidth": 2.8 - 0.5 * (i % len(LINE_STYLES)),  # a wider line shows around a narrower one on top
         "marker": MARKERS[i % len(MARKERS)], "markevery": (0.02 * (i % 5), 0.1)}  # markers of one curve apart
        for i in range(n)
    ]


def learning_figure(report: Report) -> Any | None:
    """learning_curves.png's figure: training-episode returns against env steps and wall-clock.

    Each cell has its own colour, line style and marker. Its seeds are thin lines in its colour;
    with several seeds, the cell's median over seeds is bold with its interquartile band, on the
    span every seed covers; with one seed, that seed's line is bold. A cell's seed lines are one
    artist (a line collection): matplotlib's cost is per artist, and a sweep may have 1,000 seeds.
    """
    from matplotlib.collections import LineCollection
    from matplotlib.lines import Line2D

    cells = [c for c in report.cells if c.curves]
    if not cells:
        return None
    rows = math.ceil((len(cells) + 1) / 2)
    fig = _new_figure(12.0, 4.5 + 0.22 * rows)
    grid = fig.add_gridspec(2, 2, height_ratios=[4.5, 0.3 + 0.22 * rows])
    ax_steps, ax_wall = fig.add_subplot(grid[0, 0]), fig.add_subplot(grid[0, 1])
    ax_legend = fig.add_subplot(grid[1, :])
    ax_legend.axis("off")
    handles = []
    for cell, style in zip(cells, cell_styles(len(cells))):
        several = len(cell.curves) >= 2
        label = cell.label + (" (baseline)" if cell.is_baseline else "")
        for ax, x_key in ((ax_steps, "env_steps"), (ax_wall, "wall_s")):
            pairs = [(c[x_key], c["episode_return"]) for c in cell.curves]
            lines = [np.column_stack([np.asarray(x, dtype=float), np.asarray(y, dtype=float)])
                     for x, y in pairs if len(x) == len(y) and len(x) > 0]
            if not lines:
                continue
            if len(lines) > 1:  # each seed thin (and the median bold, if the seeds are long enough for one)
                ax.add_collection(LineCollection(lines, colors=[style["color"]], linestyles=style["linestyle"],
                                                 alpha=0.3, linewidths=0.7))
            band = _median_band(pairs) if several else None
            if band is not None:
                grid_x, med, q25, q75 = band
                ax.fill_between(grid_x, q25, q75, color=style["color"], alpha=0.15, linewidth=0)
                ax.plot(grid_x, med, markersize=5, **style)
            else:
                ax.plot(lines[0][:, 0], lines[0][:, 1], markersize=5, **style)
        what = f"median of {len(cell.curves)} seeds" if several else "1 seed"
        handles.append(Line2D([], [], markersize=5, label=f"{label} ({what})", **style))
    handles.append(Line2D([], [], color="grey", alpha=0.5, linewidth=0.7,
                          label="thin lines: single seeds, in their cell's colour"))
    for ax, x_label, title in ((ax_steps, "env steps", "Return vs env steps"),
                               (ax_wall, "wall-clock s (since the job's training started)", "Return vs wall-clock")):
        ax.autoscale_view()  # a collection does not rescale the axes by itself
        ax.set(ylabel="episode return", xlabel=x_label, title=title)
    ax_legend.legend(handles=handles, loc="center", ncol=2, fontsize=7, frameon=False)
    return fig


#: file name -> figure function (None: no data to plot), in the order they are written
PLOTS: tuple[tuple[str, Callable[[Report], Any | None]], ...] = (
    ("ratio.png", ratio_figure), ("phases.png", phases_figure), ("learning_curves.png", learning_figure))
