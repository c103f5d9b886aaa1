"""``python -m sweeps.status``: every job of a sweep from its records and Slurm's accounting (synthetic sweeps)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import CONF, ROOT
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from rlsweep import status as st
from rlsweep.config import register_configs
from rlsweep.launchers import own_nodes
from rlsweep.records import CHECKPOINT_FILE, checkpoint_head


def _record(num: int, status: str, *, error: str | None = None, env_steps: int = 0, requeues: int = 0,
            slurm: str | None = "70", host: str = "node7", pid: int = 1) -> dict:
    return {"status": status, "error": error, "overrides": [f"seed={num}"], "env_steps": env_steps,
            "requeues": requeues, "config": {"total_env_steps": 4096, "seed": num},
            "job": {"num": num, "pid": pid, "hostname": host, "slurm_job_id": slurm,
                    "slurm_array_index": str(num) if slurm else None}}


def _sweep(root: Path, records: dict[int, dict | None], n_jobs: int, array: str = "70") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    st.write_manifest(root, [(i, [f"seed={i}"], f"{array}_{i}") for i in range(n_jobs)], "SlurmLauncher")
    for num, record in records.items():
        (root / str(num) / ".hydra").mkdir(parents=True)
        if record is not None:
            (root / str(num) / "result.json").write_text(json.dumps(record))
    return root


def _checkpoint(folder: Path, env_steps: int) -> None:
    header = {"sha256": "0" * 64, "bytes": 3, "env_steps": env_steps, "attempt": 1}
    (folder / CHECKPOINT_FILE).write_bytes(checkpoint_head(header) + b"xyz")


def _fake_sacct(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, output: str) -> Path:
    """A ``sacct`` on PATH that prints ``output`` and logs its arguments (the real one needs a cluster)."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    (tmp_path / "sacct.out").write_text(output)
    script = bindir / "sacct"
    script.write_text(f'#!/bin/sh\necho "$@" >> {tmp_path}/sacct.args\ncat {tmp_path}/sacct.out\n')
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    return tmp_path / "sacct.args"


SACCT = """70_0|COMPLETED|0:0|None
70_1|RUNNING|0:0|None
70_2|REQUEUED|0:0|None
70_2|PENDING|0:0|BeginTime
70_3|CANCELLED by 0|0:15|None
70_4|TIMEOUT|0:0|TimeLimit
70_5|OUT_OF_MEMORY|0:125|None
70_6|COMPLETED|0:0|None
70_7|CANCELLED by 0|0:0|None
70_[8-9%2]|PENDING|0:0|JobArrayTaskLimit
"""


def test_every_state_of_a_slurm_sweep_comes_from_its_records_and_sacct(tmp_path, monkeypatch) -> None:
    sweep = _sweep(tmp_path / "sweep", {
        0: _record(0, "ok", env_steps=4096),
        1: _record(1, "running"),
        2: _record(2, "interrupted", error="preempted: checkpoint written, requeued"),
        3: _record(3, "running"),  # SIGKILLed by scancel before it wrote its final record
        4: _record(4, "interrupted", error="preempted: checkpoint written, requeued", requeues=2),
        5: _record(5, "running"),  # killed for its memory
        6: _record(6, "failed", error="Traceback ...\nFloatingPointError: non-finite loss at update 3"),
        7: None,  # cancelled before it started: a folder, no record
    }, n_jobs=10)
    _checkpoint(sweep / "1", 1024)
    _checkpoint(sweep / "4", 3072)
    args = _fake_sacct(tmp_path, monkeypatch, SACCT)
    status = st.sweep_status(sweep)
    by = {j.num: j for j in status.jobs}
    assert args.read_text().split()[-2:] == ["-o", "JobID,State,ExitCode,Reason"] and "-D" in args.read_text()
    assert [by[i].state for i in range(10)] == [
        "ok", "running", "requeued", "cancelled", "timed_out", "failed", "failed", "cancelled", "pending", "pending"]
    assert by[1].detail == "1,024/4,096 env steps (last checkpoint)" and by[1].env_steps == 1024
    assert by[2].requeues == 1  # one earlier attempt in sacct -D
    assert by[4].requeues == 2 and "after 2 requeue(s)" in by[4].detail and by[4].env_steps == 3072
    assert "out of memory" in by[5].detail
    assert by[6].detail == "FloatingPointError: non-finite loss at update 3"
    assert "before it started" in by[7].detail
    assert by[8].slurm_job_id == "70_8" and by[9].slurm_state == "PENDING"  # the array's unsplit line
    assert status.exit_code() == st.EXIT_UNFINISHED
    text = st.render(status)
    assert "2 pending, 1 running, 1 requeued, 1 ok, 2 failed, 2 cancelled, 1 timed_out" in text


