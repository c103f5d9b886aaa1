"""The W&B workspace of a sweep: built from what it varied, valid for wandb-workspaces, saved online.

A real two-job sweep logs offline W&B runs; its report writes the workspace definition, which is
read back through the library's own pydantic models and checked against the runs on disk.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from helpers import COMMON, TINY, read_wandb_run, run_train

import rlsweep.report as rp
from rlsweep.report.workspace import WORKSPACE_FILE, build_workspace, load_workspace, publish_workspace


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("ws") / "multirun" / "2026-12-02" / "10-00-00"
    proc = run_train(["-m", *TINY["ppo"], *COMMON, "logger.mode=offline", "twin_modules=false,true",
                      f"hydra.sweep.dir={out}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return out


@pytest.fixture(scope="module")
def runs(sweep: Path) -> list[dict[str, Any]]:
    return [read_wandb_run(p) for p in sorted(sweep.glob("[0-9]*/wandb/offline-run-*"))]


def _panel_keys(workspace: Any) -> dict[str, set[str]]:
    """The keys the panels and the run set read, by where W&B looks them up."""
    import wandb_workspaces.reports.v2 as wr

    keys: dict[str, set[str]] = {"summary": set(), "history": set(), "config": set()}

    def add(metric: Any) -> None:
        if isinstance(metric, wr.SummaryMetric):
            keys["summary"].add(metric.name)
        elif isinstance(metric, wr.Config):
            keys["config"].add(metric.name)
        elif isinstance(metric, wr.Metric):
            keys["history"].add(metric.name)
        else:
            raise AssertionError(f"unexpected panel metric {metric!r}")

    for section in workspace.sections:
        for panel in section.panels:
            if isinstance(panel, wr.ParallelCoordinatesPlot):
                for column in panel.columns:
                    add(column.metric)
            elif isinstance(panel, wr.LinePlot):
                add(panel.x)
                for y in panel.y:
                    add(y)
            else:
                for m in panel.metrics:
                    add(m)
    keys["config"] |= {g.name for g in workspace.runset_settings.groupby}
    return keys


def test_the_sweep_report_writes_a_workspace_the_library_reads_back(sweep: Path) -> None:
    import wandb_workspaces.reports.v2 as wr
    from wandb_workspaces.workspaces.internal import View

    text = (sweep / "report" / WORKSPACE_FILE).read_text()
    View.model_validate_json(text)  # W&B's view format, as the library validates it
    ws = load_workspace(text)
    assert (ws.project, ws.entity, ws.name) == ("rlsweep", "", "rlsweep 2026-12-02/10-00-00")
    assert [s.name for s in ws.sections] == ["Throughput", "Time per phase", "Compile", "Learning",
                                             "Toggles -> outcome"]
    # runs of this sweep's group that trained (not the report's run), grouped by what the sweep varied
    assert [g.name for g in ws.runset_settings.groupby] == ["toggle.twin_modules"]
    filters = json.loads(text)["spec"]["section"]["runSets"][0]["filters"]["filters"]
    assert {(f["key"]["name"], f["op"], f["value"]) for f in filters} == {
        ("group", "=", "2026-12-02/10-00-00"), ("jobType", "=", "train")}
    assert ws.settings.x_axis == "train/env_steps"
    (parallel,) = ws.sections[-1].panels
    assert isinstance(parallel, wr.ParallelCoordinatesPlot)
    assert [c.metric.name for c in parallel.columns] == ["toggle.twin_modules", "perf/env_steps_per_s",
                                                         "learning/final_return"]
    bars = [p for s in ws.sections for p in s.panels if isinstance(p, wr.BarPlot)]
    assert bars and all((p.groupby_aggfunc, p.groupby_rangefunc) == ("median", "minmax") for p in bars)


def test_every_panel_reads_a_key_the_runs_logged(sweep: Path, runs: list[dict[str, Any]]) -> None:
    ws = load_workspace((sweep / "report" / WORKSPACE_FILE).read_text())
    keys = _panel_keys(ws)
    assert len(runs) == 2
    for run in runs:
        assert run["job_type"] == "train" and run["group"] == "2026-12-02/10-00-00"
        history = set().union(*(row.keys() for row in run["history"]))
        assert keys["summary"] <= set(run["summary"]), keys["summary"] - set(run["summary"])
        assert keys["history"] <= history, keys["history"] - history
        assert keys["config"] <= set(run["config"]), keys["config"] - set(run["config"])
        for key in keys["config"]:  # nested in W&B's config, where the library's Config(key) looks
            node = run["nested_config"]
            for part in key.split("."):
                node = node[part]
    # and the grouping key tells the two cells apart
    assert {run["config"]["toggle.twin_modules"] for run in runs} == {False, True}


def test_a_report_of_online_runs_saves_the_workspace_to_their_project(
        sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only the network is faked: W&B's API object, which the library asks to run its GraphQL."""
    import wandb

    calls: list[dict[str, Any]] = []

    class FakeServiceApi:
        app_url = "https://wandb.example"

        def execute_graphql(self, query: str, variables: dict[str, Any]) -> dict[str, Any]:
            calls.append({"query": query, "variables": variables})
            return {"upsertView": {"view": {"id": "VmlldzoxMjM=", "name": "nw-abc123xyz00-v"}, "inserted": True}}

    class FakeApi:
        default_entity = "my-team"

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self._service_api = FakeServiceApi()

    monkeypatch.setattr(wandb, "Api", FakeApi)
    report = rp.build_report(rp.load_sweep(sweep))
    report.wandb = dataclasses.replace(report.wandb, mode="online", project="proj-x", entity=None)
    path, url = publish_workspace(report, tmp_path)
    assert path == tmp_path / WORKSPACE_FILE and path.is_file()
    (call,) = calls
    assert "upsertView" in call["query"]
    v = call["variables"]
    assert (v["entityName"], v["projectName"], v["displayName"], v["type"]) == (
        "my-team", "proj-x", "rlsweep 2026-12-02/10-00-00", "project-view")
    assert url == "https://wandb.example/my-team/proj-x?nw=abc123xyz00"
    # the saved spec is the one written to disk (panel ids aside: the library draws them anew)
    saved, written = json.loads(v["spec"])["section"], json.loads(path.read_text())["spec"]["section"]
    assert saved["runSets"][0]["grouping"] == written["runSets"][0]["grouping"] == [
        {"section": "config", "name": "toggle.value.twin_modules"}]
    assert saved["runSets"][0]["filters"] == written["runSets"][0]["filters"]

    def panels(section: dict[str, Any]) -> list[tuple[str, str]]:
        return [(p["viewType"], json.dumps(p["config"], sort_keys=True))
                for s in section["panelBankConfig"]["sections"] for p in s["panels"]]

    assert panels(saved) == panels(written) and len(panels(saved)) == 15


