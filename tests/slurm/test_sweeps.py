"""The user's Slurm commands, run for real against the local cluster (slurm/local_cluster.sh)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, read_wandb_run, run_train

from rlsweep.prepare import read_prepare
from rlsweep.records import read_result

pytestmark = pytest.mark.slurm

SMOKE = ["experiment=smoke", "progress=false", "algo.update_epochs=2", "hydra/launcher=submitit_slurm",
         "hydra.launcher.timeout_min=10"]


def sacct_states(job_id: str, tasks: int) -> dict[str, str]:
    """The array's tasks as accounting records them, once all `tasks` are there: slurmctld hands a finished
    task to slurmdbd asynchronously, so sacct can lag the records the jobs wrote by a few seconds."""
    deadline = time.monotonic() + 60
    while True:
        out = subprocess.run(["sacct", "-j", job_id, "-n", "-X", "-P", "-o", "JobID,State"], capture_output=True,
                             text=True, timeout=60, check=True).stdout
        states = dict(line.split("|", 1) for line in out.splitlines() if line.startswith(f"{job_id}_"))
        if len(states) >= tasks or time.monotonic() > deadline:
            return states
        time.sleep(1)


def test_the_cards_command_runs_on_slurm(slurm_cluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "compile=default,max-autotune", *SMOKE, "logger.mode=offline",
                      f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [read_result(sweep / str(i)) for i in (0, 1)]
    assert [r["status"] for r in records] == ["ok", "ok"]
    assert {r["toggles"]["compile"]["value"] for r in records} == {"default", "max-autotune"}
    job_ids = {r["job"]["slurm_job_id"] for r in records}
    assert len(job_ids) == 1 and None not in job_ids
    assert sorted(r["job"]["slurm_array_index"] for r in records) == ["0", "1"]
    assert all(r["job"]["launcher"] == "SlurmLauncher" for r in records)
    (job_id,) = job_ids
    for r in records:  # the W&B run carries the Slurm ids too
        config = read_wandb_run(r["logging"]["wandb_run_dir"])["config"]
        assert config["job.slurm_job_id"] == job_id
        assert config["job.slurm_array_index"] == r["job"]["slurm_array_index"]
    states = sacct_states(job_id, tasks=2)
    assert {f"{job_id}_0", f"{job_id}_1"} <= set(states)
    assert all(states[f"{job_id}_{i}"] == "COMPLETED" for i in (0, 1))
    # intra-op threads follow the CPUs Slurm gave the job (1 each: no cpus_per_task asked)
    assert all(r["toggles"]["backend"]["value"]["num_threads"] == 1 for r in records)
    assert (sweep / "report" / "summary.md").is_file()
    # the sweep's preparation ran as one Slurm job before the array: each cell's cold compile on an
    # empty cache, then every job started from the warm cache it filled
    prepared = read_prepare(sweep)
    assert prepared["launcher"] == "SlurmLauncher" and len(prepared["cells"]) == 2
    assert all(e["cold"]["status"] == "ok" and e["cold"]["cache"]["state"] == "cold" for e in prepared["cells"])
    assert all(r["measurement"]["prepared"] and r["measurement"]["process"] == "fresh" for r in records)
    assert [r["measurement"]["compile_cache"] for r in records] == ["warm", "warm"]


def test_one_failing_job_keeps_the_others(slurm_cluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "algo.lr=0.001,1e30", *SMOKE, "logger.mode=disabled", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode != 0
    by_lr = {read_result(sweep / str(i))["config"]["algo"]["lr"]: read_result(sweep / str(i)) for i in (0, 1)}
    assert by_lr[0.001]["status"] == "ok" and by_lr[0.001]["learning"]["final_return"] is not None
    assert by_lr[1e30]["status"] == "failed"
    assert "non-finite loss at update" in by_lr[1e30]["error"]
    assert "non-finite loss" in (sweep / "report" / "summary.md").read_text()


def test_a_job_its_node_refuses_leaves_a_failed_record_that_says_why(slurm_cluster, tmp_path: Path) -> None:
    # the pre-flight leaves the device to the node (a CPU login node launches GPU jobs); this node has none
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "device=cpu,cuda", *SMOKE, "logger.mode=disabled", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode != 0
    ok, refused = read_result(sweep / "0"), read_result(sweep / "1")
    assert ok["status"] == "ok"
    assert refused["status"] == "failed" and "no CUDA device is available" in refused["error"], refused
    assert refused["config"]["device"] == "cuda" and refused["seed"] == 0
    status = subprocess.run([sys.executable, "-m", "sweeps.status", str(sweep)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert "no CUDA device is available" in status.stdout, status.stdout
    assert "no CUDA device is available" in (sweep / "report" / "summary.md").read_text()


def _start_sweep(args: list[str]) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-m", "sweeps.train", "-m", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _wait_for(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.2)


def _running_job_id(sweep: Path) -> str | None:
    """The Slurm job id of the sweep's first job (submitit's folder: <id> or <array id>_<index>)."""
    folder = sweep / ".submitit"
    # submitit also keeps pickles named by a random hex id there ("845eb86b...pkl"): match job ids only
    names = sorted(p.name for p in folder.iterdir() if re.fullmatch(r"\d+(_\d+)?", p.name)) if folder.is_dir() else []
    return names[0].split("_")[0] if names else None


def _preempt_when_training(proc: subprocess.Popen[str], sweep: Path, algo: str) -> str:
    """Once the sweep's first job trains, send it Slurm's preemption signal (USR2); the sweep's output."""
    try:
        # the runner logs this line once its stop-signal handlers are in place
        log = sweep / "0" / "train.log"
        _wait_for(lambda: log.is_file() and f"training {algo} on" in log.read_text(), 120, "the job to start training")
        time.sleep(1.0)
        job_id = _running_job_id(sweep)
        assert job_id is not None
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)
        out, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    return out