def test_exit_status_says_unfinished_failed_or_all_ok(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")  # no sacct here: records only
    ok = _sweep(tmp_path / "ok", {0: _record(0, "ok"), 1: _record(1, "ok")}, n_jobs=2)
    assert st.main([str(ok)]) == st.EXIT_OK
    bad = _sweep(tmp_path / "bad", {0: _record(0, "ok"), 1: _record(1, "failed", error="boom")}, n_jobs=2)
    assert st.main([str(bad)]) == st.EXIT_FAILED
    waiting = _sweep(tmp_path / "waiting", {0: _record(0, "ok")}, n_jobs=2)
    assert st.main([str(waiting)]) == st.EXIT_UNFINISHED
    assert st.main([str(tmp_path / "nope")]) == st.EXIT_BAD_INPUT
    (tmp_path / "empty").mkdir()
    assert st.main([str(tmp_path / "empty")]) == st.EXIT_BAD_INPUT


def test_without_sacct_a_stale_running_record_of_this_machine_is_a_killed_job(tmp_path, monkeypatch, capsys) -> None:
    import socket

    monkeypatch.setenv("PATH", "/nonexistent")
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    sweep = _sweep(tmp_path / "s", {0: _record(0, "running", host=socket.gethostname(), pid=dead.pid),
                                    1: _record(1, "running", host=socket.gethostname(), pid=os.getppid())},
                   n_jobs=2)
    assert st.main([str(sweep)]) == st.EXIT_UNFINISHED
    out = capsys.readouterr().out
    assert "sacct not found" in out
    by = {j.num: j for j in st.sweep_status(sweep).jobs}
    assert by[0].state == "failed" and "killed" in by[0].detail
    assert by[1].state == "running"  # its process is alive


def test_without_a_manifest_the_jobs_come_from_multirun_yaml(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sweep = tmp_path / "sweep"
    (sweep / "1").mkdir(parents=True)
    (sweep / "multirun.yaml").write_text(json.dumps({"hydra": {
        "sweeper": {"_target_": "hydra._internal.core_plugins.basic_sweeper.BasicSweeper", "params": None},
        "overrides": {"task": ["compile=none,default", "seed=0,1"]}}}))
    (sweep / "1" / "result.json").write_text(json.dumps(_record(1, "ok", slurm=None)))
    status = st.sweep_status(sweep)
    assert status.source == "multirun.yaml"
    assert [(j.num, j.overrides, j.state) for j in status.jobs] == [
        (0, ["compile=none", "seed=0"], "pending"), (1, ["compile=none", "seed=1"], "ok"),
        (2, ["compile=default", "seed=0"], "pending"), (3, ["compile=default", "seed=1"], "pending")]


def test_a_thousand_job_sweep_shows_in_under_five_seconds(tmp_path) -> None:
    n = 1000
    sweep = _sweep(tmp_path / "big", {}, n_jobs=n)
    for i in range(n):
        folder = sweep / str(i)
        (folder / ".hydra").mkdir(parents=True)
        (folder / "wandb" / "offline-run-x" / "files").mkdir(parents=True)  # never walked into
        record = {**_record(i, "ok" if i % 3 else "running"), "padding": "x" * 8000}  # a real record's size
        (folder / "result.json").write_text(json.dumps(record))
        if not i % 3:
            _checkpoint(folder, 512)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sweeps.status", str(sweep), "--no-slurm"], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    elapsed = time.perf_counter() - t0
    assert proc.returncode == st.EXIT_UNFINISHED, proc.stderr
    assert f"{n} job(s): 334 running, 666 ok" in proc.stdout
    assert elapsed < 5, f"{elapsed:.2f} s"


def test_the_slurm_presets_take_wait_false_and_use_rlsweeps_slurm_launcher() -> None:
    register_configs()
    for preset in ("submitit_slurm", "slurm_cpu", "slurm_gpu"):
        GlobalHydra.instance().clear()
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            cfg = compose(config_name="config", overrides=own_nodes([f"hydra/launcher={preset}", "hydra.launcher.wait=false"]),
                          return_hydra_config=True)
        assert cfg.hydra.launcher._target_ == "hydra_plugins.rlsweep_launcher.rlsweep_launcher.SlurmLauncher"
        assert cfg.hydra.launcher.wait is False
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=["hydra/launcher=slurm_cpu"], return_hydra_config=True)
    assert cfg.hydra.launcher.wait is True  # the plugin's behaviour unless asked


def test_records_the_jobs_wrote_or_status_settled_keep_their_state_without_sacct(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    sweep = _sweep(tmp_path / "s", {
        0: {**_record(0, "timed_out", requeues=3), "error": "timed out after 3 requeue(s) (...): resume=true ..."},
        1: {**_record(1, "cancelled"), "error": "cancelled (scancel) (Slurm job 70_1: CANCELLED; ...)"}}, n_jobs=2)
    _checkpoint(sweep / "0", 2048)
    by = {j.num: j for j in st.sweep_status(sweep).jobs}
    assert (by[0].state, by[0].requeues, by[0].env_steps) == ("timed_out", 3, 2048)
    assert by[1].state == "cancelled"


def test_a_node_failure_and_a_memory_kill_seen_in_submitits_log_are_failures_with_slurms_reason(
        tmp_path, monkeypatch) -> None:
    sweep = _sweep(tmp_path / "s", {0: _record(0, "running"), 1: _record(1, "running")}, n_jobs=2)
    log = sweep / ".submitit" / "70_1" / "70_1_0_log.err"
    log.parent.mkdir(parents=True)
    log.write_text("slurmstepd-vm: error: StepId=71.0 exceeded memory limit (1175502848 > 1073741824), being killed\n")
    _fake_sacct(tmp_path, monkeypatch, "70_0|NODE_FAIL|0:0|None\n70_1|FAILED|9:0|None\n")
    status = st.sweep_status(sweep)
    assert [(j.state, j.detail.split(":")[0]) for j in status.jobs] == [("failed", "node failure (Slurm"),
                                                                       ("failed", "out of memory")]
    assert [j.num for j in st.settle_records(status)] == [0, 1]
    record = json.loads((sweep / "1" / "result.json").read_text())
    assert record["status"] == "failed" and record["status_before"] == "running" and "out of memory" in record["error"]


def test_status_and_the_report_read_slurms_verdict_without_writing_it_and_settle_writes_it(
        tmp_path, monkeypatch, capsys) -> None:
    from rlsweep.report import main as report_main

    sweep = _sweep(tmp_path / "s", {0: _record(0, "running"), 1: _record(1, "ok")}, n_jobs=2)
    _fake_sacct(tmp_path, monkeypatch, "70_0|CANCELLED by 0|0:0|None\n70_1|COMPLETED|0:0|None\n")
    before = (sweep / "0" / "result.json").read_bytes()
    assert st.main([str(sweep)]) == st.EXIT_FAILED
    assert "cancelled" in capsys.readouterr().out
    report_main([str(sweep), "--no-plots", "--no-wandb"])
    assert "status 'cancelled'" in capsys.readouterr().out  # the report shows Slurm's verdict ...
    assert (sweep / "0" / "result.json").read_bytes() == before  # ... and neither command wrote it
    assert st.main([str(sweep), "--settle"]) == st.EXIT_FAILED
    record = json.loads((sweep / "0" / "result.json").read_text())
    assert record["status"] == "cancelled" and record["status_before"] == "running"


def test_a_started_job_that_sacct_still_lists_pending_is_running_not_requeued(tmp_path, monkeypatch) -> None:
    # slurmdbd records a task's start a moment after the task starts: under load sacct says PENDING
    # while the job's record already says running; a stale record of an earlier submission does not count
    sweep = _sweep(tmp_path / "sweep", {0: _record(0, "running"), 1: _record(1, "running", slurm="69")}, n_jobs=2)
    _fake_sacct(tmp_path, monkeypatch, "70_0|PENDING|0:0|None\n70_1|PENDING|0:0|None\n")
    assert [j.state for j in st.sweep_status(sweep).jobs] == ["running", "requeued"]


def test_parse_sacct_expands_pending_arrays_and_counts_requeues() -> None:
    states = st.parse_sacct("5_[0,2-4:2%1]|PENDING|0:0|JobArrayTaskLimit\n5_1|REQUEUED|0:0|None\n"
                            "5_1|REQUEUED|0:0|None\n5_1|RUNNING|0:0|None\n")
    assert sorted(states) == ["5_0", "5_1", "5_2", "5_4"]
    assert states["5_1"].state == "RUNNING" and states["5_1"].requeues == 2
    # sacct lists the started task before the array's unsplit rest: neither a requeue nor pending
    states = st.parse_sacct("51_0|RUNNING|0:0|None\n51_[0-1%1]|PENDING|0:0|None\n")
    assert (states["51_0"].state, states["51_0"].requeues, states["51_1"].state) == ("RUNNING", 0, "PENDING")
