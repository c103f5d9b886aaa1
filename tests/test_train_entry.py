"""The user's commands, run for real: `python -m sweeps.train` single runs and sweeps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers import read_wandb_run, run_train

from rlsweep.launchers import usable_cpus
from rlsweep.results import read_result

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


# Bad input (typos, wrong types, budgets, env ids, mismatches, devices, folders, conflicts) is
# table-tested through this same entry point in test_bad_input.py.


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
