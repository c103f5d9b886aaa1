"""Fire-and-forget Slurm sweeps and ``python -m sweeps.status`` against the local cluster."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import ROOT, run_train

from rlsweep.records import read_result

pytestmark = pytest.mark.slurm

BASE = ["prepare=false", "experiment=smoke", "progress=false", "logger.mode=disabled", "hydra/launcher=slurm_cpu",
        "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=null", "hydra.launcher.timeout_min=10",
        "hydra.launcher.signal_delay_s=30"]


def status(sweep: Path) -> tuple[int, dict, str]:
    """``sweeps.status`` of the sweep: exit status, its JSON, and its table."""
    js = subprocess.run([sys.executable, "-m", "sweeps.status", str(sweep), "--json"], cwd=ROOT,
                        capture_output=True, text=True, timeout=60)
    table = subprocess.run([sys.executable, "-m", "sweeps.status", str(sweep)], cwd=ROOT,
                           capture_output=True, text=True, timeout=60)
    return js.returncode, json.loads(js.stdout), table.stdout


def wait_status(sweep: Path, predicate, timeout_s: float, what: str) -> tuple[int, dict, str]:
    deadline = time.monotonic() + timeout_s
    while True:
        got = status(sweep)
        if predicate(got[1]):
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what}; last status:\n{got[2]}")
        time.sleep(0.5)


def states(js: dict) -> list[str]:
    return [j["state"] for j in js["jobs"]]


def test_wait_false_submits_returns_and_status_follows_the_jobs_to_the_end(slurm_cluster, tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    t0 = time.monotonic()
    # one task at a time: the second stays pending while the first runs
    proc = run_train(["-m", "seed=0,1", "total_env_steps=40000", "checkpoint_interval_s=1", *BASE,
                      "hydra.launcher.array_parallelism=1", "hydra.launcher.wait=false", f"hydra.sweep.dir={sweep}"])
    returned_s = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-3000:]
    manifest = json.loads((sweep / "rlsweep_jobs.json").read_text())
    array_id = manifest["jobs"][0]["slurm_job_id"].split("_")[0]
    assert [j["slurm_job_id"] for j in manifest["jobs"]] == [f"{array_id}_0", f"{array_id}_1"]
    assert f"Slurm array {array_id}" in proc.stdout
    assert f"python -m sweeps.status {sweep}" in proc.stdout and f"python -m sweeps.report {sweep}" in proc.stdout
    assert not (sweep / "report").exists()  # no report of a sweep that has not run
    # moment 1: just submitted -- nothing finished, the second job waits for the first
    code, js, first = status(sweep)
    assert code == 3, first
    assert states(js)[1] == "pending" and "ok" not in states(js), first
    # moment 2: the first job trains (its checkpoints give the progress), the second still pending
    code, js, second = wait_status(sweep, lambda s: s["jobs"][0]["env_steps"], 120, "job 0 to checkpoint")
    assert code == 3 and states(js) == ["running", "pending"], second
    assert 0 < js["jobs"][0]["env_steps"] < 40000 and "/40,000 env steps" in js["jobs"][0]["detail"]
    # moment 3: both done
    code, js, third = wait_status(sweep, lambda s: s["exit_code"] != 3, 300, "the sweep to finish")
    assert code == 0 and states(js) == ["ok", "ok"], third
    assert all(read_result(sweep / str(i))["job"]["slurm_job_id"] == array_id for i in (0, 1))
    print(f"returned after {returned_s:.1f} s\n--- just submitted\n{first}\n--- training\n{second}\n--- done\n{third}")
    report = subprocess.run([sys.executable, "-m", "sweeps.report", str(sweep), "--no-plots"], cwd=ROOT,
                            capture_output=True, text=True, timeout=300)
    assert report.returncode == 0, report.stderr
