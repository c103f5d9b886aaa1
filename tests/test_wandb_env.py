"""W&B's own environment variables: WANDB_MODE, WANDB_PROJECT, WANDB_ENTITY and WANDB_DIR apply
where the config leaves ``logger.mode``/``project``/``entity``/``dir`` unset; a value set in the
config or on the command line wins. Resolved in one place, :func:`rlsweep.tracking.resolved_logger`.

Jobs run through ``python -m sweeps.train`` (smoke budget) with the real wandb client, offline, and
their runs are read back from disk.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from helpers import read_wandb_run, run_train

from rlsweep.config import LoggerConfig
from rlsweep.records import read_result
from rlsweep.report.model import Job, WandbTarget
from rlsweep.report.wandb_log import wandb_target
from rlsweep.tracking import WandbSettings, resolved_logger, wandb_credentials_problem

FAST = ["prepare=false", "experiment=smoke", "progress=false", "backend.num_threads=1"]
WANDB_VARS = ("WANDB_MODE", "WANDB_PROJECT", "WANDB_ENTITY", "WANDB_DIR")


@pytest.fixture(autouse=True)
def _no_wandb_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets: none of W&B's variables from the shell that runs the tests."""
    for name in WANDB_VARS:
        monkeypatch.delenv(name, raising=False)


@pytest.mark.parametrize(("cfg", "env", "expected"), [
    (LoggerConfig(), {}, ("offline", "rlsweep", None, None, "default")),
    (LoggerConfig(), {"WANDB_MODE": "disabled", "WANDB_PROJECT": "foo", "WANDB_ENTITY": "team", "WANDB_DIR": "/w"},
     ("disabled", "foo", "team", "/w", "WANDB_MODE")),
    (LoggerConfig(mode="offline", project="mine", entity="me", dir="/d"),
     {"WANDB_MODE": "disabled", "WANDB_PROJECT": "foo", "WANDB_ENTITY": "team", "WANDB_DIR": "/w"},
     ("offline", "mine", "me", "/d", "logger.mode")),
    (LoggerConfig(), {"WANDB_MODE": "dryrun"}, ("offline", "rlsweep", None, None, "WANDB_MODE")),  # wandb's old names
    (LoggerConfig(), {"WANDB_MODE": "run"}, ("online", "rlsweep", None, None, "WANDB_MODE")),
    (LoggerConfig(mode="online"), {"WANDB_MODE": "shared"}, ("online", "rlsweep", None, None, "logger.mode")),
    (LoggerConfig(mode="disabled"), {"WANDB_MODE": "bogus"}, ("disabled", "rlsweep", None, None, "logger.mode")),
])
def test_the_config_wins_then_wandbs_variable_then_the_default(cfg: LoggerConfig, env: dict[str, str],
                                                               expected: tuple) -> None:
    assert resolved_logger(cfg, env) == WandbSettings(*expected)


@pytest.mark.parametrize(("cfg", "value"), [
    (LoggerConfig(), "bogus"),
    (LoggerConfig(), ""),
    (LoggerConfig(), "shared"),  # valid for wandb, not a mode rlsweep runs
    (LoggerConfig(mode="offline"), "bogus"),  # wandb itself does not start with it, whatever mode= says
])
def test_an_unusable_wandb_mode_is_a_clear_error(cfg: LoggerConfig, value: str) -> None:
    with pytest.raises(ValueError, match=f"WANDB_MODE={value!r} in the environment is not valid"):
        resolved_logger(cfg, {"WANDB_MODE": value})


def test_credentials_are_looked_up_as_wandb_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WANDB_API_KEY", "")
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    assert wandb_credentials_problem() == "no W&B credentials were found"
    netrc = tmp_path / "netrc"
    netrc.write_text(f"machine api.wandb.ai\n  login user\n  password {'k' * 40}\n")
    monkeypatch.setenv("NETRC", str(netrc))
    assert wandb_credentials_problem() is None
    monkeypatch.setenv("WANDB_API_KEY", "too-short")  # the variable comes first, and is checked
    assert "WANDB_API_KEY invalid" in wandb_credentials_problem()


def test_the_report_logs_where_the_jobs_did(tmp_path: Path) -> None:
    """The mode, project, entity and folder the jobs resolved are in their records (running ones too)."""
    logging = {"wandb_mode": "offline", "wandb_project": "foo", "wandb_entity": "team", "wandb_dir": "/w"}
    job = Job(status="running", overrides=[], record={"config": {"logger": {"mode": None, "group": "g"}},
                                                      "logging": logging})
    assert wandb_target([job], tmp_path) == WandbTarget("offline", "foo", "team", "g", "/w")
    off = Job(status="ok", overrides=[], record={"config": {"logger": {"mode": None}},
                                                 "logging": {**logging, "wandb_mode": "disabled"}})
    assert wandb_target([off], tmp_path) is None


