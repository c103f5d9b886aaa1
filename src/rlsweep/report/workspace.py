"""A W&B workspace (a saved view of the project) for one sweep, built with ``wandb-workspaces``.

The sweep's training runs, grouped by the dimensions it varied, with one section per question the report answers; the
sections and why a bar shows a median with its min-max range: docs/guide/wandb.md. Written next to the report as
``wandb_workspace.json``; saved to W&B when the jobs logged online, or later (after ``wandb sync`` of offline runs) with

    python -m rlsweep.report.workspace <sweep>/report/wandb_workspace.json [--entity E] [--project P]
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlsweep.records import PHASES, walk_records, write_bytes_atomic
from rlsweep.report.load import is_toggle_dim
from rlsweep.report.model import Report
from rlsweep.tracking import ENV_STEPS_METRIC, JOB_TYPE_TRAIN, offline_copies, stable_run_id

WORKSPACE_FILE = "wandb_workspace.json"
#: summary metrics of a job's run (see rlsweep.job._summary_metrics) the panels show
THROUGHPUT = "perf/env_steps_per_s"
FINAL_RETURN = "learning/final_return"
#: how a grouped panel aggregates the runs (seeds) of a cell, and the range it draws around that
AGGREGATE = "median"
RANGE = "minmax"


def config_key(dim: str) -> str:
    """The W&B config column of a report dimension (the job's nested W&B config, see rlsweep.job).

    ``algo`` -> ``algo.name``, ``env_id`` -> ``env.id``, a toggle (``compile``,
    ``backend.num_threads``) -> ``toggle.<dim>`` (the toggle's value as the job applied it), any
    other override (``algo.lr``, ``total_env_steps``) -> itself.
    """
    return {"algo": "algo.name", "env_id": "env.id"}.get(dim) or (f"toggle.{dim}" if is_toggle_dim(dim) else dim)


def build_workspace(report: Report) -> Any:
    """The sweep's W&B workspace (a ``wandb_workspaces.workspaces.Workspace``) in the jobs' W&B project, entity
    (empty: the account's default) and group (``report.wandb``; ValueError when the jobs did not log to W&B)."""
    import wandb_workspaces.reports.v2 as wr
    import wandb_workspaces.workspaces as ws

    target = report.wandb
    if target is None:
        raise ValueError("the sweep's jobs did not log to W&B: there is no W&B workspace to build")
    keys = [config_key(d) for d in report.varied_dims]

    grouped = {"groupby_aggfunc": AGGREGATE, "groupby_rangefunc": RANGE}

    def bar(metric: str, title: str) -> Any:
        return wr.BarPlot(title=title, metrics=[wr.SummaryMetric(metric)], **grouped)

    def curve(metric: str, title: str) -> Any:
        return wr.LinePlot(title=title, x=ENV_STEPS_METRIC, y=[metric], **grouped)

    spread = f"{AGGREGATE} over seeds, {RANGE.replace('minmax', 'min-max')} range"
    panels = {
        "Throughput": [
            bar(THROUGHPUT, f"env steps/s, steady state ({spread})"),
            curve("perf/iteration_env_steps_per_s", "env steps/s per iteration"),
            bar("perf/updates_per_s", f"updates/s, steady state ({spread})"),
            bar("wall_s", f"whole job, s: start-up, compile and evaluation included ({spread})")],
        "Time per phase": [bar(f"time/{phase}_ms", f"{phase}: median ms per call ({spread})") for phase in PHASES],
        "Compile": [bar("compile/compile_s", f"compile time, s ({spread})"),
                    bar("compile/graph_breaks", "graph breaks"), bar("compile/recompiles", "recompiles")],
        "Learning": [curve("train/episode_return", "training episode return"),
                     bar(FINAL_RETURN, f"final return, deterministic evaluation ({spread})")],
        "Toggles -> outcome": [wr.ParallelCoordinatesPlot(
            title="varied dimensions -> throughput and final return",
            columns=[wr.ParallelCoordinatesPlotColumn(metric=wr.Config(k), display_name=k) for k in keys]
            + [wr.ParallelCoordinatesPlotColumn(metric=wr.SummaryMetric(m), display_name=m)
               for m in (THROUGHPUT, FINAL_RETURN)])],
    }
    return ws.Workspace(
        entity=target.entity or "", project=target.project or "", name=f"rlsweep {target.group}",
        sections=[ws.Section(name=name, is_open=True, panels=p) for name, p in panels.items()],
        settings=ws.WorkspaceSettings(x_axis=ENV_STEPS_METRIC, max_runs=max(10, report.n_jobs)),
        runset_settings=ws.RunsetSettings(
            filters=ws.And(ws.Metric("Group") == target.group, ws.Metric("JobType") == JOB_TYPE_TRAIN),
            groupby=[ws.Config(k) for k in keys],
        ),
    )


def workspace_json(workspace: Any) -> str:
    """The workspace in W&B's own view format (the library's pydantic ``View`` model), as JSON."""
    return workspace._to_model().model_dump_json(by_alias=True, exclude_none=True, indent=2) + "\n"


def load_workspace(text: str) -> Any:
    """A workspace from :func:`workspace_json`'s text, validated by the library's models.

    Raises:
        pydantic.ValidationError: The text is not a valid W&B view definition.
    """
    from wandb_workspaces.workspaces import Workspace
    from wandb_workspaces.workspaces.internal import View

    return Workspace._from_model(View.model_validate_json(text))


def save_workspace(workspace: Any) -> str:
    """Save ``workspace`` to its W&B project (network) and return its URL; an empty entity becomes the account's
    default entity."""
    if not workspace.entity:
        import wandb

        workspace.entity = wandb.Api().default_entity
    return str(workspace.save().url)


def publish_workspace(report: Report, out_dir: Path) -> tuple[Path | None, str | None]:
    """Write ``<out_dir>/wandb_workspace.json`` (nothing when the jobs did not log to W&B) and, when they
    logged online, save it to W&B too; return the definition's path and the saved workspace's URL, each
    None when not written or not saved.

    Never raises: a failure becomes one warning line on stderr (the report's files are written).
    """
    if report.wandb is None:
        return None, None
    path: Path | None = None
    try:
        workspace = build_workspace(report)
        path = Path(out_dir) / WORKSPACE_FILE
        write_bytes_atomic(path, workspace_json(workspace).encode())
        if report.wandb.mode == "online":
            return path, save_workspace(workspace)
    except Exception as exc:  # noqa: BLE001 - the report's files are written either way
        reason = (str(exc).strip().splitlines() or [""])[0]
        print(f"rlsweep report: the W&B workspace could not be {'saved' if path else 'built'} "
              f"({type(exc).__name__}: {reason})", file=sys.stderr)
    return path, None


def offline_sync_command(sweep: Path) -> str | None:
    """One shell line that uploads the sweep's offline W&B runs (its jobs' and its report's) with ``wandb sync``,
    then saves the sweep's workspace (:mod:`rlsweep.report.workspace`); None when no job logged offline."""
    sweep = sweep.resolve()
    report = sweep / "report"  # the report's own run is in the jobs' logger.dir, else in this folder
    runs: list[Path] = []
    report_roots = {report}
    for folder, record in walk_records(sweep):
        logged = record.get("logging") or {}
        if logged.get("wandb_mode") != "offline" or not logged.get("wandb_run_id"):
            continue
        root = Path(logged["wandb_dir"]) if logged.get("wandb_dir") else folder
        if logged.get("wandb_dir"):
            report_roots.add(root)
        runs += offline_copies(root / "wandb", str(logged["wandb_run_id"]))
    if not runs:
        return None
    for root in report_roots:
        runs += offline_copies(root / "wandb", stable_run_id(report))
    runs = sorted({r.resolve() for r in runs})
    if runs == sorted(p.resolve() for p in sweep.glob("*/wandb/offline-run-*")):
        where = f"{shlex.quote(str(sweep))}/*/wandb/offline-run-*"
    else:
        where = " ".join(shlex.quote(str(r)) for r in runs)
    line = f"wandb sync {where}"
    definition = report / WORKSPACE_FILE
    if definition.is_file():
        line += f" && python -m rlsweep.report.workspace {shlex.quote(str(definition))}"
    return line


def print_upload_line(sweep: Path) -> None:
    """Print how to upload the sweep's offline W&B runs and save its workspace, when it has offline runs."""
    try:
        upload = offline_sync_command(sweep)
    except Exception as exc:  # noqa: BLE001 - a hint only
        print(f"rlsweep: finding the sweep's offline W&B runs failed: {exc}", file=sys.stderr)
        return
    if upload:
        print(f"\nW&B: this sweep's runs are offline. To upload them and save its workspace to W&B:\n  {upload}",
              flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m rlsweep.report.workspace <wandb_workspace.json>``: save a written definition to W&B."""
    parser = argparse.ArgumentParser(prog="python -m rlsweep.report.workspace",
                                     description="Save a sweep's W&B workspace definition to its W&B project "
                                                 "(after `wandb sync` of offline runs).")
    parser.add_argument("definition", help="the report's wandb_workspace.json")
    parser.add_argument("--entity", help="W&B entity (default: the definition's, else the account's default)")
    parser.add_argument("--project", help="W&B project (default: the definition's)")
    args = parser.parse_args(argv)
    try:
        workspace = load_workspace(Path(args.definition).read_text())
    except (OSError, ValueError) as exc:
        print(f"error: {args.definition}: {exc}", file=sys.stderr)
        return 2
    workspace.entity, workspace.project = args.entity or workspace.entity, args.project or workspace.project
    print(f"W&B workspace saved: {save_workspace(workspace)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
