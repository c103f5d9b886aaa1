"""The report's PNG plots: speed-up ratios with CIs, time per phase, learning curves.

matplotlib is imported lazily and drawn through the Agg canvas (no GUI backend, no pyplot state).
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import numpy as np

from rlsweep.report.model import PHASES, CellSummary, Report


def _new_figure(width_in: float, height_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _per_cell_figure(cells: list[CellSummary]) -> Any:
    """A figure with one horizontal bar per cell, tall enough for the labels."""
    return _new_figure(9.0, max(3.5, 0.45 * len(cells) + 1.5))


def _png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _colormap(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "viridis"]
    return [cmap(i if n <= 10 else i / max(1, n - 1)) for i in range(n)]


def plot_ratio(report: Report) -> bytes | None:
    """Bars of each cell's env_steps_per_s ratio vs its baseline with the 95% CI."""
    cells = [c for c in report.cells if c.ratio is not None]
    if not cells:
        return None
    fig = _per_cell_figure(cells)
    ax = fig.add_subplot(1, 1, 1)
    ys = np.arange(len(cells))[::-1]
    ratios = [c.ratio for c in cells]
    low = [max(0.0, c.ratio - c.ci_low) if c.ci_low is not None and c.ratio else 0.0 for c in cells]
    high = [
        max(0.0, c.ci_high - c.ratio) if c.ci_high is not None and c.ratio else 0.0 for c in cells
    ]
    colors = []
    for c in cells:
        if c.is_baseline:
            colors.append("#888888")
        elif c.ci_low is not None and c.ci_low > 1.0:
            colors.append("#2a9d3f")
        elif c.ci_high is not None and c.ci_high < 1.0:
            colors.append("#c0392b")
        else:
            colors.append("#5b7fbf")
    ax.barh(ys, ratios, xerr=[low, high], color=colors, capsize=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels(
        [c.label + (" (baseline)" if c.is_baseline else "") for c in cells], fontsize=8
    )
    ax.set_xlabel("env_steps_per_s ratio vs baseline (95% CI)")
    ax.set_title("Speed-up vs baseline")
    return _png_bytes(fig)


def plot_phases(report: Report) -> bytes | None:
    """Stacked bars of steady-state seconds per phase for each cell."""
    cells = [c for c in report.cells if any(v is not None for v in c.phase_total_s.values())]
    if not cells:
        return None
    fig = _per_cell_figure(cells)
    ax = fig.add_subplot(1, 1, 1)
    ys = np.arange(len(cells))[::-1]
    left = np.zeros(len(cells))
    for phase in PHASES:
        widths = np.array([c.phase_total_s.get(phase) or 0.0 for c in cells])
        if not widths.any():
            continue
        ax.barh(ys, widths, left=left, label=phase)
        left += widths
    ax.set_yticks(ys)
    ax.set_yticklabels([c.label for c in cells], fontsize=8)
    ax.set_xlabel("steady-state seconds per phase (median over seeds)")
    ax.set_title("Where the time goes")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(PHASES))
    return _png_bytes(fig)


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


def plot_learning(report: Report) -> bytes | None:
    """Training-episode returns against env steps and against wall-clock.

    One colour per cell: each seed a thin line, and with several seeds the cell's median over
    seeds (bold) with its interquartile band, on the span every seed covers. A cell's seed lines
    are one artist (a line collection): matplotlib's cost is per artist, and a sweep may have
    1,000 seeds.
    """
    from matplotlib.collections import LineCollection

    cells = [c for c in report.cells if c.curves]
    if not cells:
        return None
    fig = _new_figure(12.0, 4.5)
    ax_steps = fig.add_subplot(1, 2, 1)
    ax_wall = fig.add_subplot(1, 2, 2)
    cmap = _colormap(len(cells))
    for i, cell in enumerate(cells):
        several = len(cell.curves) >= 2
        for ax, x_key in ((ax_steps, "env_steps"), (ax_wall, "wall_s")):
            pairs = [(c[x_key], c["episode_return"]) for c in cell.curves]
            band = _median_band(pairs) if several else None
            lines = [np.column_stack([np.asarray(x, dtype=float), np.asarray(y, dtype=float)])
                     for x, y in pairs if len(x) == len(y) and len(x) > 0]
            if lines:
                ax.add_collection(LineCollection(
                    lines, colors=[cmap[i]], alpha=0.25 if band is not None else 0.8,
                    linewidths=0.7 if band is not None else 1.2, label=cell.label if band is None else None))
            if band is not None:
                grid, med, q25, q75 = band
                ax.fill_between(grid, q25, q75, color=cmap[i], alpha=0.2, linewidth=0)
                ax.plot(grid, med, color=cmap[i], linewidth=2.2,
                        label=f"{cell.label} (median of {len(pairs)} seeds)")
    for ax in (ax_steps, ax_wall):
        ax.autoscale_view()  # a collection does not rescale the axes by itself
    ax_steps.set_xlabel("env steps")
    ax_wall.set_xlabel("wall-clock s (since the job's training started)")
    for ax in (ax_steps, ax_wall):
        ax.set_ylabel("episode return")
    ax_steps.set_title("Return vs env steps")
    ax_wall.set_title("Return vs wall-clock")
    ax_wall.legend(fontsize=7, loc="best")
    return _png_bytes(fig)


#: file name -> plot function, in the order they are written
PLOTS: tuple[tuple[str, Callable[[Report], bytes | None]], ...] = (
    ("ratio.png", plot_ratio),
    ("phases.png", plot_phases),
    ("learning_curves.png", plot_learning),
)
