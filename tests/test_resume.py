"""Determinism and resuming, through the real `python -m sweeps.train`.

Same seed, toggles and device (CPU) -> the same learning numbers and env-step counts, run to run
and across a stop + resume. A sweep stopped by Ctrl-C is continued by the same command with
``resume=true``: finished jobs are kept untouched, the interrupted one continues from its
checkpoint under the same W&B run id, the ones never started run.
"""

from __future__ import annotations

import json
import os
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from helpers import COMMON, ROOT, TINY, read_wandb_run, run_train

from rlsweep.records import read_result
from rlsweep.tracking import stable_run_id

# long enough for a stop signal to land mid-run (a few seconds), small enough to be quick
BUDGET = [*TINY["ppo"], *COMMON, "total_env_steps=12800"]


def _popen(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sweeps.train", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env={**os.environ, "PYTHONUNBUFFERED": "1"})


def _training(job_dir: Path) -> bool:
    try:
        return "training" in (job_dir / "train.log").read_text()
    except OSError:
        return False


def _stop_when_training(args: list[str], job_dir: Path, sig: int) -> subprocess.CompletedProcess:
    """Run the command, send ``sig`` once ``job_dir``'s job trains, return what it did."""
    proc = _popen(args)
    try:
        deadline = time.monotonic() + 180
        while not _training(job_dir):
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"{job_dir} never started training: {proc.communicate()[1][-3000:]}")
            time.sleep(0.05)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _learning(record: dict) -> dict:
    """Every number of a record that must not change between identical runs (not the timings)."""
    learning = record["learning"]
    return {
        "env_steps": record["env_steps"], "updates": record["updates"], "iterations": record["iterations"],
        "curve_env_steps": learning["curve"]["env_steps"], "curve_return": learning["curve"]["episode_return"],
        "eval_returns": learning["eval_returns"], "final_return": learning["final_return"],
    }


def _train_history(run_dirs: list[Path]) -> list[dict]:
    """The ``train/*`` values of every logged iteration, over all attempts of one W&B run."""
    rows = []
    for run_dir in sorted(run_dirs):  # offline-run-<timestamp>-<id>: in order of the attempts
        rows += [{k: v for k, v in h.items() if k.startswith("train/")} for h in read_wandb_run(run_dir)["history"]]
    return rows


def _offline_runs(job_dir: Path) -> list[Path]:
    return sorted((job_dir / "wandb").glob("offline-run-*"))


# ----------------------------------------------------------------------------- determinism


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One run, the same run again, and the same run stopped by SIGTERM and resumed."""
    base = tmp_path_factory.mktemp("determinism")
    a, b, c = base / "a", base / "b", base / "c"
    first = run_train([*BUDGET, "logger.mode=offline", f"hydra.run.dir={a}"])
    assert first.returncode == 0, first.stderr[-3000:]
    again = run_train([*BUDGET, f"hydra.run.dir={b}"])
    assert again.returncode == 0, again.stderr[-3000:]
    stopped = _stop_when_training([*BUDGET, "logger.mode=offline", f"hydra.run.dir={c}"], c, signal.SIGTERM)
    assert stopped.returncode == 143, stopped.stderr[-3000:]
    interrupted = read_result(c)
    resumed = run_train([*BUDGET, "logger.mode=offline", f"hydra.run.dir={c}", "resume=true"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    return {"a": a, "b": b, "c": c, "interrupted": interrupted}


def test_same_seed_same_numbers_run_to_run(runs: dict) -> None:
    a, b = read_result(runs["a"]), read_result(runs["b"])
    assert _learning(a) == _learning(b)
    assert a["env_steps"] == 12800 and len(a["learning"]["curve"]["episode_return"]) > 10


def test_a_stopped_and_resumed_run_gives_the_numbers_of_an_uninterrupted_one(runs: dict) -> None:
    interrupted = runs["interrupted"]
    assert interrupted["status"] == "interrupted" and Path(interrupted["checkpoint"]).name == "checkpoint.pt"
    resumed, straight = read_result(runs["c"]), read_result(runs["a"])
    assert resumed["status"] == "ok" and resumed["requeues"] == 1
    assert 0 < resumed["resumed_at_env_steps"][0] < 12800  # continued mid-run, not started over
    # the record says from which checkpoint, and which code ran each attempt
    assert resumed["resumed_from"]["env_steps"] == resumed["resumed_at_env_steps"][0]
    assert resumed["checkpoint_rejected"] is None
    assert [(h["attempt"], h["from_env_steps"]) for h in resumed["code_history"]] == [
        (0, 0), (1, resumed["resumed_at_env_steps"][0])]
    assert _learning(resumed) == _learning(straight)
    assert not (runs["c"] / "checkpoint.pt").exists()  # done: the record is the result
    # the W&B run: two attempts under one id whose iterations add up to the uninterrupted run's
    attempts = _offline_runs(runs["c"])
    assert len(attempts) == 2 and all(p.name.endswith(stable_run_id(runs["c"])) for p in attempts)
    assert _train_history(attempts) == _train_history(_offline_runs(runs["a"]))


def test_a_finished_run_is_kept_not_redone(runs: dict) -> None:
    """Without resume=true a finished run's folder is refused; with it, the run is returned as it is."""
    out = runs["a"]
    before = (out / "result.json").read_bytes(), (out / "result.json").stat().st_mtime_ns, _offline_runs(out)
    refused = run_train([*BUDGET, "logger.mode=offline", f"hydra.run.dir={out}"])
    assert refused.returncode == 2 and "already holds a finished result: add resume=true" in refused.stderr
    kept = run_train([*BUDGET, "logger.mode=offline", f"hydra.run.dir={out}", "resume=true"])
    assert kept.returncode == 0, kept.stderr[-3000:]
    assert "result kept, nothing rerun" in kept.stdout and "training" not in kept.stdout + kept.stderr
    assert ((out / "result.json").read_bytes(), (out / "result.json").stat().st_mtime_ns, _offline_runs(out)) == before
    other = run_train([*BUDGET, f"hydra.run.dir={out}", "resume=true", "seed=1"])
    assert other.returncode == 2 and "finished result of a run with another config" in other.stderr


