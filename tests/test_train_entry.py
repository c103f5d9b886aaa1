"""The user's commands, run for real: `python -m sweeps.train` single runs and sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import read_wandb_run, run_train

from rlsweep.records import read_result
from rlsweep.toggles.backend import usable_cpus

FAST = ["experiment=smoke", "progress=false", "algo.update_epochs=2"]


@pytest.fixture(scope="module")
def single_run(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = tmp_path_factory.mktemp("single")
    proc = run_train([*FAST, "logger.mode=offline", "seed=3", f"hydra.run.dir={out}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return {"out": out, "proc": proc, "record": read_result(out)}


def test_single_run_writes_a_complete_record(single_run: dict) -> None:
    r = single_run["record"]
    assert r["status"] == "ok" and r["error"] is None
    assert r["schema_version"] == 1
    assert r["algo"] == "ppo" and r["env_id"] == "CartPole-v1" and r["seed"] == 3
    assert "seed=3" in r["overrides"]
    assert r["config"]["algo"]["name"] == "ppo" and r["config"]["total_env_steps"] == 2048
    assert set(r["toggles"]) == {"compile", "dtype", "pin_memory", "non_blocking", "twin_modules", "inplace", "backend",
                                 "backend.channels_last"}
    for phase in ("env_step", "act", "h2d", "d2h", "update"):
        t = r["timings"][phase]
        assert t["count"] > 0 and t["p10_ms"] <= t["median_ms"] <= t["p90_ms"]
    assert r["throughput"]["env_steps_per_s"] > 0
    assert {"compile_s", "graph_breaks", "recompiles", "per_function"} <= set(r["compile"])
    assert r["learning"]["final_return"] > 0 and len(r["learning"]["curve"]["episode_return"]) > 0
    fp = r["fingerprint"]
    assert {"cpu_model", "cpu_count", "num_threads", "gpu", "torch", "cuda", "hostname"} <= set(fp)
    assert fp["num_threads"] == r["toggles"]["backend"]["value"]["num_threads"]
    assert r["wall_s"] > 0 and r["env_steps"] == 2048
    # atomic write: no temp files left beside the record
    assert not [p for p in single_run["out"].iterdir() if p.name.endswith(".tmp")]


def test_record_and_wandb_say_which_code_ran(single_run: dict) -> None:
    import subprocess

    import torch

    head = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True,
                          cwd=Path(__file__).parent).stdout.strip()
    prov = single_run["record"]["provenance"]
    assert prov["code"]["rlsweep"]["commit"] == head
    assert isinstance(prov["code"]["rlsweep"]["dirty"], bool)
    assert "algorithm" not in prov["code"]  # the built-in PPO lives in rlsweep's own repository
    assert prov["versions"]["torch"] == torch.__version__ and prov["versions"]["hydra-core"] == "1.3.8"
    config = read_wandb_run(single_run["record"]["logging"]["wandb_run_dir"])["config"]
    assert config["code.commit"] == head and config["versions.torch"] == torch.__version__


def test_single_run_prints_a_summary(single_run: dict) -> None:
    out = single_run["proc"].stdout
    assert "rlsweep ppo on CartPole-v1" in out and "env steps/s" in out and "final return" in out


def test_wandb_offline_run_reads_back_with_the_records_numbers(single_run: dict) -> None:
    r = single_run["record"]
    run = read_wandb_run(r["logging"]["wandb_run_dir"])
    assert run["job_type"] == "train"  # the role; the algorithm is a config column and a tag
    assert run["config"]["algo.name"] == "ppo" and "ppo" in run["tags"]
    assert run["nested_config"]["algo"]["lr"] == r["config"]["algo"]["lr"]  # nested: W&B filters algo.lr
    assert run["group"] == "/".join(Path(r["job"]["output_dir"]).parts[-2:])  # keeps the date folder
    # env steps are every metric's x-axis
    assert {"glob_name": "*", "step_metric": "train/env_steps"}.items() <= next(
        m for m in run["metrics"] if m.get("glob_name") == "*").items()
    assert run["exit_code"] == 0
    assert run["config"]["algo.lr"] == r["config"]["algo"]["lr"]
    assert run["config"]["compile.mode"] == "none" and run["config"]["toggle.twin_modules"] is False
    assert run["summary"]["perf/env_steps_per_s"] == pytest.approx(r["throughput"]["env_steps_per_s"])
    assert run["summary"]["learning/final_return"] == pytest.approx(r["learning"]["final_return"])
    assert run["summary"]["time/update_ms"] == pytest.approx(r["timings"]["update"]["median_ms"])
    steps = [h["train/env_steps"] for h in run["history"]]
    assert steps == sorted(steps) and steps[-1] == r["env_steps"]
    assert any("train/episode_return" in h for h in run["history"])


def test_sweep_with_the_basic_launcher_and_a_failing_job(tmp_path: Path) -> None:
    """One job diverges: its record says why, the other's is complete, the sweep exits non-zero."""
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", *FAST, "logger.mode=offline", "algo.lr=0.001,1e30", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode != 0
    records = {json.dumps(read_result(sweep / str(i))["overrides"]): read_result(sweep / str(i)) for i in (0, 1)}
    ok = [r for r in records.values() if r["status"] == "ok"]
    failed = [r for r in records.values() if r["status"] == "failed"]
    assert len(ok) == 1 and len(failed) == 1
    assert "non-finite loss at update" in failed[0]["error"]
    assert run_exit_code(failed[0]) == 1
    assert (sweep / "report" / "summary.md").is_file()
    assert "non-finite loss" in (sweep / "report" / "summary.md").read_text()
    # its runs are offline: the sweep ends with the line that uploads them and its workspace
    upload = f"wandb sync {sweep}/*/wandb/offline-run-* && python -m rlsweep.report.workspace {sweep}/report/"
    assert proc.stdout.count(upload) == 1, proc.stdout[-3000:]


