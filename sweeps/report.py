"""Summarise a finished (or partly finished) sweep.

Usage:
    python -m sweeps.report <sweep_dir> [--baseline key=value ...] [--out DIR] [--no-plots]
                            [--no-wandb]

Writes summary.csv, summary.md, report.json and PNG plots into ``<sweep_dir>/report/``
(or ``--out``) and prints a table. When the sweep's jobs logged to W&B, the report is also
logged as one run (job_type "report") in their group, unless ``--no-wandb``. Exit code 0
when a report was produced, 2 for bad input. See :mod:`rlsweep.report` for the statistics.
"""

from __future__ import annotations

import sys

from rlsweep.report import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
