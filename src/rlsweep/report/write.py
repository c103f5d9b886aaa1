"""Writing a report: the files in the report folder, then (when the jobs used W&B) one W&B run."""

from __future__ import annotations

import itertools
import json
import os
from pathlib import Path

from rlsweep.records import write_bytes_atomic
from rlsweep.report.model import Report
from rlsweep.report.plots import PLOTS, png_bytes
from rlsweep.report.render import render_csv, render_markdown
from rlsweep.report.wandb_log import log_report
from rlsweep.report.workspace import publish_workspace


def write_report(
    report: Report, out_dir: str | os.PathLike[str], plots: bool = True, log_wandb: bool = True
) -> list[Path]:
    """Write summary.csv, summary.md, report.json and (``plots``) ratio.png, phases.png and
    learning_curves.png into ``out_dir`` (created when missing), each atomically; return their paths.

    A plot without data (e.g. every job failed) is skipped. With ``log_wandb``, when the sweep's jobs
    logged to W&B, the report is also logged as one run in their group (:func:`~rlsweep.report.wandb_log.log_report`)
    and their workspace written (:func:`~rlsweep.report.workspace.publish_workspace`; its path is among
    those returned, the W&B run folder is not); a W&B failure only prints a warning.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files = {
        "summary.csv": render_csv(report).encode(),
        "summary.md": render_markdown(report).encode(),
        "report.json": (json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n").encode(),
    }
    pngs = ((name, png_bytes(make(report))) for name, make in (PLOTS if plots else ()))  # each drawn, then written
    written = []
    for name, data in itertools.chain(files.items(), pngs):
        if data is not None:
            write_bytes_atomic(out / name, data)
            written.append(out / name)
    if log_wandb:
        log_report(report, out, written)
        workspace, _url = publish_workspace(report, out)
        if workspace is not None:
            written.append(workspace)
    return written