def test_preempted_job_is_requeued_and_resumes_from_its_checkpoint(slurm_cluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    budget = 60_000
    proc = _start_sweep(["seed=0", f"total_env_steps={budget}", "progress=false", "eval_episodes=2",
                         "logger.mode=offline", "hydra/launcher=submitit_slurm",
                         # submitit counts a USR2 within 10 min of the time limit as a time-out
                         "hydra.launcher.timeout_min=60", "hydra.launcher.max_num_timeout=1",
                         f"hydra.sweep.dir={sweep}"])
    job_dir = sweep / "0"
    t_start = time.monotonic()
    out = _preempt_when_training(proc, sweep, "ppo")
    assert proc.returncode == 0, out[-3000:]
    record = read_result(job_dir)
    assert record["status"] == "ok"
    assert record["requeues"] == 1
    assert 0 < record["resumed_at_env_steps"][0] < budget  # resumed mid-run, not from scratch
    assert record["env_steps"] == -(-budget // (8 * 32)) * (8 * 32)  # the budget met, in whole iterations
    runs = sorted(job_dir.glob("wandb/offline-run-*"))
    assert len(runs) == 2  # the first attempt and the resumed one continue one W&B run id...
    assert len({r.name.rsplit("-", 1)[1] for r in runs}) == 1
    first, resumed = (read_wandb_run(r) for r in runs)
    # ...the first attempt's history was flushed before the requeue, the resumed one carries on
    first_steps = [h["train/env_steps"] for h in first["history"]]
    resumed_steps = [h["train/env_steps"] for h in resumed["history"]]
    assert first_steps and first_steps[-1] == record["resumed_at_env_steps"][0]
    assert resumed_steps[0] > first_steps[-1] and resumed_steps[-1] == record["env_steps"]
    assert resumed["summary"]["learning/final_return"] == record["learning"]["final_return"]
    print(f"preemption: job start to sweep end {time.monotonic() - t_start:.1f} s")


def test_cancelled_job_is_reported_within_bounded_time(slurm_cluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = _start_sweep(["total_env_steps=2000000", "progress=false", "logger.mode=disabled",
                         "hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"])
    try:
        _wait_for(lambda: _running_job_id(sweep) is not None, 120, "the job to be submitted")
        job_id = _running_job_id(sweep)
        time.sleep(1.0)
        t_cancel = time.monotonic()
        subprocess.run(["scancel", job_id], check=True, timeout=30)
        out, _ = proc.communicate(timeout=120)
        elapsed = time.monotonic() - t_cancel
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
    assert proc.returncode != 0
    assert "UncompletedJobError" in out or "cancel" in out.lower()
    assert elapsed < 90
    print(f"cancel reported after {elapsed:.1f} s")


def test_a_plugin_algorithm_is_preempted_requeued_and_resumed_like_a_built_in(slurm_cluster, tmp_path: Path) -> None:
    """The TD3 example from its own config dir: imported on the node by _target_, checkpointed, resumed."""
    sweep = tmp_path / "sweep"
    budget = 6_000
    proc = _start_sweep(["--config-dir", str(ROOT / "examples" / "td3" / "conf"), "algo=td3", "seed=0",
                         f"total_env_steps={budget}", "algo.learning_starts=500", "algo.hidden_sizes=[64,64]",
                         "progress=false", "eval_episodes=2", "logger.mode=offline",
                         "hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=60",
                         "hydra.launcher.max_num_timeout=1", f"hydra.sweep.dir={sweep}"])
    job_dir = sweep / "0"
    out = _preempt_when_training(proc, sweep, "td3")
    assert proc.returncode == 0, out[-3000:]
    record = read_result(job_dir)
    assert record["status"] == "ok" and record["algo"] == "td3"
    assert record["job"]["launcher"] == "SlurmLauncher"
    assert record["requeues"] == 1 and 0 < record["resumed_at_env_steps"][0] < budget
    assert record["env_steps"] == budget
    assert (sweep / "report" / "summary.md").is_file()


def test_seeds_per_job_groups_a_cells_seeds_into_one_slurm_task(slurm_cluster, tmp_path: Path) -> None:
    """3 seeds, 2 per job: a 2-task array; each seed's record in its own job folder, the status view
    shows every job under the task that trained it."""
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", *SMOKE, "prepare=false", "logger.mode=disabled", "seed=0,1,2", "seeds_per_job=2",
                      f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [read_result(sweep / str(i)) for i in range(3)]
    assert [r["status"] for r in records] == ["ok"] * 3 and [r["seed"] for r in records] == [0, 1, 2]
    assert records[0]["group"]["seeds"] == records[1]["group"]["seeds"] == [0, 1] and records[2].get("group") is None
    # seeds 0 and 1 trained in one Slurm task, seed 2 in another task of the same array
    assert records[0]["job"]["slurm_array_index"] == records[1]["job"]["slurm_array_index"]
    assert records[0]["job"]["slurm_array_index"] != records[2]["job"]["slurm_array_index"]
    (job_id,) = {r["job"]["slurm_job_id"] for r in records}
    assert len(sacct_states(job_id, tasks=2)) == 2
    status = subprocess.run([sys.executable, "-m", "sweeps.status", str(sweep)], cwd=ROOT, capture_output=True,
                            text=True, timeout=120)
    assert status.returncode == 0 and "3 ok" in status.stdout, status.stdout + status.stderr
