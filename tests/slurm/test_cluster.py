"""Smoke tests: submitit jobs through the real local Slurm cluster.

Submitted functions come from the standard library: functions defined in a test module would not
unpickle inside the job unless that module were importable there.
"""

from __future__ import annotations

import operator
import os
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import submitit
from submitit.core.utils import UncompletedJobError

pytestmark = pytest.mark.slurm

# Generous bounds: sbatch-to-done is about 1 s on an idle local cluster; after a cancel,
# submitit polls sacct and then waits ~15 s for a result file that never comes.
RESULT_TIMEOUT_S = 60
CANCEL_BOUND_S = 60
# the cluster's 2 CPUs are shared with the other pytest worker's Slurm sweeps: a job may queue behind them
# (seen in CI: PENDING for over a minute), which is the queue's time, not what these tests measure
QUEUE_BOUND_S = 900


def _executor(folder: Path, partition: str, **params: Any) -> submitit.AutoExecutor:
    executor = submitit.AutoExecutor(folder=folder, cluster="slurm")
    # submitit asks for USR2 90 s before the limit and Slurm may send it up to 60 s early: with a
    # 2-minute limit a job could be told it timed out as it started (seen in CI under load)
    executor.update_parameters(slurm_partition=partition, timeout_min=10, cpus_per_task=1, **params)
    assert executor.cluster == "slurm"
    return executor


def _result_within(job: submitit.Job, timeout_s: float) -> Any:
    """job.result(), but fail instead of hanging when it does not return in time."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = job.result()
        except BaseException as exc:  # noqa: BLE001 -- re-raised in the test thread
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        pytest.fail(f"job {job.job_id}: result() did not return within {timeout_s} s")
    if "error" in box:
        raise box["error"]
    return box["value"]


def _wait_state(job: submitit.Job, state: str, timeout_s: float) -> None:
    """Slurm's accounting may report the final state a moment after the result file is there."""
    deadline = time.monotonic() + timeout_s
    seen = None
    while time.monotonic() < deadline:
        seen = job.get_info(mode="force").get("State")
        if seen == state:
            return
        time.sleep(0.5)
    pytest.fail(f"job {job.job_id}: state {seen!r}, not {state!r}, {timeout_s} s after its result")


def _wait_started(job: submitit.Job) -> None:
    """Wait while the job queues (no failure here: a job that never starts fails its test's next bound)."""
    deadline = time.monotonic() + QUEUE_BOUND_S
    while time.monotonic() < deadline and job.get_info(mode="force").get("State", "PENDING") == "PENDING":
        time.sleep(0.5)


def _wait_running(job: submitit.Job, timeout_s: float) -> None:
    _wait_started(job)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        state = job.get_info(mode="force").get("State", "")
        # RUNNING in Slurm and the submitit wrapper has started writing its log.
        if state == "RUNNING" and job.paths.stdout.exists():
            return
        time.sleep(0.2)
    pytest.fail(f"job {job.job_id} not RUNNING after {timeout_s} s (state {job.state})")


def test_submit_returns_result(slurm_cluster, tmp_path):
    job = _executor(tmp_path, slurm_cluster.partition).submit(operator.add, 2, 3)
    try:
        _wait_started(job)
        assert _result_within(job, RESULT_TIMEOUT_S) == 5
    except BaseException:
        job.cancel(check=False)
        raise
    # no cancel on success: the result file exists before the job's process has exited, and a
    # cancel in that window turned the finished job CANCELLED (seen in CI under load)
    _wait_state(job, "COMPLETED", 30)


def test_setup_lines_export_env(slurm_cluster, tmp_path):
    executor = _executor(
        tmp_path, slurm_cluster.partition, slurm_setup=["export RLSWEEP_SETUP_PROBE=ok"]
    )
    job = executor.submit(os.getenv, "RLSWEEP_SETUP_PROBE")
    try:
        _wait_started(job)
        assert _result_within(job, RESULT_TIMEOUT_S) == "ok"
    finally:
        job.cancel(check=False)


def test_cancelled_job_raises_uncompleted(slurm_cluster, tmp_path, record_property):
    job = _executor(tmp_path, slurm_cluster.partition).submit(time.sleep, 300)
    try:
        _wait_running(job, 30)
        start = time.monotonic()
        job.cancel()
        with pytest.raises(UncompletedJobError):
            _result_within(job, CANCEL_BOUND_S + 5)
        elapsed = time.monotonic() - start
    finally:
        job.cancel(check=False)
    record_property("cancel_to_error_s", round(elapsed, 1))
    print(f"cancel -> UncompletedJobError in {elapsed:.1f} s")
    assert elapsed < CANCEL_BOUND_S
    assert job.get_info(mode="force")["State"].startswith("CANCELLED")
