"""Checkpoints are written atomically and verified before use.

A real checkpoint of a PPO job stopped by a real SIGINT; then damaged the ways a file gets damaged
(cut short by a full disk or a crash of a copy, a flipped bit, emptied, a header garbled, a plain
``torch.save`` of an older version): each is recognised before torch unpickles anything, the job
starts afresh, and its record says why. A disk that fills during a checkpoint write (a real tmpfs)
leaves the previous checkpoint whole, and the job's record says "no space left on device".
"""

from __future__ import annotations

import io
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers import COMMON, ROOT, TINY, run_train, tiny_cfg

from rlsweep import checkpoint
from rlsweep.records import CHECKPOINT_FILE, CHECKPOINT_MAGIC, read_checkpoint_header, read_result
from rlsweep.results import git_state
from rlsweep.runner import train
from rlsweep.signals import Interrupted
from rlsweep.testing.algorithm import _interrupt_at  # the contract's SIGINT-at-iteration hook

BUDGET = "total_env_steps=3200"


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """A checkpoint written by a real job stopped with SIGINT after 3 iterations."""
    ckpt = tmp_path_factory.mktemp("ckpt") / CHECKPOINT_FILE
    cfg = tiny_cfg("ppo", BUDGET)
    with pytest.raises(Interrupted):
        train(cfg, on_iteration=_interrupt_at(3), checkpoint_path=ckpt)
    return {"cfg": cfg, "path": ckpt, "bytes": ckpt.read_bytes()}


def test_a_whole_checkpoint_passes_its_check_and_names_the_code_that_wrote_it(written: dict) -> None:
    found = checkpoint.read(written["path"], written["cfg"])
    header, why = found.header, found.rejected
    assert why is None and header is not None
    assert header["env_steps"] == 3 * 64 and header["attempt"] == 0  # 3 iterations of 4 envs x 16 steps
    commit = git_state(checkpoint.__file__)["commit"]
    assert header["history"] == [header["code"]] and header["code"]["commit"] == commit
    assert checkpoint.load(written["path"], written["cfg"])["algo_counters"]["env_steps"] == 3 * 64
    # no temp file of the atomic write is left beside it
    assert [p.name for p in written["path"].parent.iterdir()] == [CHECKPOINT_FILE]


def _truncate(data: bytes) -> bytes:
    return data[: len(data) - 1000]


def _flip_a_bit(data: bytes) -> bytes:
    at = len(data) - 5000
    return data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:]


def _garble_header(data: bytes) -> bytes:
    return data[:len(CHECKPOINT_MAGIC)] + b"{not json" + data[data.index(b"\n", len(CHECKPOINT_MAGIC)):]


def _plain_torch_save(data: bytes) -> bytes:
    buf = io.BytesIO()
    torch.save({"config_digest": "x"}, buf)
    return buf.getvalue()


DAMAGES = {
    "truncated": (_truncate, r"^truncated: [\d,]+ of [\d,]+ payload bytes$"),
    "cut-in-the-header": (lambda d: d[:len(CHECKPOINT_MAGIC) + 20], r"^truncated or corrupted header$"),
    "bit-flip": (_flip_a_bit, r"^corrupted: the payload's sha256 does not match the header's$"),
    "empty": (lambda d: b"", r"^empty file$"),
    "zeros": (lambda d: bytes(len(d)), r"^no rlsweep checkpoint header"),
    "garbled-header": (_garble_header, r"^truncated or corrupted header$"),
    "no-header": (_plain_torch_save, r"^no rlsweep checkpoint header"),
}


@pytest.mark.parametrize("damage", list(DAMAGES))
def test_a_damaged_checkpoint_is_recognised_before_it_is_unpickled(written: dict, tmp_path: Path, damage: str) -> None:
    how, reason = DAMAGES[damage]
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(how(written["bytes"]))
    found = checkpoint.read(path, written["cfg"])
    header, why = found.header, found.rejected
    assert header is None and why is not None
    assert re.search(reason, why), why
    assert checkpoint.load(path, written["cfg"]) is None


