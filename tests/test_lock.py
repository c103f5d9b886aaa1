"""One writer per output folder: a second command into a folder in use is refused at once.

Two real sweeps started at the same moment into one folder: one runs, the other ends with one
message and exit status 2 before any job, and nothing of the first is touched. The lock is
released when its holder ends, also when it is SIGKILLed (flock), so a dead command never blocks
the folder.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers import COMMON, ROOT, TINY, run_train

from rlsweep import folder_lock
from rlsweep.records import read_result

BUSY = "is in use by another rlsweep command (pid "


def _popen(args: list[str]) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "sweeps.train", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})


def test_two_sweeps_started_at_once_into_one_folder_the_second_is_refused(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    command = ["-m", *TINY["ppo"], *COMMON, "total_env_steps=4096", "seed=0,1", f"hydra.sweep.dir={sweep}"]
    procs = [_popen(command), _popen(command)]
    ended: dict[int, float] = {}
    outputs = {}
    try:
        while len(ended) < 2:
            for i, p in enumerate(procs):
                if i not in ended and p.poll() is not None:
                    ended[i] = time.monotonic()
                    outputs[i] = p.communicate()
            time.sleep(0.05)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    codes = sorted(p.returncode for p in procs)
    assert codes == [0, 2], [outputs[i][1][-2000:] for i in outputs]
    winner, loser = (0, 1) if procs[0].returncode == 0 else (1, 0)
    out, err = outputs[loser]
    assert err.count(BUSY) == 1 and f"{BUSY}{procs[winner].pid} " in err, err
    assert "Traceback" not in err and out == ""  # no job, no report
    assert ended[loser] < ended[winner]  # refused at once, not after waiting for the folder
    for i in (0, 1):
        record = read_result(sweep / str(i))
        assert record["status"] == "ok" and record["job"]["pid"] == procs[winner].pid
    assert "2 ok" in (sweep / "report" / "summary.md").read_text()


def _holder(folder: Path) -> subprocess.Popen:
    """Another process that takes the folder's lock and keeps it."""
    code = ("import sys, time; from rlsweep import folder_lock; folder_lock.acquire(sys.argv[1]); "
            "print('locked', flush=True); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(folder)], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "locked"
    return proc


def test_the_lock_is_released_when_its_holder_is_killed(tmp_path: Path) -> None:
    folder = tmp_path / "run"
    holder = _holder(folder)
    try:
        with pytest.raises(folder_lock.FolderBusy, match=f"pid {holder.pid} on "):
            folder_lock.acquire(folder)
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=30)
        folder_lock.acquire(folder)  # free again: no stale lock
    finally:
        folder_lock.release_all()
        if holder.poll() is None:
            holder.kill()


def test_a_single_run_into_a_folder_in_use_is_refused(tmp_path: Path) -> None:
    """Single runs lock their hydra.run.dir the same way (two runs told the same folder would mix files)."""
    out = tmp_path / "run"
    holder = _holder(out)
    try:
        refused = run_train([*TINY["ppo"], *COMMON, f"hydra.run.dir={out}"])
    finally:
        holder.kill()
        holder.wait(timeout=30)
    assert refused.returncode == 2 and refused.stderr.count(f"{BUSY}{holder.pid} ") == 1, refused.stderr[-2000:]
    assert "Traceback" not in refused.stderr and refused.stdout == ""
    assert sorted(p.name for p in out.iterdir()) == [folder_lock.LOCK_FILE]  # nothing written