# --------------------------------------------------------------------------- resuming a sweep


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A 3-job sweep stopped by Ctrl-C in job 1, then the same command with resume=true."""
    folder = tmp_path_factory.mktemp("resume") / "my sweep"  # a space, as users' folders have
    command = ["-m", *BUDGET, "logger.mode=offline", "seed=0,1,2", f"hydra.sweep.dir={folder}"]
    stopped = _stop_when_training(command, folder / "1", signal.SIGINT)
    state = {"folder": folder, "command": command, "stopped": stopped,
             "records": {i: (folder / str(i) / "result.json").read_bytes() for i in (0, 1)},
             "mtime0": (folder / "0" / "result.json").stat().st_mtime_ns,
             "runs": {i: _offline_runs(folder / str(i)) for i in (0, 1)},
             "job2_started": (folder / "2" / "result.json").exists(),
             "summary": (folder / "report" / "summary.md").read_text()}
    # continue with the very words the stopped command printed (its folder has a space: quoted)
    hint = stopped.stderr.rsplit("run the same command again with ", 1)[-1].strip()
    assert shlex.split(hint)[0] == "resume=true", stopped.stderr[-3000:]
    state["resumed"] = run_train([*command[:-1], *shlex.split(hint)])
    return state


def test_ctrl_c_stops_the_sweep_with_a_checkpoint_and_says_how_to_continue(sweep: dict) -> None:
    folder, stopped = sweep["folder"], sweep["stopped"]
    assert stopped.returncode == 130
    assert "Traceback" not in stopped.stderr
    assert "resume=true" in stopped.stderr and str(folder) in stopped.stderr
    first, second = (json.loads(sweep["records"][i]) for i in (0, 1))
    assert first["status"] == "ok"
    assert second["status"] == "interrupted" and second["error"] == "interrupted by SIGINT; checkpoint written"
    assert not sweep["job2_started"]  # the sweep stopped: Ctrl-C is not one job's failure
    summary = sweep["summary"]
    assert "1 ok, 1 failed (1 interrupted), 1 missing" in summary and "interrupted by SIGINT" in summary


def test_resume_keeps_finished_jobs_and_continues_the_rest(sweep: dict) -> None:
    folder, resumed = sweep["folder"], sweep["resumed"]
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # job 0 was done: nothing about it changed, no new W&B run
    assert (folder / "0" / "result.json").read_bytes() == sweep["records"][0]
    assert (folder / "0" / "result.json").stat().st_mtime_ns == sweep["mtime0"]
    assert _offline_runs(folder / "0") == sweep["runs"][0]
    # job 1 continued from its checkpoint, in the same W&B run
    job1 = read_result(folder / "1")
    assert job1["status"] == "ok" and job1["requeues"] == 1 and 0 < job1["resumed_at_env_steps"][0] < 12800
    runs1 = _offline_runs(folder / "1")
    assert len(runs1) == 2 and runs1[0] == sweep["runs"][1][0]
    assert {p.name.rsplit("-", 1)[1] for p in runs1} == {stable_run_id(folder / "1")} == {job1["logging"]["wandb_run_id"]}
    # job 2 ran
    job2 = read_result(folder / "2")
    assert job2["status"] == "ok" and job2["requeues"] == 0 and job2["seed"] == 2
    # the switch is not part of any job's identity, nor of the sweep the report expands
    assert all("resume=true" not in read_result(folder / str(i))["overrides"] for i in range(3))
    assert "resume=true" not in yaml.safe_load((folder / "multirun.yaml").read_text())["hydra"]["overrides"]["task"]
    summary = (folder / "report" / "summary.md").read_text()
    assert "3 ok, 0 failed (0 interrupted), 0 missing" in summary


def test_resuming_a_finished_sweep_changes_nothing(sweep: dict) -> None:
    folder = sweep["folder"]
    before = {i: ((folder / str(i) / "result.json").read_bytes(), _offline_runs(folder / str(i))) for i in range(3)}
    again = run_train([*sweep["command"], "resume=true"])
    assert again.returncode == 0, again.stderr[-3000:]
    assert again.stdout.count("result kept, nothing rerun") == 3
    assert {i: ((folder / str(i) / "result.json").read_bytes(), _offline_runs(folder / str(i)))
            for i in range(3)} == before


def test_a_sweep_folder_with_finished_jobs_is_not_overwritten(sweep: dict) -> None:
    folder = sweep["folder"]
    before = {i: (folder / str(i) / "result.json").read_bytes() for i in range(3)}
    plain = run_train(sweep["command"])
    assert plain.returncode == 2 and "finished job(s)" in plain.stderr and "add resume=true" in plain.stderr
    changed = [a if not a.startswith("seed=") else "seed=0,5,2" for a in sweep["command"]]
    other = run_train([*changed, "resume=true"])
    assert other.returncode == 2 and "job 1 (" in other.stderr and "another config" in other.stderr
    assert {i: (folder / str(i) / "result.json").read_bytes() for i in range(3)} == before


# ------------------------------------------------------------------ resuming on changed code


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.slow  # a copy of the code in a git repository of its own, a run stopped and resumed (~30 s)
def test_a_job_resumed_on_changed_code_says_which_commit_ran_which_part(tmp_path: Path) -> None:
    """The job starts on commit A, is stopped, the code changes (commit B), the job resumes: allowed, and
    its record names A for the part before the stop and B for the rest."""
    import shutil

    repo = tmp_path / "repo"
    for part in ("src", "conf", "sweeps"):
        shutil.copytree(ROOT / part, repo / part, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "A")
    commit_a = _git(repo, "rev-parse", "HEAD")
    out = tmp_path / "run"
    args = [*BUDGET, f"hydra.run.dir={out}"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(repo / "src")}

    proc = subprocess.Popen([sys.executable, "-m", "sweeps.train", *args], cwd=repo, text=True, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 180
        while not _training(out):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
    stopped = read_result(out)
    assert stopped["status"] == "interrupted" and stopped["provenance"]["code"]["rlsweep"]["commit"] == commit_a
    assert stopped["provenance"]["code"]["rlsweep"]["repo"] == str(repo)  # the copy ran, not this tree

    runner = repo / "src" / "rlsweep" / "runner.py"
    runner.write_text(runner.read_text() + "\n# a change between the stop and the resume\n")
    _git(repo, "commit", "-q", "-am", "B")
    commit_b = _git(repo, "rev-parse", "HEAD")
    resumed = subprocess.run([sys.executable, "-m", "sweeps.train", *args, "resume=true"], cwd=repo, env=env,
                             capture_output=True, text=True, timeout=600)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = read_result(out)
    assert record["status"] == "ok" and record["env_steps"] == 12800
    assert record["provenance"]["code"]["rlsweep"]["commit"] == commit_b
    assert record["resumed_from"]["code"]["commit"] == commit_a
    at = record["resumed_at_env_steps"][0]
    assert [(h["attempt"], h["from_env_steps"], h["commit"], h["dirty"]) for h in record["code_history"]] == [
        (0, 0, commit_a, False), (1, at, commit_b, False)]