def test_a_damaged_checkpoint_makes_the_job_start_afresh(written: dict, tmp_path: Path) -> None:
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(_flip_a_bit(written["bytes"]))
    outcome = train(written["cfg"], checkpoint_path=path)
    assert outcome.requeues == 0 and outcome.resumed_at_env_steps == [] and outcome.env_steps == 3200


def test_a_checkpoint_of_another_config_is_rejected_as_such(written: dict) -> None:
    found = checkpoint.read(written["path"], tiny_cfg("ppo", BUDGET, "seed=7"))
    header, why = found.header, found.rejected
    assert header is None and why == "written for another config"


def test_the_history_of_a_resumed_job_keeps_every_attempt(written: dict, tmp_path: Path) -> None:
    """Resumed and stopped again: the new checkpoint lists both attempts, the second from where it resumed."""
    path = tmp_path / CHECKPOINT_FILE
    path.write_bytes(written["bytes"])
    with pytest.raises(Interrupted):
        train(written["cfg"], on_iteration=_interrupt_at(2), checkpoint_path=path)
    header = checkpoint.read(path, written["cfg"]).header
    assert header["attempt"] == 1 and header["env_steps"] == 5 * 64
    assert [(h["attempt"], h["from_env_steps"]) for h in header["history"]] == [(0, 0), (1, 3 * 64)]
    assert checkpoint.code_history(header, {"commit": "c", "dirty": False})[-1] == {
        "attempt": 2, "from_env_steps": 5 * 64, "commit": "c", "dirty": False}


# ------------------------------------------------------------------------------- a full disk


def _mount_tmpfs(target: Path, size: str) -> None:
    target.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(target)],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here (needs root and mount permission): {proc.stderr.strip()}")


@pytest.fixture
def small_disk(tmp_path: Path):
    """A real 1 MiB file system, unmounted afterwards."""
    disk = tmp_path / "disk"
    _mount_tmpfs(disk, "1m")
    try:
        yield disk
    finally:
        subprocess.run(["umount", "-l", str(disk)], capture_output=True, check=False)


def _fill(disk: Path, leave_bytes: int) -> Path:
    """Fill ``disk`` up to ``leave_bytes`` free."""
    st = os.statvfs(disk)
    free = st.f_bavail * st.f_frsize
    filler = disk / "filler"
    with open(filler, "wb") as f:
        f.write(b"\0" * max(0, free - leave_bytes))
    return filler


def test_a_full_disk_keeps_the_previous_checkpoint_whole(written: dict, small_disk: Path) -> None:
    """In-process: the save after the disk filled up fails, and names the cause; the file on disk is the old one."""
    path = small_disk / CHECKPOINT_FILE
    shutil.copyfile(written["path"], path)
    _fill(small_disk, 16 * 1024)  # less than a checkpoint (~50 kB)
    with pytest.raises(checkpoint.CheckpointWriteError, match="no space left on device .* the previous checkpoint"):
        train(written["cfg"], on_iteration=_interrupt_at(1), checkpoint_path=path)
    assert path.read_bytes() == written["bytes"]
    assert sorted(p.name for p in small_disk.iterdir()) == [CHECKPOINT_FILE, "filler"]  # no temp left


