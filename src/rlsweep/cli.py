"""Glue for the entry points in ``sweeps/`` (kept out of them so they stay thin)."""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

log = logging.getLogger(__name__)

#: how often the launching process looks at jobs that are still running, in seconds
_POLL_S = 0.5


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


@contextlib.contextmanager
def train_entry() -> Iterator[None]:
    """Around the Hydra main of ``sweeps/train.py``.

    - ``RLSWEEP_DEBUG=1`` turns on Hydra's full tracebacks too (``HYDRA_FULL_ERROR=1``).
    - SIGTERM outside a training loop stops like Ctrl-C (inside one, the loop checkpoints first).
    - After a multirun, also one whose jobs failed or were interrupted: the comparison report.
    - Ctrl-C / SIGTERM ends with one line that says how to continue, exit status 128 + signal.
    """
    from rlsweep.hydra_callbacks import LAST_RUN_DIR, LAST_SWEEP_DIR, debug_enabled

    if debug_enabled():
        os.environ["HYDRA_FULL_ERROR"] = "1"
    sys.argv[1:] = multirun_flag_first(sys.argv[1:])
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        with finish_sweep():
            yield
    except KeyboardInterrupt as exc:
        if debug_enabled():
            raise
        name = "SIGTERM" if "SIGTERM" in str(exc) else "SIGINT"
        if LAST_SWEEP_DIR:
            where, key = LAST_SWEEP_DIR[0], "hydra.sweep.dir"
        else:
            where, key = (LAST_RUN_DIR[0] if LAST_RUN_DIR else "<the run's folder>"), "hydra.run.dir"
        print(f"rlsweep: stopped by {name}. Interrupted jobs wrote a checkpoint and an `interrupted` record; "
              f"to continue, run the same command again with resume=true {_override(key, where)}", file=sys.stderr)
        raise SystemExit(128 + getattr(signal, name)) from None
    except Exception as exc:  # Hydra reports errors of composition and of jobs itself; this is the rest
        if debug_enabled():
            raise
        print(f"rlsweep: {type(exc).__name__}: {exc}\n(RLSWEEP_DEBUG=1 shows the traceback)", file=sys.stderr)
        raise SystemExit(1) from None
    finally:
        signal.signal(signal.SIGTERM, previous)


def multirun_flag_first(args: list[str]) -> list[str]:
    """``-m``/``--multirun`` moved before the overrides, wherever it was typed.

    Hydra's argument parser takes the overrides as one run of positional arguments, so
    ``--config-dir conf algo=td3 -m compile=none,default`` would end in "unrecognized arguments".
    """
    flags = [a for a in args if a in ("-m", "--multirun")]
    if not flags or "--" in args:
        return args
    return [flags[0], *(a for a in args if a not in ("-m", "--multirun"))]


def _override(key: str, path: str) -> str:
    """``key=path`` as one shell word that Hydra's override grammar reads back as the same folder."""
    if all(c.isalnum() or c in "/._-" for c in path):
        return f"{key}={path}"
    hydra_text = '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return shlex.quote(f"{key}={hydra_text}")


@contextlib.contextmanager
def finish_sweep() -> Iterator[None]:
    """After a multirun -- also one whose jobs failed -- write the comparison report.

    Hydra skips ``on_multirun_end`` when a job failed, so the report runs here, around the whole
    Hydra main, from the sweep folder the callback recorded at ``on_multirun_start``. A launcher
    gives up at the first job it finds dead while the others may still be running (submitit_local
    jobs are processes of their own): the report waits for those, and marks the jobs whose process
    was killed before it could write a result.
    """
    from rlsweep.hydra_callbacks import LAST_LAUNCHER, LAST_SWEEP_DIR

    try:
        yield
    finally:
        if LAST_SWEEP_DIR and Path(LAST_SWEEP_DIR[0]).is_dir():
            sweep = Path(LAST_SWEEP_DIR[0])
            local_jobs = bool(LAST_LAUNCHER) and LAST_LAUNCHER[0] == "LocalLauncher"
            try:
                wait_for_jobs(sweep, local_jobs)
                mark_killed_jobs(sweep)
            except Exception as exc:  # noqa: BLE001 - never lose the report over this
                log.warning("checking the sweep's jobs failed: %s", exc)
            try:
                from rlsweep.report import main as report_main

                report_main([str(sweep)])
            except Exception as exc:  # noqa: BLE001 - the sweep's results are on disk either way
                print(f"rlsweep: the sweep report failed ({type(exc).__name__}: {exc}); "
                      f"run `python -m sweeps.report {sweep}`", file=sys.stderr)


def _running_records(sweep: Path) -> list[tuple[Path, dict[str, Any]]]:
    from rlsweep.hydra_callbacks import _walk_records
    from rlsweep.job import STATUS_RUNNING

    return [(d, r) for d, r in _walk_records(sweep) if r.get("status") == STATUS_RUNNING]


def _local_submitit_pids(sweep: Path) -> list[int]:
    """Processes of submitit_local jobs of this sweep that are still running (job id = pid)."""
    from rlsweep.job import process_alive

    pids = []
    root = sweep / ".submitit"
    for folder in root.iterdir() if root.is_dir() else []:
        if not folder.name.isdigit() or not process_alive(int(folder.name)):
            continue
        try:
            cmdline = Path(f"/proc/{folder.name}/cmdline").read_bytes()
        except OSError:
            continue
        if b"submitit" in cmdline:
            pids.append(int(folder.name))
    return pids


def wait_for_jobs(sweep: Path, local_jobs: bool) -> None:
    """Wait while jobs of ``sweep`` still run on this machine (Ctrl-C stops waiting, not the jobs)."""
    from rlsweep.job import job_process_alive

    said = False
    try:
        while True:
            running = [d for d, r in _running_records(sweep) if job_process_alive(r)]
            pids = _local_submitit_pids(sweep) if local_jobs else []
            if not running and not pids:
                return
            if not said:
                what = ", ".join(str(d) for d in running) or f"submitit processes {pids}"
                print(f"rlsweep: a job of the sweep failed; waiting for the jobs still running ({what}) before "
                      "the report (Ctrl-C stops waiting; the jobs go on)", file=sys.stderr)
                said = True
            time.sleep(_POLL_S)
    except KeyboardInterrupt:
        print("rlsweep: not waiting any longer; the report shows those jobs as they are now", file=sys.stderr)


def mark_killed_jobs(sweep: Path) -> list[Path]:
    """Turn the ``running`` records of jobs whose process is gone into ``failed`` ones that say so.

    Only for jobs of this machine: a job elsewhere (Slurm) cannot be checked from here.
    """
    import socket

    from rlsweep.job import job_process_alive
    from rlsweep.results import write_result

    marked = []
    for folder, record in _running_records(sweep):
        job = record.get("job") or {}
        if job.get("hostname") != socket.gethostname() or job_process_alive(record):
            continue
        record.pop("schema_version", None)
        record.update(status="failed", error=(
            f"killed: the job's process (pid {job.get('pid')}) ended without writing a result -- a signal such "
            f"as SIGKILL, out of memory, or a crash of the interpreter; its log: {folder / 'train.log'}"))
        write_result(folder, record)
        marked.append(folder)
    return marked
