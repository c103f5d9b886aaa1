"""Faults a sweep survives, each injected for real through `python -m sweeps.train`.

A job that raises, a job whose loss goes non-finite, a job killed with SIGKILL, a run stopped with
SIGINT/SIGTERM, and W&B that cannot write: the other jobs' records are complete, the casualty's
record (and the sweep's report) says what happened, and the command exits non-zero.
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
from fault_envs import CRASH_MESSAGE
from helpers import COMMON, ROOT, TINY, read_wandb_run, run_train

from rlsweep.records import read_result

# the stop tests send signals to jobs while they train: timing-sensitive, so CI runs them alone (marker serial)
pytestmark = pytest.mark.serial

FAST = [*TINY["ppo"], *COMMON]
#: the env ids of tests/fault_envs.py, as a job names them
CRASHING = "tests.fault_envs:CrashingCartPole-v0"
NAN_REWARD = "tests.fault_envs:NaNRewardCartPole-v0"


def _complete(record: dict) -> None:
    """What an ok record of a finished job holds."""
    assert record["status"] == "ok" and record["error"] is None
    assert record["env_steps"] == record["config"]["total_env_steps"] and record["updates"] > 0
    assert record["timings"]["update"]["count"] > 0 and record["learning"]["final_return"] is not None
    assert record["finished_at"] and record["fingerprint"]["torch"]


def _report(sweep: Path) -> tuple[str, dict]:
    return (sweep / "report" / "summary.md").read_text(), json.loads((sweep / "report" / "report.json").read_text())


def _wait_for(predicate, timeout: float, what: str, proc: subprocess.Popen | None = None):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        if proc is not None and proc.poll() is not None:
            _, err = proc.communicate()
            pytest.fail(f"the command ended (rc={proc.returncode}) before {what}:\n{err[-3000:]}")
        time.sleep(0.05)
    pytest.fail(f"timed out waiting for {what}")


def _record_with_status(folder: Path, *statuses: str) -> dict | None:
    try:
        record = read_result(folder)
    except (OSError, ValueError):
        return None
    return record if record.get("status") in statuses else None


def _popen_train(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sweeps.train", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_a_crashing_and_a_diverging_job_do_not_take_the_sweep_down(tmp_path: Path) -> None:
    """Basic launcher, 3 jobs: the env of job 0 raises mid-training, job 1's rewards turn NaN."""
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", *FAST, f"env.id={CRASHING},{NAN_REWARD},CartPole-v1", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode != 0 and sweep.is_dir(), proc.stderr[-3000:]
    crashed, diverged, fine = (read_result(sweep / str(i)) for i in range(3))
    assert crashed["status"] == "failed" and CRASH_MESSAGE in crashed["error"]
    assert "Traceback" in crashed["error"]  # the record keeps the whole traceback
    assert diverged["status"] == "failed" and "NonFiniteLossError: non-finite loss at update" in diverged["error"]
    assert diverged.get("learning") is None  # stopped, not a silently diverged "result"
    _complete(fine)  # the job after the casualties ran, in full
    summary, _ = _report(sweep)
    assert CRASH_MESSAGE in summary and "non-finite loss at update" in summary
    assert "1 ok" in summary and "2 failed" in summary


@pytest.mark.slow  # a real sweep / measurement (tens of seconds): the slow tier
def test_a_job_killed_with_sigkill_is_reported_and_the_others_finish(tmp_path: Path) -> None:
    """submitit_local: job 0 is SIGKILLed while job 1 still trains; the sweep waits for job 1, then reports."""
    sweep = tmp_path / "sweep"
    proc = _popen_train(["-m", *FAST, "total_env_steps=400000,8192", "hydra/launcher=submitit_local",
                         "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"])
    try:
        victim = _wait_for(lambda: _record_with_status(sweep / "0", "running"), 180, "job 0 to start", proc)
        _wait_for(lambda: "training" in _read(sweep / "0" / "train.log"), 120, "job 0 to train", proc)
        os.kill(victim["job"]["pid"], signal.SIGKILL)
        other = _record_with_status(sweep / "1", "ok")
        _, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert other is None, "job 1 had finished before the kill: the test no longer covers a sweep with live jobs"
    assert proc.returncode != 0
    # one line that names the job, not a traceback with submitit's log dump
    assert "Traceback" not in err and "submitit INFO" not in err, err[-3000:]
    died = [line for line in err.splitlines() if "ended without a result" in line]
    assert len(died) == 1 and died[0].startswith("rlsweep: job 0 (") and str(sweep / "0") in died[0], err[-3000:]
    _complete(read_result(sweep / "1"))
    killed = read_result(sweep / "0")
    assert killed["status"] == "failed" and killed["error"].startswith("killed:")
    assert f"pid {victim['job']['pid']}" in killed["error"]
    summary, _ = _report(sweep)
    assert "killed: the job's process" in summary and "1 ok" in summary and "1 failed" in summary


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