@pytest.mark.slow  # the real command twice around a full disk (~20 s); the in-process test above is the fast check
def test_a_job_whose_disk_fills_fails_with_no_space_left_and_resumes_from_its_last_checkpoint(
        small_disk: Path) -> None:
    """The real command, its folder on a 1 MiB tmpfs, a checkpoint every 0.2 s; the disk fills while it trains."""
    out = small_disk / "run"
    args = [*TINY["ppo"], *COMMON, "total_env_steps=16000", "checkpoint_interval_s=0.2", f"hydra.run.dir={out}"]
    proc = subprocess.Popen([sys.executable, "-m", "sweeps.train", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while read_checkpoint_header(out / CHECKPOINT_FILE) is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.02)
        filler = _fill(small_disk, 24 * 1024)  # room for the record, not for a checkpoint
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0
    record = read_result(out)
    assert record["status"] == "failed"
    assert "CheckpointWriteError" in record["error"] and "no space left on device" in record["error"]
    found = checkpoint.read(out / CHECKPOINT_FILE, tiny_cfg("ppo", "total_env_steps=16000"))
    kept, why = found.header, found.rejected
    assert why is None and 0 < kept["env_steps"] < 16000
    filler.unlink()  # space again: the same command continues from that checkpoint
    again = run_train([*args, "resume=true"])
    assert again.returncode == 0, again.stderr[-3000:]
    done = read_result(out)
    assert done["status"] == "ok" and done["env_steps"] == 16000 and done["checkpoint_rejected"] is None
    assert done["resumed_from"]["env_steps"] == kept["env_steps"] == done["resumed_at_env_steps"][0]


# ----------------------------------------------------------------------- through the command


def test_a_corrupted_checkpoint_is_rejected_by_the_command_and_the_record_says_so(tmp_path: Path) -> None:
    """Stopped by SIGTERM, its checkpoint corrupted, resumed: a fresh start whose record says why."""
    out = tmp_path / "run"
    args = [*TINY["ppo"], *COMMON, "total_env_steps=12800", f"hydra.run.dir={out}"]
    proc = subprocess.Popen([sys.executable, "-m", "sweeps.train", *args], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    try:
        deadline = time.monotonic() + 120
        while "training" not in ((out / "train.log").read_text() if (out / "train.log").exists() else ""):
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 143 and read_result(out)["status"] == "interrupted"
    ckpt = out / CHECKPOINT_FILE
    ckpt.write_bytes(_flip_a_bit(ckpt.read_bytes()))
    resumed = run_train([*args, "resume=true"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    record = read_result(out)
    assert record["status"] == "ok" and record["env_steps"] == 12800
    assert record["checkpoint_rejected"] == "corrupted: the payload's sha256 does not match the header's"
    assert record["resumed_from"] is None and record["requeues"] == 0  # from scratch
    assert [h["attempt"] for h in record["code_history"]] == [0]
    assert "not used: corrupted" in (out / "train.log").read_text()  # said in the job's log too


def test_a_resumed_job_does_not_hold_its_checkpoint_through_the_training(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """The replay buffer is restored by copy: the checkpoint's own arrays are freed before training goes on,
    not held beside it (an Atari DQN's buffer would take twice its memory after every resume)."""
    import gc
    import weakref

    cfg, path = tiny_cfg("dqn", "total_env_steps=512"), tmp_path / CHECKPOINT_FILE
    with pytest.raises(Interrupted):
        train(cfg, on_iteration=_interrupt_at(4), checkpoint_path=path)
    restored, alive = [], []
    real_restore = checkpoint.restore

    def restore(payload: dict, algo: object) -> None:
        restored.append(weakref.ref(payload["algo_extra"]["buffer"]["obs"]))
        real_restore(payload, algo)

    def on_iteration(row: dict, env_steps: int) -> None:
        gc.collect()
        alive.append(restored[0]() is not None)

    monkeypatch.setattr(checkpoint, "restore", restore)
    train(cfg, on_iteration=on_iteration, checkpoint_path=path)
    assert restored and alive and not any(alive)


def test_a_checkpoint_is_of_the_same_config_whatever_the_switches_that_change_no_result() -> None:
    """The keys that change no job's result are decided once (records.RECORD_VOLATILE): a sweep resumed with
    prepare=false (or another objective) resumes its unfinished jobs from their checkpoints, as it keeps its
    finished records; a change that does change the training is still another config."""
    from helpers import tiny_cfg

    from rlsweep.checkpoint import config_digest
    from rlsweep.records import RECORD_VOLATILE

    base = config_digest(tiny_cfg("ppo"))
    for same in ("prepare=false", "prepare=full", "objective.metric=final_return", "resume=true", "progress=true",
                 "logger.mode=offline", "checkpoint_interval_s=5", "eval_episodes=3"):
        assert config_digest(tiny_cfg("ppo", same)) == base, same
    assert config_digest(tiny_cfg("ppo", "algo.lr=0.01")) != base
    assert {"prepare", "objective"} <= set(RECORD_VOLATILE)
