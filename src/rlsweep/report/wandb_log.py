"""The report as one W&B run in the sweep's group, next to the jobs' runs.

Logging never makes the report fail: any W&B error becomes one warning line on stderr.
wandb is imported only when a run is made.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from rlsweep.config import LoggerConfig
from rlsweep.records import section
from rlsweep.report.model import Job, Report, WandbTarget
from rlsweep.report.render import cell_text, effects_table, summary_table
from rlsweep.tracking import init_run, offline_copies, resolved_logger, run_group, stable_run_id

WANDB_MODES = ("offline", "online")


def wandb_target(jobs: Iterable[Job], sweep_dir: Path) -> WandbTarget | None:
    """Where the sweep's jobs logged to W&B: the first record with an offline or online mode, as the
    job resolved it (``record["logging"]``), else resolved from its ``config.logger`` (older records).
    None when no job logged to W&B."""
    for job in jobs:
        logger = section(job.record, "config").get("logger")
        if not isinstance(logger, dict):
            continue
        logged = section(job.record, "logging")
        if "wandb_project" in logged:
            mode, project, entity, root = (logged.get(f"wandb_{k}") for k in ("mode", "project", "entity", "dir"))
        else:
            try:
                s = resolved_logger(LoggerConfig(**{k: logger.get(k) for k in ("mode", "project", "entity", "dir")}))
            except ValueError:  # WANDB_MODE unusable here
                continue
            mode, project, entity, root = s.mode, s.project, s.entity, s.dir
        if mode not in WANDB_MODES:
            continue
        job_sweep_dir = section(job.record, "job").get("sweep_dir")
        return WandbTarget(mode=mode, project=project, entity=entity, dir=root,
                           group=run_group(logger.get("group"), job_sweep_dir, sweep_dir.resolve()))
    return None


def _table(wandb: Any, table: tuple[list[str], list[list[Any]]]) -> Any:
    columns, rows = table
    return wandb.Table(columns=columns, data=[[cell_text(v) if isinstance(v, list) else v for v in row] for row in rows])


def log_report(report: Report, out_dir: Path, files: Iterable[Path]) -> Path | None:
    """Log the report as one run (job_type "report") in the jobs' project and group (``report.wandb``;
    None: nothing is logged); return the run's folder, None when nothing was logged (no target, or W&B failed).

    The run's id comes from the report folder ``out_dir``, so a report made again updates the same W&B
    run (offline: its new copy replaces the earlier one on disk); the run is written under
    ``<out_dir>/wandb/`` (or under the jobs' W&B folder, ``<target.dir>/wandb/``, when they logged to one).
    Logs ``report/cells`` (summary.csv's columns), ``report/marginal_effects`` and the PNGs among
    ``files`` as ``plots/<name>``; counts and toggle effects go to the run's summary.
    """
    target = report.wandb
    if target is None:
        return None
    try:
        import wandb

        # one report run per sweep: running the report again continues it instead of adding one
        run = init_run(stable_run_id(out_dir), target.dir or str(out_dir), mode=target.mode, project=target.project,
                       entity=target.entity, group=target.group, job_type="report", name="report",
                       config={"sweep_dir": str(report.sweep_dir), "baseline": report.baseline_spec,
                               **{k: getattr(report, k) for k in ("varied_dims", "n_jobs", "expected_jobs",
                                                                  "n_bootstrap", "bootstrap_seed")}})
        try:
            run_dir = Path(run.dir).parent
            # the tables and plots as one logged step; the counts and toggle effects as the summary
            run.log({"report/cells": _table(wandb, summary_table(report)),
                     "report/marginal_effects": _table(wandb, effects_table(report)),
                     **{f"plots/{p.stem}": wandb.Image(str(p)) for p in files if p.suffix == ".png"}})
            run.summary.update({**{f"report/n_{status}": n for status, n in report.counts.items()},
                                **{f"effect/{eff.toggle}={eff.to_value}": eff.effect
                                   for eff in report.marginal_effects if eff.effect is not None}})
        finally:
            run.finish()
        if target.mode == "offline":  # the earlier copies are superseded by the one just written
            for old in offline_copies(run_dir.parent, run.id):
                if old != run_dir:
                    shutil.rmtree(old, ignore_errors=True)
        return run_dir
    except Exception as exc:  # noqa: BLE001 - the report's files are written either way
        reason = (str(exc).strip().splitlines() or [""])[0]
        print(f"rlsweep report: W&B logging failed ({type(exc).__name__}: {reason}); the report files are written",
              file=sys.stderr)
        return None
