"""Chaos on the local Slurm cluster: each case ends with a record that says what happened, nothing else lost.

The sweeps are fire-and-forget (``hydra.launcher.wait=false``) and followed with ``sweeps.status``,
which also writes Slurm's verdict into the records of jobs that Slurm SIGKILLed before they could.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, run_train

from rlsweep.records import read_result

from .test_status import BASE, states, status, wait_status

pytestmark = pytest.mark.slurm

CLUSTER = ROOT / "slurm" / "local_cluster.sh"


def submit(sweep: Path, *args: str) -> str:
    """Submit a sweep without waiting; its Slurm array id."""
    proc = run_train(["-m", *BASE, "compile=none", "hydra.launcher.wait=false", *args, f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads((sweep / "rlsweep_jobs.json").read_text())["jobs"][0]["slurm_job_id"].split("_")[0]


def settle(sweep: Path) -> None:
    """``sweeps.status --settle``: Slurm's verdict into the records of the jobs it ended."""
    subprocess.run([sys.executable, "-m", "sweeps.status", str(sweep), "--settle"], cwd=ROOT, capture_output=True,
                   text=True, timeout=60)


def training(sweep: Path, num: int) -> bool:
    log = sweep / str(num) / "train.log"
    return log.is_file() and "training ppo on" in log.read_text()


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}")
        time.sleep(0.3)


