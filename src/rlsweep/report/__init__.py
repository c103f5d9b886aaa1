"""Summarise a sweep directory: which PyTorch optimization toggles pay.

Reads every job's ``result.json`` under a Hydra multirun directory, groups jobs into *cells* (one combination of the
swept values; seeds are repeats within a cell) and compares each cell with its baseline cell: steady-state and
end-to-end ratios with bootstrap intervals, which toggle pays, whether learning changed, and what would make a ratio
unclean. What each number means and how it is computed: docs/reference/record.md. ``python -m sweeps.report
<sweep_dir>`` is the command-line entry point.

Modules: ``load`` (reading a sweep, cell keys from overrides and records), ``stats`` (the numbers),
``measurement`` (the flags), ``render`` (terminal table, summary.md, summary.csv), ``plots`` (PNGs),
``wandb_log`` and ``workspace`` (the report as a W&B run, the sweep's workspace), ``cli`` (``main``,
and ``write_report``: the report folder). Import from this package.
"""

from __future__ import annotations

from rlsweep.report.cli import main, write_report
from rlsweep.report.load import load_sweep
from rlsweep.report.model import (
    Casualty,
    CellSummary,
    Job,
    MarginalEffect,
    PairRatio,
    Report,
    ReportInputError,
    Sweep,
    WandbTarget,
)
from rlsweep.report.render import render_table
from rlsweep.report.stats import build_report

__all__ = ["Casualty", "CellSummary", "Job", "MarginalEffect", "PairRatio", "Report", "ReportInputError", "Sweep",
           "WandbTarget", "build_report", "load_sweep", "main", "render_table", "write_report"]