def test_wandb_mode_disabled_writes_no_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_train([*FAST, f"hydra.run.dir={out}"], env={"WANDB_MODE": "disabled"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(out)
    assert record["status"] == "ok"
    assert record["logging"]["wandb_mode"] == "disabled"
    assert record["logging"]["wandb_run_dir"] is None and record["logging"]["wandb_run_id"] is None
    assert not (out / "wandb").exists() and not list(out.rglob("*.wandb"))


def test_logger_mode_on_the_command_line_beats_wandb_mode(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_train([*FAST, "logger.mode=offline", f"hydra.run.dir={out}"], env={"WANDB_MODE": "disabled"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(out)
    assert record["status"] == "ok" and record["logging"]["wandb_mode"] == "offline"
    (run_dir,) = (out / "wandb").glob("offline-run-*")
    assert record["logging"]["wandb_run_dir"] == str(run_dir) and record["logging"]["errors"] == []  # written in full


def test_wandb_project_entity_and_dir_reach_the_jobs_and_the_report(tmp_path: Path) -> None:
    """A one-job sweep without logger settings: its run and the report's run go to WANDB_DIR, in
    WANDB_PROJECT and WANDB_ENTITY, offline (rlsweep's default mode)."""
    sweep, root = tmp_path / "sweep", tmp_path / "wandb-files"
    project = f"foo-{uuid.uuid4().hex[:8]}"
    proc = run_train(["-m", *FAST, f"hydra.sweep.dir={sweep}"],
                     env={"WANDB_PROJECT": project, "WANDB_ENTITY": "team-x", "WANDB_DIR": str(root)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(sweep / "0")
    logging = record["logging"]
    assert record["status"] == "ok" and logging["errors"] == []
    assert (logging["wandb_mode"], logging["wandb_project"], logging["wandb_entity"], logging["wandb_dir"]) == (
        "offline", project, "team-x", str(root))
    assert record["config"]["logger"]["mode"] is None  # the config says "not set"; the record says what ran
    assert Path(logging["wandb_run_dir"]).parent == root / "wandb"
    assert not (sweep / "0" / "wandb").exists() and not (sweep / "report" / "wandb").exists()
    runs = {run["job_type"]: run for run in map(read_wandb_run, (root / "wandb").glob("offline-run-*"))}
    assert set(runs) == {"train", "report"}
    assert all((run["project"], run["entity"], run["exit_code"]) == (project, "team-x", 0) for run in runs.values())


@pytest.mark.parametrize(("args", "env", "message"), [
    ([], {"WANDB_MODE": "bogus"}, "WANDB_MODE='bogus' in the environment is not valid"),
    (["logger.mode=offline"], {"WANDB_MODE": "bogus"}, "even with logger.mode=offline"),
    ([], {"WANDB_MODE": "online", "WANDB_API_KEY": "", "NETRC": "/nonexistent/netrc"},
     "logger.mode=online (from WANDB_MODE) but no W&B credentials were found"),
], ids=["invalid", "invalid-with-explicit-mode", "online-without-credentials"])
def test_a_bad_wandb_environment_fails_before_any_job(tmp_path: Path, args: list[str], env: dict[str, str],
                                                      message: str) -> None:
    out = tmp_path / "run"
    env = {**env, "WANDB_CONFIG_DIR": str(tmp_path / "wandb-config")}  # no api_key from a settings file
    proc = run_train([*FAST, *args, f"hydra.run.dir={out}"], env=env)
    assert proc.returncode == 2
    assert message in proc.stderr and "Nothing was run." in proc.stderr, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr + proc.stdout
    assert not out.exists()


def test_a_runs_group_keeps_the_date_of_its_folder() -> None:
    from rlsweep.tracking import run_group

    assert run_group(None, None, Path("outputs/2026-12-02/01-00-00_train")) == "2026-12-02/01-00-00_train"
    assert run_group(None, "/x/multirun/2026-12-02/01-00-00", Path("/x/multirun/2026-12-02/01-00-00/3")) == (
        "2026-12-02/01-00-00")
    assert run_group("mine", "/x/multirun/2026-12-02/01-00-00", Path("/y")) == "mine"


def test_the_wandb_config_is_nested_as_the_app_filters_it() -> None:
    from rlsweep.tracking import nest

    flat = {"algo.lr": 0.001, "algo.name": "ppo", "toggle.backend": {"num_threads": 1},
            "toggle.backend.channels_last": False, "versions.hydra-core": "1.3.8", "seed": 0}
    assert nest(flat) == {"algo": {"lr": 0.001, "name": "ppo"}, "seed": 0, "versions": {"hydra-core": "1.3.8"},
                          "toggle": {"backend": {"num_threads": 1, "channels_last": False}}}
    assert nest({"x": 1, "x.y": 2}) == {"x": 1, "x.y": 2}  # a value is never replaced by a folder