@pytest.mark.parametrize(("sig", "rc"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_run_writes_its_checkpoint_and_an_interrupted_record(tmp_path: Path, sig: int, rc: int) -> None:
    out = tmp_path / "run"
    proc = _popen_train([*FAST, "total_env_steps=200000", f"hydra.run.dir={out}"])
    try:
        _wait_for(lambda: "training" in _read(out / "train.log"), 120, "training to start", proc)
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == rc
    record = read_result(out)
    assert record["status"] == "interrupted"
    assert record["error"] == f"interrupted by {signal.Signals(sig).name}; checkpoint written"
    assert Path(record["checkpoint"]) == out / "checkpoint.pt" and (out / "checkpoint.pt").stat().st_size > 0
    assert "Traceback" not in err
    assert f"stopped by {signal.Signals(sig).name}" in err and f"resume=true hydra.run.dir={out}" in err


# ------------------------------------------------------------------------- W&B cannot write


def _mount(*args: str) -> bool:
    return subprocess.run(["mount", *args], capture_output=True, check=False).returncode == 0


@pytest.fixture
def wandb_blocker(request: pytest.FixtureRequest, tmp_path: Path):
    """Make ``<job dir>/wandb`` unusable before the job starts; yields the job dir."""
    out = tmp_path / "run"
    out.mkdir()
    target = out / "wandb"
    how = request.param
    mounted = False
    if how == "file":
        target.write_text("a file where W&B wants its folder\n")
    else:
        target.mkdir()
        if how == "full-tmpfs":
            mounted = _mount("-t", "tmpfs", "-o", "size=8k", "tmpfs", str(target))
        elif how == "read-only":
            mounted = _mount("--bind", str(target), str(target)) and (
                _mount("-o", "remount,bind,ro", str(target)) or not _mount_undo(target))
        if not mounted:
            pytest.skip(f"cannot mount here (needs root and mount permission): {how}")
    try:
        yield out
    finally:
        if mounted:
            _mount_undo(target)


def _mount_undo(target: Path) -> bool:
    return subprocess.run(["umount", str(target)], capture_output=True, check=False).returncode == 0


@pytest.mark.parametrize("wandb_blocker", ["file", "read-only", "full-tmpfs"], indirect=True)
def test_wandb_that_cannot_write_never_stops_training(wandb_blocker: Path) -> None:
    out = wandb_blocker
    proc = run_train([*FAST, "logger.mode=offline", f"hydra.run.dir={out}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(out)
    _complete(record)
    errors = record["logging"]["errors"]
    assert errors and all(e.startswith("wandb ") for e in errors), errors
    assert "W&B logging stopped" in proc.stdout + proc.stderr  # said in the job's log too


def test_a_healthy_offline_run_records_no_logging_error(tmp_path: Path) -> None:
    """The converse of the test above: the completeness check of the offline run file passes."""
    out = tmp_path / "run"
    proc = run_train([*FAST, "logger.mode=offline", f"hydra.run.dir={out}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(out)
    assert record["logging"]["errors"] == []
    run = read_wandb_run(record["logging"]["wandb_run_dir"])
    assert run["run_id"] == record["logging"]["wandb_run_id"] and run["exit_code"] == 0


# ------------------------------------------------------------- stopping a submitit_local sweep


def _popen_group(args: list[str]) -> subprocess.Popen:
    """The command in a process group of its own, as a terminal runs it (Ctrl-C reaches the whole group)."""
    # SIGINT as a terminal leaves it: a shell starts background commands (CI's, say) with SIGINT ignored,
    # and an ignored SIGINT is inherited, which would make Ctrl-C do nothing here
    return subprocess.Popen([sys.executable, "-m", "sweeps.train", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


#: long enough that both jobs still train when the stop comes, short enough to resume in ~20 s
BIG = 40960


@pytest.mark.slow  # two local job processes start, train, stop and resume (~1 min)
@pytest.mark.parametrize(("how", "rc"), [("SIGTERM-to-the-launcher", 143), ("SIGINT-to-the-launcher", 130),
                                          ("Ctrl-C-in-a-terminal", 130)])
def test_a_stopped_submitit_local_sweep_checkpoints_every_running_job(tmp_path: Path, how: str, rc: int) -> None:
    """submitit_local, 2 jobs training at once; the stop reaches the launcher only, or (Ctrl-C in a terminal)
    every process of the group, submitit's controllers included: each job writes its checkpoint and an
    `interrupted` record; the same command with resume=true continues both from their checkpoints."""
    sweep = tmp_path / "sweep"
    command = ["-m", *FAST, f"total_env_steps={BIG}", "seed=0,1", "hydra/launcher=submitit_local",
               "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"]
    proc = _popen_group(command)
    try:
        for i in (0, 1):
            _wait_for(lambda i=i: "training" in _read(sweep / str(i) / "train.log"), 180, f"job {i} to train", proc)
        if how == "Ctrl-C-in-a-terminal":
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGTERM if how.startswith("SIGTERM") else signal.SIGINT)
        _, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == rc, err[-3000:]
    assert "Traceback" not in err
    name = "SIGTERM" if rc == 143 else "SIGINT"
    assert f"stopped by {name}" in err and f"resume=true hydra.sweep.dir={sweep}" in err
    stopped = [read_result(sweep / str(i)) for i in (0, 1)]
    for i, record in enumerate(stopped):
        assert record["status"] == "interrupted", record["error"]
        assert record["error"].endswith("; checkpoint written") and record["job"]["launcher"] == "LocalLauncher"
        assert (sweep / str(i) / "checkpoint.pt").stat().st_size > 0
    summary, _ = _report(sweep)
    assert "2 failed (2 interrupted)" in summary
    if how != "Ctrl-C-in-a-terminal":
        return
    resumed = run_train([*command, "resume=true"], timeout=900)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    for i in (0, 1):
        record = read_result(sweep / str(i))
        assert record["status"] == "ok" and record["env_steps"] == BIG
        assert record["resumed_from"]["env_steps"] == record["resumed_at_env_steps"][0] > 0
        assert record["checkpoint_rejected"] is None and record["requeues"] == 1
