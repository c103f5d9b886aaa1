"""``python -m sweeps.report <sweep_dir>``: load, compute, print the table, write the report folder
(:func:`write_report`), then (when the jobs used W&B) one W&B run."""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from rlsweep.records import write_bytes_atomic
from rlsweep.report.load import load_sweep, split_override
from rlsweep.report.model import Report, ReportInputError
from rlsweep.report.plots import PLOTS, png_bytes
from rlsweep.report.render import render_csv, render_markdown, render_table
from rlsweep.report.stats import build_report
from rlsweep.report.wandb_log import log_report
from rlsweep.report.workspace import print_upload_line, publish_workspace
from rlsweep.status import slurm_error, slurm_verdicts, sweep_status


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
    files = {"summary.csv": render_csv(report).encode(), "summary.md": render_markdown(report).encode(),
             "report.json": (json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n").encode()}
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


def main(argv: Sequence[str]) -> int:
    """Command-line entry point (``argv`` without the program name): 0 when a report was produced
    (failed jobs included), 2 for bad input."""
    parser = argparse.ArgumentParser(prog="python -m sweeps.report", description="Summarise a sweep: per-cell "
                                     "throughput, speed-up vs baseline, toggle effects, learning check, casualties.")
    parser.add_argument("sweep_dir", help="Hydra multirun directory of the sweep")
    parser.add_argument("--baseline", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="baseline cell, override-style (default: every toggle off; a swept hyper-parameter: "
                        "the config's default value, else the first value listed)")
    parser.add_argument("--out", default=None, help="output folder (default: <sweep_dir>/report)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    parser.add_argument("--no-wandb", action="store_true",
                        help="do not log the report to W&B (default: log it when the sweep's jobs did)")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:  # argparse has already printed its message
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    baseline = dict(split_override(item) for item in args.baseline)
    bad = next((item for item in args.baseline if "=" not in item or not split_override(item)[0]), None)
    if bad is not None:
        print(f"error: bad --baseline item {bad!r}: expected key=value", file=sys.stderr)
        return 2
    # jobs Slurm ended before they could write their result: its verdict, read, not written (best effort)
    verdicts = {}
    with contextlib.suppress(Exception):
        verdicts = {folder: (job.state, slurm_error(job))
                    for folder, (job, _) in slurm_verdicts(sweep_status(args.sweep_dir)).items()}
    try:
        sweep = load_sweep(args.sweep_dir, verdicts)
        report = build_report(sweep, baseline or None)
    except ReportInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else Path(args.sweep_dir) / "report"
    print(render_table(report, color=sys.stdout.isatty() and not os.environ.get("NO_COLOR")))
    try:
        written = write_report(report, out_dir, plots=not args.no_plots, log_wandb=False)
    except OSError as exc:
        print(f"error: cannot write report to {out_dir}: {exc}", file=sys.stderr)
        return 2
    print(f"\nWrote {len(written)} files to {out_dir}:")  # two lines: the summary's width is kept to 120 columns
    print("  " + ", ".join(p.name for p in written))
    if report.wandb is not None and not args.no_wandb:
        run_dir = log_report(report, out_dir, written)
        if run_dir is not None:
            print(f"W&B ({report.wandb.mode}) report run in group {report.wandb.group}: {run_dir}")
        workspace, url = publish_workspace(report, out_dir)  # online: saved to the project as well
        if url is not None:
            print(f"W&B workspace of this sweep: {url}")
        elif workspace is not None:
            print(f"W&B workspace definition: {workspace} (saved to W&B by a report of online runs)")
        print_upload_line(Path(args.sweep_dir))
    return 0