def test_an_offline_report_saves_nothing_and_a_failed_save_only_warns(
        sweep: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    import wandb

    def no_network(*args: Any, **kwargs: Any) -> None:
        raise ConnectionError("no route to the W&B server")

    monkeypatch.setattr(wandb, "Api", no_network)
    report = rp.build_report(rp.load_sweep(sweep))
    assert publish_workspace(report, tmp_path / "a") == (tmp_path / "a" / WORKSPACE_FILE, None)  # offline
    report.wandb = dataclasses.replace(report.wandb, mode="online")
    path, url = publish_workspace(report, tmp_path / "b")
    assert url is None and path is not None and path.is_file()
    assert "W&B workspace could not be saved (ConnectionError: no route to the W&B server)" in capsys.readouterr().err


def test_a_sweep_without_wandb_has_no_workspace() -> None:
    report = rp.Report(sweep_dir=Path("."), baseline_spec={}, baseline_labels=[], varied_dims=[], cells=[],
                       marginal_effects=[], casualties=[], notes=[], n_jobs=0, expected_jobs=None, n_bootstrap=1,
                       bootstrap_seed=0, wandb=None)
    assert publish_workspace(report, Path("/nonexistent")) == (None, None)
    with pytest.raises(ValueError, match="did not log to W&B"):
        build_workspace(report)


def test_dimensions_map_to_the_jobs_wandb_config_columns() -> None:
    from rlsweep.report.workspace import config_key

    assert [config_key(d) for d in ("algo", "env_id", "compile", "backend.num_threads", "algo.lr", "seed")] == [
        "algo.name", "env.id", "toggle.compile", "toggle.backend.num_threads", "algo.lr", "seed"]