def test_scancel_of_the_whole_array_leaves_cancelled_records_and_the_finished_job(slurm_cluster, tmp_path) -> None:
    sweep = tmp_path / "sweep"
    # job 0 finishes at once; jobs 1 and 2 train until cancelled
    array_id = submit(sweep, "total_env_steps=2048,400000,400000")
    wait_status(sweep, lambda s: states(s)[0] == "ok" and all(training(sweep, i) for i in (1, 2)), 180,
                "job 0 done, jobs 1 and 2 training")
    subprocess.run(["scancel", array_id], check=True, timeout=30)
    code, js, table = wait_status(sweep, lambda s: s["exit_code"] != 3, 120, "the cancel to settle")
    print(table)
    assert code == 1 and states(js) == ["ok", "cancelled", "cancelled"], table
    report = subprocess.run([sys.executable, "-m", "sweeps.report", str(sweep), "--no-plots"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
    assert report.stdout.count("status 'cancelled'") == 2  # Slurm's verdict, read by the report
    assert [read_result(sweep / str(i))["status"] for i in range(3)] == ["ok", "running", "running"]  # not written
    settle(sweep)  # a sweep that did not wait: the records get Slurm's verdict when asked to
    records = [read_result(sweep / str(i)) for i in range(3)]
    assert [r["status"] for r in records] == ["ok", "cancelled", "cancelled"]  # none stays running
    assert all(r["status_before"] == "running" and "CANCELLED" in r["error"] for r in records[1:])
    assert records[0]["env_steps"] == 2048  # the finished job is untouched


def test_a_job_over_its_memory_limit_is_recorded_failed_out_of_memory(slurm_cluster, tmp_path) -> None:
    sweep = tmp_path / "sweep"
    submit(sweep, "env.id=tests.slurm.chaos_envs:MemoryHogCartPole-v0,CartPole-v1", "total_env_steps=20000",
           "hydra.launcher.mem_gb=2")
    code, js, table = wait_status(sweep, lambda s: s["exit_code"] != 3, 240, "both jobs to end")
    print(table)
    assert code == 1 and states(js) == ["failed", "ok"], table
    assert "out of memory" in js["jobs"][0]["detail"]
    settle(sweep)
    hog = read_result(sweep / "0")
    assert hog["status"] == "failed" and "out of memory" in hog["error"] and hog["status_before"] == "running"
    assert read_result(sweep / "1")["status"] == "ok"  # the other job is unaffected


def _slurmd_pid(state_dir: Path) -> int:
    return int((state_dir / "run" / "slurmd.pid").read_text().split()[0])


def test_slurmd_killed_mid_job_and_restarted_leaves_the_jobs_running_to_the_end(slurm_cluster, tmp_path) -> None:
    sweep = tmp_path / "sweep"
    # a budget that outlasts the other job's start on a loaded machine (CI runs a second pytest worker)
    submit(sweep, "seed=0,1", "total_env_steps=200000")
    wait_until(lambda: training(sweep, 0) and training(sweep, 1), 180, "both jobs training")
    os.kill(_slurmd_pid(slurm_cluster.state_dir), signal.SIGKILL)
    try:
        time.sleep(3)
        _, js, during = status(sweep)
        assert states(js) == ["running", "running"], during  # slurmstepd keeps the jobs alive
    finally:  # the cluster serves the tests after this one, whatever this one found
        up = subprocess.run(["bash", str(CLUSTER), "up"], capture_output=True, text=True, timeout=180)
    assert up.returncode == 0, up.stderr[-2000:]
    code, js, table = wait_status(sweep, lambda s: s["exit_code"] != 3, 300, "both jobs to end")
    print(table)
    assert code == 0 and states(js) == ["ok", "ok"], table
    records = [read_result(sweep / str(i)) for i in (0, 1)]
    assert all(r["env_steps"] >= 200000 and r["requeues"] == 0 and not r["resumed_from"] for r in records)


def _usr2_when_training(sweep: Path, job_id: str, attempt: int) -> None:
    """Slurm's time-out warning (USR2, as at signal_delay_s before the limit) once ``attempt`` trains."""
    log = sweep / "0" / "train.log"
    wait_until(lambda: log.is_file() and log.read_text().count("training ppo on") >= attempt
               and (sweep / "0" / "checkpoint.pt").is_file(), 180, f"attempt {attempt} to train and checkpoint")
    time.sleep(1.5)  # past a periodic checkpoint of this attempt
    subprocess.run(["scancel", "--signal=USR2", job_id], check=True, timeout=30)


def test_a_job_timed_out_after_its_requeues_is_recorded_timed_out_and_resume_continues_it(slurm_cluster,
                                                                                         tmp_path) -> None:
    sweep = tmp_path / "sweep"
    # under timeout_min=10 submitit counts every USR2 as a time-out (its guaranteed walltime is 0)
    args = ["seed=0", "total_env_steps=60000", "checkpoint_interval_s=1", "hydra.launcher.max_num_timeout=1"]
    submit(sweep, *args)
    job_id = json.loads((sweep / "rlsweep_jobs.json").read_text())["jobs"][0]["slurm_job_id"]  # one job: no array
    _usr2_when_training(sweep, job_id, 1)  # time-out 1: checkpoint, requeue
    _, js, requeued = wait_status(sweep, lambda s: s["jobs"][0]["state"] == "requeued", 60, "the requeue")
    assert js["jobs"][0]["requeues"] == 1, requeued
    _usr2_when_training(sweep, job_id, 2)  # time-out 2: no requeue left
    code, js, table = wait_status(sweep, lambda s: s["exit_code"] != 3, 120, "the job to end")
    print(table)
    assert code == 1 and states(js) == ["timed_out"], table
    record = read_result(sweep / "0")
    assert record["status"] == "timed_out" and record["requeues"] == 1, record["error"]
    assert "after 1 requeue(s)" in record["error"] and "resume=true" in record["error"]
    stopped_at = js["jobs"][0]["env_steps"]
    assert 0 < stopped_at < 60000
    # resume=true (waiting this time): the job continues from its checkpoint
    proc = run_train(["-m", *BASE, "compile=none", *args, "resume=true", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(sweep / "0")
    assert record["status"] == "ok" and record["resumed_from"]["env_steps"] == stopped_at
    assert record["env_steps"] >= 60000
    assert status(sweep)[0] == 0