def run_exit_code(record: dict) -> int:
    return read_wandb_run(record["logging"]["wandb_run_dir"])["exit_code"]


def test_sweep_with_submitit_local(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", *FAST, "logger.mode=disabled", "twin_modules=false,true", "hydra/launcher=submitit_local",
                      "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i in (0, 1):
        r = read_result(sweep / str(i))
        assert r["status"] == "ok"
        assert r["job"]["launcher"] == "LocalLauncher"
        # side-by-side jobs get one intra-op thread each, and run at most one per CPU at once
        assert r["toggles"]["backend"]["value"]["num_threads"] == 1
        assert r["job"]["max_parallel"] == usable_cpus()
    assert {read_result(sweep / str(i))["toggles"]["twin_modules"]["value"] for i in (0, 1)} == {False, True}
    assert (sweep / "report" / "report.json").is_file()
    assert "wandb sync" not in proc.stdout  # nothing logged to W&B, nothing to upload


# Bad input (typos, wrong types, budgets, env ids, mismatches, devices, folders, conflicts) is
# table-tested through this same entry point in test_bad_input.py.


def _offline_job(folder: Path, run_id: str, wandb_dir: Path | None = None, parts: int = 1) -> list[Path]:
    """A job's record that logged offline to W&B as run ``run_id`` (``parts`` folders: resumed), and its run folders."""
    from rlsweep.records import write_result

    runs = [(wandb_dir or folder) / "wandb" / f"offline-run-2026120{i}_000000-{run_id}" for i in range(1, parts + 1)]
    for run in runs:
        run.mkdir(parents=True)
    write_result(folder, {"status": "ok", "logging": {
        "wandb_mode": "offline", "wandb_run_id": run_id, "wandb_dir": str(wandb_dir) if wandb_dir else None,
        "wandb_run_dir": str(runs[-1])}})
    return runs


def test_the_upload_line_names_exactly_the_sweeps_offline_runs(tmp_path: Path) -> None:
    import shlex
    import subprocess

    from rlsweep.report.workspace import WORKSPACE_FILE, offline_sync_command
    from rlsweep.tracking import stable_run_id

    sweep = tmp_path / "my sweep"  # a space: the line must survive the shell
    report = sweep / "report"
    runs = _offline_job(sweep / "0", "aaa", parts=2) + _offline_job(sweep / "1", "bbb")
    runs += [report / "wandb" / f"offline-run-20261201_000000-{stable_run_id(report)}"]  # the report's own run
    runs[-1].mkdir(parents=True)
    (report / WORKSPACE_FILE).write_text("{}")
    line = offline_sync_command(sweep)
    assert line == (f"wandb sync {shlex.quote(str(sweep))}/*/wandb/offline-run-* && python -m "
                    f"rlsweep.report.workspace {shlex.quote(str(report / WORKSPACE_FILE))}")
    echo = line.split(" && ")[0].replace("wandb sync", "printf '%s\\n'", 1)
    named = subprocess.run(["bash", "-c", echo], capture_output=True, text=True, check=True).stdout.splitlines()
    assert sorted(named) == sorted(map(str, runs))

    # a W&B folder shared with another sweep (logger.dir): this sweep's runs one by one, not the other's
    shared = tmp_path / "shared"
    _offline_job(tmp_path / "another sweep" / "0", "ccc", wandb_dir=shared)
    ours = _offline_job(tmp_path / "this sweep" / "0", "ddd", wandb_dir=shared)
    assert offline_sync_command(tmp_path / "this sweep") == f"wandb sync {shlex.quote(str(ours[0]))}"


def test_no_upload_line_without_offline_runs(tmp_path: Path) -> None:
    from rlsweep.records import write_result
    from rlsweep.report.workspace import offline_sync_command

    write_result(tmp_path / "0", {"status": "ok", "logging": {"wandb_mode": "disabled", "wandb_run_id": None}})
    write_result(tmp_path / "1", {"status": "ok", "logging": {"wandb_mode": "online", "wandb_run_id": "x"}})
    assert offline_sync_command(tmp_path) is None


def test_help_is_rlsweeps_page(tmp_path: Path) -> None:
    """--help: what rlsweep is, its commands, the groups a user chooses (a --config-dir's too), every
    toggle of the registry with its values, and the docs; not Hydra's page with its schema/* groups."""
    from helpers import PLUGIN_CONF, ROOT

    from rlsweep.toggles import TOGGLES, text

    proc = run_train(["--config-dir", str(PLUGIN_CONF["td3"]), "--help"], cwd=tmp_path, env={"PYTHONPATH": str(ROOT)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    page = proc.stdout
    assert page.startswith("rlsweep: benchmark what you are doing")
    assert "python -m sweeps.train -m compile=none,default twin_modules=false,true" in page
    assert "schema" not in page and "Powered by Hydra" not in page and "hydra/hydra_logging" not in page

    def section(title: str) -> str:
        return page.split(f"== {title}")[1].split("\n==")[0]

    groups = {k.strip(): v.strip() for k, v in (line.split(":", 1) for line in section("Config groups").splitlines()
                                                if ":" in line)}
    assert groups["algo"].split(", ") == ["dqn", "ppo", "sac", "td3"]
    assert "submitit_slurm" in groups["hydra/launcher"] and "smoke" in groups["experiment"]
    toggles = section("Toggles")
    for t in TOGGLES:
        if t.values is not None:
            assert " | ".join(text(v) for v in sorted(t.values, key=lambda v: v != t.off_value)) in toggles, t.name
    for doc in ("README.md", "docs/reference/toggles.md", "docs/reference/bad-input.md", "docs/guide/plugins.md"):
        assert doc in page
    assert list(tmp_path.iterdir()) == []  # no outputs/ folder


@pytest.mark.slow  # a real sweep / measurement (tens of seconds): the slow tier
def test_async_vector_envs_give_the_sync_result(tmp_path: Path) -> None:
    """env.vectorization=async (one process per env) runs end to end and learns the very same numbers."""
    records = {}
    for mode in ("sync", "async"):
        out = tmp_path / mode
        proc = run_train(["experiment=smoke", "logger.mode=disabled", "progress=false", "algo.num_envs=2",
                          f"env.vectorization={mode}", f"hydra.run.dir={out}"])
        assert proc.returncode == 0, proc.stderr[-3000:]
        records[mode] = read_result(out)
    sync, asyn = records["sync"], records["async"]
    assert asyn["status"] == "ok"
    assert asyn["env_steps"] == sync["env_steps"] > 0
    assert asyn["learning"]["final_return"] == sync["learning"]["final_return"]
    for key in ("env_steps", "episode_return"):  # (wall times differ)
        assert asyn["learning"]["curve"][key] == sync["learning"]["curve"][key]
    assert asyn["learning"]["eval_returns"] == sync["learning"]["eval_returns"]


def test_the_multirun_flag_may_come_anywhere() -> None:
    from rlsweep.cli import multirun_flag_first

    assert multirun_flag_first(["--config-dir", "c", "algo=td3", "-m", "seed=0,1"]) == [
        "-m", "--config-dir", "c", "algo=td3", "seed=0,1"]
    assert multirun_flag_first(["algo=td3", "seed=1"]) == ["algo=td3", "seed=1"]
    assert multirun_flag_first(["--multirun", "seed=0,1"]) == ["--multirun", "seed=0,1"]


def test_the_budget_is_met_not_cut_short_by_a_partial_iteration() -> None:
    from helpers import tiny_cfg

    from rlsweep.runner import train

    cfg = tiny_cfg("ppo", "total_env_steps=300")  # iterations of 4 envs x 16 steps: 4 would stop at 256
    record = train(cfg).record()
    assert record["env_steps"] == 320 and record["iterations"] == 5


def test_a_sweep_whose_report_cannot_be_written_ends_with_the_reports_status(tmp_path, monkeypatch) -> None:
    import pytest

    import rlsweep.report
    from rlsweep.cli import finish_sweep
    from rlsweep.hydra_callbacks import SweepSession

    monkeypatch.setattr(rlsweep.report, "main", lambda argv: 2)  # e.g. its folder is not writable: it said why
    session = SweepSession(sweep_dir=str(tmp_path), launcher="BasicLauncher")
    with pytest.raises(SystemExit) as stopped, finish_sweep(session):
        pass
    assert stopped.value.code == 2
    monkeypatch.setattr(rlsweep.report, "main", lambda argv: 0)
    with finish_sweep(session):  # a written report: the sweep's own status stands
        pass


def test_a_commands_session_is_shared_by_its_callback_and_ends_with_it() -> None:
    """What the launching process learns about a command lives as long as the command: a second command in the
    same process (a test, a notebook) starts from nothing."""
    from rlsweep.hydra_callbacks import RLSweepCallback, command_session, current_session

    with command_session() as session:
        assert RLSweepCallback().session is session  # the callback Hydra makes for this command
        session.sweep_dir = "a-sweep"
    assert current_session() is not session and current_session().sweep_dir is None
