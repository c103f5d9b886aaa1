"""The record store: no torch, one walk of a sweep's folders, one expansion of its jobs, one resume policy."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

from rlsweep import records


def test_the_record_store_imports_no_torch() -> None:
    code = "import sys, rlsweep.records, rlsweep.status; assert 'torch' not in sys.modules, 'torch imported'"
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr


def test_the_walk_finds_job_folders_and_skips_what_holds_no_job(tmp_path: Path) -> None:
    records.write_result(tmp_path / "0", {"status": "ok"})
    (tmp_path / "1" / ".hydra").mkdir(parents=True)  # started, no record yet
    records.write_result(tmp_path / "a" / "b", {"status": "failed"})  # a nested layout
    records.write_result(tmp_path / "0" / "inner", {"status": "ok"})  # below a job: not a job
    for skipped in (".submitit/7", "report", "wandb/run", ".other"):
        records.write_result(tmp_path / skipped, {"status": "ok"})
    (tmp_path / "2").mkdir()
    (tmp_path / "2" / records.RESULT_FILE).write_text("{half")  # unreadable: a job folder, no record
    assert records.job_folders(tmp_path) == [tmp_path / n for n in ("0", "1", "2", "a/b")]
    assert [(f.name, r["status"]) for f, r in records.walk_records(tmp_path)] == [("0", "ok"), ("b", "failed")]


def test_a_jobs_number_is_its_records_else_its_folders_when_that_is_a_number(tmp_path: Path) -> None:
    assert records.job_num(tmp_path / "12") == 12
    assert records.job_num(tmp_path / "12", {"job": {"num": 3}}) == 3
    assert records.job_num(tmp_path / "12", {"job": {"num": True}}) == 12  # a bool is no number
    for name in ("a", "seed=1", "1_0", "²", "①"):  # "²".isdigit() is True, int("²") raises
        assert records.job_num(tmp_path / name) is None, name
    from rlsweep.status import sweep_status

    for name in ("0", "²"):
        records.write_result(tmp_path / name, {"status": "ok"})
    status = sweep_status(tmp_path, use_slurm=False)  # raised ValueError on "²"
    assert [job.num for job in status.jobs] == [0]
    assert f"{tmp_path / '²'}: a job folder without a job number (not shown)" in status.notes


def test_liveness_tells_this_machine_from_another() -> None:
    import socket

    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        here = {"job": {"pid": child.pid, "hostname": socket.gethostname()}}
        assert records.job_alive(here) is True
        assert records.job_alive({"job": {"pid": child.pid, "hostname": "elsewhere"}}) is None
        assert records.job_alive({"job": {"pid": os.getpid(), "hostname": socket.gethostname()}}) is False
    finally:
        child.kill()
        child.wait()
    assert records.job_alive(here) is False


def test_the_resume_decision() -> None:
    config = {"seed": 1, "algo": {"lr": 0.1}, "progress": False}
    done = {"status": "ok", "config": {**config, "progress": True}}  # a volatile key differs: the same job
    assert records.resume_decision(None, lambda: config, True) == records.RUN
    assert records.resume_decision({"status": "failed"}, lambda: config, False) == records.RUN
    assert records.resume_decision(done, lambda: pytest.fail("compared without resume"), False) == records.NEEDS_RESUME
    assert records.resume_decision(done, lambda: config, True) == records.KEEP
    assert records.resume_decision(done, lambda: {**config, "seed": 2}, True) == records.OTHER_CONFIG


def test_the_resume_guide_names_every_key_a_resumed_job_ignores() -> None:
    text = " ".join((ROOT / "docs" / "guide" / "resume.md").read_text().split())
    said = text.split("(ignoring ", 1)[1].split(")", 1)[0]
    named = {word.strip(" `,").removesuffix(".*") for word in said.replace(" and ", ",").split(",")}
    assert named == set(records.RECORD_VOLATILE), said


@pytest.mark.parametrize("arguments", [
    ["compile=none,default", "seed=0,1"],
    ["+algo.lr=1e-3,3e-4", "twin_modules=true", "seed=range(3)", "twin_modules=false,true"],
    ["env.id='CartPole-v1'", "algo=ppo,dqn"],
])
def test_the_expansion_is_hydras_basic_sweeper(arguments: list[str]) -> None:
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    parsed = records.parse_overrides(arguments)
    hydras = [list(job) for batch in BasicSweeper.split_arguments(parsed, max_batch_size=None) for job in batch]
    assert records.expand_sweep(records.sweep_lists(arguments)) == hydras


def test_an_interval_is_refused_with_what_the_basic_sweeper_takes() -> None:
    with pytest.raises(ValueError, match=r"^seed=interval\(0,1\): the basic sweeper sweeps lists of values .*optuna"):
        records.sweep_lists(["algo=ppo", "seed=interval(0,1)"])


def test_multirun_yaml_gives_the_sweepers_arguments(tmp_path: Path) -> None:
    notes: list[str] = []
    assert records.multirun_sweep(tmp_path, notes) is None and notes == []
    cfg = {"hydra": {"sweeper": {"_target_": "x.BasicSweeper", "params": {"seed": "0,1"}},
                     "overrides": {"task": ["compile=none"]}}}
    (tmp_path / records.MULTIRUN_FILE).write_text(json.dumps(cfg))
    read, lists = records.multirun_sweep(tmp_path, notes)
    assert read == cfg and list(lists.items()) == [("seed", ["seed=0", "seed=1"]), ("compile", ["compile=none"])]
    cfg["hydra"]["sweeper"]["_target_"] = "x.OptunaSweeper"
    (tmp_path / records.MULTIRUN_FILE).write_text(json.dumps(cfg))
    assert records.multirun_sweep(tmp_path, notes) is None
    (tmp_path / records.MULTIRUN_FILE).write_text("[1, 2]")
    assert records.multirun_sweep(tmp_path, notes) is None
    assert notes == ["sweeper x.OptunaSweeper chooses its jobs as it goes: none expected, jobs from their folders only",
                     "multirun.yaml not used (TypeError: top level is not a mapping); jobs from their folders only"]


@pytest.mark.parametrize("umask", [0o022, 0o077])
def test_an_atomic_write_leaves_only_the_file_with_the_umasks_permissions(tmp_path: Path, umask: int) -> None:
    """Others may read a sweep's results as they may read any file its user makes (mkstemp's 0600 would hide them)."""
    from rlsweep.records import write_json_atomic

    old = os.umask(umask)
    try:
        write_json_atomic(tmp_path / "result.json", {"status": "ok"})
    finally:
        os.umask(old)
    assert [p.name for p in tmp_path.iterdir()] == ["result.json"]
    assert stat.S_IMODE((tmp_path / "result.json").stat().st_mode) == 0o666 & ~umask


def test_one_json_writer_for_records_and_the_report_turns_what_json_cannot_hold_into_values(tmp_path: Path) -> None:
    import numpy as np

    path = tmp_path / "r.json"
    records.write_json_atomic(path, {"nan": float("nan"), "inf": np.float64("inf"), "n": np.int64(3),
                                     "ok": np.bool_(True), "where": tmp_path, 1: (np.float32(0.5), [float("-inf")])})
    assert json.loads(path.read_text()) == {"nan": None, "inf": None, "n": 3, "ok": True, "where": str(tmp_path),
                                            "1": [0.5, [None]]}
