"""``python -m sweeps.status <sweep_dir>``: where every job of a sweep stands, while it runs or after.

The jobs come from the Slurm launcher's manifest (:func:`write_manifest`), else ``multirun.yaml``;
each one's state from its result record and, for a Slurm sweep, one ``sacct`` call, which decides
where the record cannot (a job killed before its final record). Cheap on purpose: no torch, no report.
It only reads; ``--settle`` writes Slurm's verdicts into the records of the jobs Slurm ended, as the end
of a sweep that waited for its jobs does (:func:`settle_records`).
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlsweep.records import (
    CHECKPOINT_FILE,
    KILLED,
    MULTIRUN_FILE,
    RESULT_FILE,
    STATUS_FAILED,
    STATUS_INTERRUPTED,
    STATUS_OK,
    STATUS_RUNNING,
    expand_sweep,
    job_folders,
    job_num,
    killed,
    last_line,
    multirun_sweep,
    read_checkpoint_header,
    read_json,
    read_record,
    section,
    write_json_atomic,
)

MANIFEST_FILE = "rlsweep_jobs.json"
SACCT_TIMEOUT_S = 30

PENDING, REQUEUED, CANCELLED, TIMED_OUT = "pending", "requeued", "cancelled", "timed_out"
RUNNING, OK, FAILED, INTERRUPTED = STATUS_RUNNING, STATUS_OK, STATUS_FAILED, STATUS_INTERRUPTED
#: states in which a job may still change (the sweep is not finished while any job is in one)
UNFINISHED = (PENDING, RUNNING, REQUEUED)
#: exit status of the command: every job ok / some job failed (or cancelled, ...) / jobs still unfinished
EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNFINISHED = 0, 1, 2, 3

#: Slurm job states (``sacct``'s first word) -> a job state here
_SLURM_ACTIVE = {"PENDING": PENDING, "REQUEUED": REQUEUED, "REQUEUE_HOLD": REQUEUED, "REQUEUE_FED": REQUEUED,
                 "RESIZING": RUNNING, "RUNNING": RUNNING, "COMPLETING": RUNNING, "CONFIGURING": RUNNING,
                 "SUSPENDED": RUNNING, "STAGE_OUT": RUNNING, "SIGNALING": RUNNING, "STOPPED": RUNNING}
_SLURM_FAILED_REASON = {"OUT_OF_MEMORY": "out of memory: Slurm killed it over its memory limit (mem_gb)",
                        "NODE_FAIL": "node failure (Slurm: NODE_FAIL)", "BOOT_FAIL": "node boot failure (Slurm: BOOT_FAIL)",
                        "DEADLINE": "deadline reached (Slurm: DEADLINE)", "PREEMPTED": "preempted (Slurm: PREEMPTED)",
                        "REVOKED": "revoked (Slurm: REVOKED)"}


class StatusInputError(ValueError):
    """The folder is not a sweep this command can read."""


@dataclasses.dataclass
class SlurmState:
    """One array task in Slurm's accounting: its last state and how often it was requeued."""

    job_id: str  # <array id>_<index>
    state: str  # first word of sacct's State: PENDING, RUNNING, CANCELLED, TIMEOUT, ...
    exit_code: str = ""
    requeues: int = 0


@dataclasses.dataclass
class JobStatus:
    """One job of the sweep as this command sees it."""

    num: int
    overrides: list[str]
    state: str
    detail: str = ""  # progress of a running job, reason of a failed one
    slurm_job_id: str | None = None
    slurm_state: str | None = None
    requeues: int = 0
    folder: str | None = None
    env_steps: int | None = None
    total_env_steps: int | None = None


@dataclasses.dataclass
class SweepStatus:
    """Every job of a sweep with its state, and where the job list came from (the manifest, multirun.yaml, or the job folders)."""

    sweep_dir: Path
    jobs: list[JobStatus]
    source: str  # where the job list came from
    notes: list[str]

    def counts(self) -> dict[str, int]:
        return dict(collections.Counter(job.state for job in self.jobs))

    def exit_code(self) -> int:
        states = {j.state for j in self.jobs}
        if states & set(UNFINISHED):
            return EXIT_UNFINISHED
        return EXIT_OK if states <= {OK} else EXIT_FAILED



def write_manifest(sweep_dir: Path, jobs: Sequence[tuple[int, Sequence[str], str | None]], launcher: str) -> None:
    """Add submitted jobs (``num``, ``overrides``, Slurm job id) to the sweep's manifest, atomically: the
    launcher calls it after each batch it submitted (Hydra's sweeper may launch a sweep in batches)."""
    path = Path(sweep_dir) / MANIFEST_FILE
    manifest = read_json(path) or {}
    known = {int(j["num"]): j for j in manifest.get("jobs", []) if isinstance(j, dict) and "num" in j}
    for num, overrides, slurm_id in jobs:
        known[int(num)] = {"num": int(num), "overrides": list(overrides), "slurm_job_id": slurm_id}
    write_json_atomic(path, {"schema_version": 1, "launcher": launcher, "jobs": [known[n] for n in sorted(known)]})


def _expected_jobs(sweep_dir: Path, notes: list[str]) -> tuple[list[tuple[int, list[str], str | None]], str]:
    """The sweep's jobs (num, overrides, Slurm job id or None), and where they came from."""
    manifest = read_json(sweep_dir / MANIFEST_FILE)
    if manifest is not None and isinstance(manifest.get("jobs"), list):
        jobs = [(int(j["num"]), [str(o) for o in j.get("overrides") or []], j.get("slurm_job_id"))
                for j in manifest["jobs"] if isinstance(j, dict) and isinstance(j.get("num"), int)]
        return jobs, MANIFEST_FILE
    if (multirun := multirun_sweep(sweep_dir, notes)) is None:
        return [], "job folders"
    return [(i, o, None) for i, o in enumerate(expand_sweep(multirun[1]))], MULTIRUN_FILE



def checkpoint_env_steps(folder: Path) -> int | None:
    """Env steps of the job's last checkpoint, from its header line (the payload is not read)."""
    steps = (read_checkpoint_header(folder / CHECKPOINT_FILE) or {}).get("env_steps")
    return steps if isinstance(steps, int) else None



def _expand_array(task: str) -> list[str]:
    """``44_[0-3%2]`` / ``44_[1,5-6]`` (a pending array, not yet split) -> its tasks ``44_0`` ..."""
    m = re.fullmatch(r"(\d+)_\[([^\]]+)\]", task)
    if not m:
        return [task]
    out = []
    for part in m.group(2).split("%")[0].split(","):
        lo, _, hi = part.partition("-")
        hi, _, step = hi.partition(":")
        out.extend(f"{m.group(1)}_{i}" for i in range(int(lo), int(hi or lo) + 1, int(step or 1)))
    return out


def parse_sacct(text: str) -> dict[str, SlurmState]:
    """``sacct -X -D -P -n -o JobID,State,ExitCode,Reason`` output -> each array task's last state (with
    ``-D`` each attempt of a requeued task is a line, oldest first: the lines before the last are requeues)."""
    out: dict[str, SlurmState] = {}
    unsplit: list[list[str]] = []
    for line in text.splitlines():
        fields = line.split("|")
        if len(fields) < 2 or not fields[0]:
            continue
        if "[" in fields[0]:  # the array's tasks not started yet, on one line: below, after the split ones
            unsplit.append(fields)
            continue
        before = out.get(fields[0])
        out[fields[0]] = _slurm_state(fields[0], fields, 0 if before is None else before.requeues + 1)
    for fields in unsplit:
        for task in _expand_array(fields[0]):
            out.setdefault(task, _slurm_state(task, fields, 0))
    return out


def _slurm_state(task: str, fields: list[str], requeues: int) -> SlurmState:
    words = fields[1].split()
    return SlurmState(job_id=task, state=words[0] if words else "UNKNOWN",
                      exit_code=fields[2] if len(fields) > 2 else "", requeues=requeues)


def slurm_states(array_ids: Sequence[str], notes: list[str]) -> dict[str, SlurmState] | None:
    """Every task of these arrays in Slurm's accounting; None (and a note) when sacct is not usable."""
    if not array_ids:
        return None
    if (sacct := shutil.which("sacct")) is None:
        notes.append("sacct not found: states from the records only (pending / cancelled / timed out unknown)")
        return None
    try:
        proc = subprocess.run([sacct, "-X", "-D", "-P", "-n", "-j", ",".join(sorted(set(array_ids))),
                               "-o", "JobID,State,ExitCode,Reason"],
                              capture_output=True, text=True, timeout=SACCT_TIMEOUT_S, check=False)
    except (OSError, subprocess.SubprocessError) as exc:
        notes.append(f"sacct failed ({exc}): states from the records only")
        return None
    if proc.returncode != 0:
        notes.append(f"sacct failed (exit {proc.returncode}: {last_line(proc.stderr)}): states from the records only")
        return None
    return parse_sacct(proc.stdout)


#: what Slurm writes into a job's stderr when it kills the job for its memory (jobacct_gather's
#: OverMemoryKill: the job ends FAILED, not OUT_OF_MEMORY; the cgroup plugin: "oom-kill event")
_MEMORY_KILL = ("exceeded memory limit", "exceeded job memory limit", "oom-kill event", "out of memory")


def _killed_for_memory(sweep_dir: Path, slurm_job_id: str) -> bool:
    """Whether submitit's log of this task (its last 8 KiB) says Slurm killed it for its memory."""
    for log in (sweep_dir / ".submitit" / slurm_job_id).glob("*_log.err"):
        try:
            with open(log, "rb") as f:
                f.seek(max(0, f.seek(0, os.SEEK_END) - 8192))
                tail = f.read().decode("utf-8", "replace").lower()
        except OSError:
            continue
        if any(marker in tail for marker in _MEMORY_KILL):
            return True
    return False



def _this_submission(record: dict[str, Any], slurm: SlurmState) -> bool:
    """Whether the record was written by this Slurm job (not by an earlier submission of the sweep)."""
    return str(section(record, "job").get("slurm_job_id")) == slurm.job_id.split("_")[0]


def resolve(num: int, overrides: list[str], record: dict[str, Any] | None, folder: Path | None,
            slurm: SlurmState | None, slurm_job_id: str | None = None) -> JobStatus:
    """One job's state from its record and Slurm's (either may be missing)."""
    job = JobStatus(num=num, overrides=overrides, state=PENDING, folder=str(folder) if folder else None,
                    slurm_job_id=slurm.job_id if slurm else slurm_job_id, slurm_state=slurm.state if slurm else None)
    status = (record or {}).get("status")
    total = section(record or {}, "config").get("total_env_steps")
    job.total_env_steps = total if isinstance(total, int) else None
    job.requeues = max(slurm.requeues if slurm else 0, int((record or {}).get("requeues") or 0))
    sstate = slurm.state if slurm else None
    if status == OK:
        job.state, job.env_steps = OK, record.get("env_steps")
        return job
    if status == FAILED:  # Slurm's kill is the cause, when it killed the job; the traceback is its symptom
        job.state, job.detail = FAILED, (_SLURM_FAILED_REASON.get(sstate) or last_line(record.get("error"))
                                         or "failed (no error text)")
        return job
    # Slurm knows more, when there is Slurm, but for the final states a record keeps (cancelled, timed out)
    if sstate == "PENDING" and status == RUNNING and not job.requeues and _this_submission(record, slurm):
        sstate = "RUNNING"  # its first attempt wrote that it runs: sacct (slurmdbd) lags the controller
    elif sstate == "PENDING" and (status is not None or job.requeues):
        sstate = "REQUEUED"  # pending again after an attempt: requeued, waiting to restart
    if status in (CANCELLED, TIMED_OUT):  # written by the job (timed out) or settled before (settle_records)
        job.state, job.detail = status, last_line(record.get("error")) or status
    elif sstate in _SLURM_ACTIVE:
        job.state = _SLURM_ACTIVE[sstate]
        if job.state == REQUEUED:
            job.requeues = max(job.requeues, 1)
    elif sstate == "CANCELLED":
        job.state, job.detail = CANCELLED, "cancelled (scancel)" + (" before it started" if record is None else "")
    elif sstate == "TIMEOUT":
        job.state = TIMED_OUT
        job.detail = "time limit reached" + (f" after {job.requeues} requeue(s)" if job.requeues else "")
    elif sstate in _SLURM_FAILED_REASON:
        job.state, job.detail = FAILED, _SLURM_FAILED_REASON[sstate]
    elif sstate in ("FAILED", "COMPLETED"):
        code = slurm.exit_code if slurm else ""
        job.state = FAILED
        job.detail = (f"the job ended (Slurm: {sstate}, exit {code}) without a final record"
                      + (f": {last_line(record.get('error'))}" if status == INTERRUPTED else ""))
    elif status == INTERRUPTED:
        job.state, job.detail = INTERRUPTED, last_line(record.get("error")) or "interrupted"
    elif slurm is None and killed(record or {}):
        job.state, job.detail = FAILED, KILLED
    elif status == RUNNING:
        job.state = RUNNING
    elif record is not None:
        job.state, job.detail = FAILED, f"status {status!r}: {last_line(record.get('error'))}"
    if job.state in (RUNNING, REQUEUED, TIMED_OUT, CANCELLED, INTERRUPTED) and folder is not None:
        job.env_steps = checkpoint_env_steps(folder)
    if job.state in (RUNNING, REQUEUED):
        if record is None:
            job.detail = "starting"
        elif job.env_steps is not None:
            of_total = f"/{total:,}" if job.total_env_steps else ""
            job.detail = f"{job.env_steps:,}{of_total} env steps (last checkpoint)"
        else:
            job.detail = "training (no checkpoint yet)"
    return job


def sweep_status(sweep_dir: str | os.PathLike[str], use_slurm: bool = True) -> SweepStatus:
    """Every job of the sweep in ``sweep_dir``, with its state.

    Raises:
        StatusInputError: ``sweep_dir`` is not a folder, or holds no job, manifest or multirun.yaml.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        problem = "not found" if not root.exists() else "is not a folder"
        raise StatusInputError(f"sweep dir {problem}: {root}")
    notes: list[str] = []
    expected, source = _expected_jobs(root, notes)
    records: dict[int, tuple[Path, dict[str, Any] | None]] = {}
    unnumbered: list[Path] = []
    for folder in job_folders(root):
        record = read_record(folder)
        if (num := job_num(folder, record)) is None:
            unnumbered.append(folder)
        else:
            records[num] = (folder, record)
    if not expected and not records:
        raise StatusInputError(f"no jobs found under {root}: no {MANIFEST_FILE}, no multirun.yaml, no job folder")
    jobs_by_num = {num: (overrides, slurm_id) for num, overrides, slurm_id in expected}
    for num, (folder, record) in records.items():
        if num not in jobs_by_num:
            jobs_by_num[num] = ([str(o) for o in (record or {}).get("overrides") or []], None)
            if expected:
                notes.append(f"{folder}: job {num} is not in {source} (kept)")
        if jobs_by_num[num][1] is None and record:  # the record names its Slurm task
            job = section(record, "job")
            if job.get("slurm_job_id") and job.get("slurm_array_index") is not None:
                jobs_by_num[num] = (jobs_by_num[num][0], f"{job['slurm_job_id']}_{job['slurm_array_index']}")
    array_ids = [sid.split("_", 1)[0] for _, sid in jobs_by_num.values() if sid]
    states = slurm_states(array_ids, notes) if use_slurm else None
    out = []
    for num in sorted(jobs_by_num):
        overrides, slurm_id = jobs_by_num[num]
        folder, record = records.get(num, (None, None))
        if folder is None and (root / str(num)).is_dir():
            folder = root / str(num)
        slurm = states.get(slurm_id) if states is not None and slurm_id else None
        if slurm is not None and slurm.state in ("FAILED", "CANCELLED") and (record or {}).get("status") != OK \
                and _killed_for_memory(root, slurm_id):
            slurm = dataclasses.replace(slurm, state="OUT_OF_MEMORY")
        out.append(resolve(num, overrides, record, folder, slurm, slurm_id))
    notes.extend(f"{folder}: a job folder without a job number (not shown)" for folder in unnumbered)
    return SweepStatus(sweep_dir=root, jobs=out, source=source, notes=notes)


#: Slurm's final states that settle a job whose record is still ``running`` or ``interrupted``
_SETTLING = ("CANCELLED", "TIMEOUT", "FAILED", "COMPLETED", *_SLURM_FAILED_REASON)


def slurm_verdicts(status: SweepStatus) -> dict[Path, tuple[JobStatus, dict[str, Any]]]:
    """The jobs Slurm ended (cancelled, timed out, killed for its memory) whose records still say ``running``
    or ``interrupted``, by folder, with those records: what Slurm's accounting adds to them. Reads only."""
    out = {}
    for job in status.jobs:
        if job.slurm_state not in _SETTLING or job.state not in (CANCELLED, TIMED_OUT, FAILED) or not job.folder:
            continue
        if (record := read_record(Path(job.folder))) is not None and record.get("status") in (RUNNING, INTERRUPTED):
            out[Path(job.folder)] = job, record
    return out


def slurm_error(job: JobStatus) -> str:
    """A job's error as Slurm's accounting gives it."""
    return f"{job.detail} (Slurm job {job.slurm_job_id}: {job.slurm_state}; from Slurm's accounting)"


def settle_records(status: SweepStatus) -> list[JobStatus]:
    """Write Slurm's final verdict into the records of the jobs it ended (:func:`slurm_verdicts`); the earlier
    status is kept as ``status_before``. The sweep's end does it, and ``sweeps.status --settle``."""
    settled = []
    for folder, (job, record) in slurm_verdicts(status).items():
        path = folder / RESULT_FILE
        record.update(status_before=record.get("status"), status=job.state, requeues=job.requeues,
                      error=slurm_error(job))
        if job.env_steps is not None:
            record["checkpoint_env_steps"] = job.env_steps
        try:
            write_json_atomic(path, record)
        except OSError as exc:
            status.notes.append(f"{path}: not updated ({exc})")
            continue
        settled.append(job)
    if settled:
        status.notes.append(f"{len(settled)} record(s) updated from Slurm's accounting: jobs "
                            + ", ".join(str(j.num) for j in settled))
    return settled



def render(status: SweepStatus) -> str:
    """The table: one line per job, then the counts and the exit status's meaning."""
    rows = [("job", "state", "slurm id", "detail", "overrides")]
    for j in status.jobs:
        state = j.state
        if j.requeues:
            state += f" (requeued x{j.requeues})" if j.state == OK else f" (x{j.requeues})"
        rows.append((str(j.num), state, j.slurm_job_id or "-", j.detail or "", " ".join(j.overrides) or "-"))
    widths = [max(len(r[i]) for r in rows) for i in range(4)]
    lines = ["  ".join(r[i].ljust(widths[i]) for i in range(4)) + "  " + r[4] for r in rows]
    counts = status.counts()
    order = [PENDING, RUNNING, REQUEUED, OK, FAILED, CANCELLED, TIMED_OUT, INTERRUPTED]
    summary = ", ".join([f"{counts[s]} {s}" for s in order if counts.get(s)]
                        + [f"{n} {s}" for s, n in counts.items() if s not in order])
    lines.append("")
    lines.append(f"{status.sweep_dir}: {len(status.jobs)} job(s): {summary} (jobs from {status.source})")
    lines.extend(f"note: {n}" for n in status.notes)
    code = status.exit_code()
    if code == EXIT_UNFINISHED:
        lines.append(f"unfinished: run this command again later; `python -m sweeps.report {status.sweep_dir}` "
                     "reports the finished jobs now")
    elif code == EXIT_FAILED:
        lines.append(f"finished, not all ok; resume the unfinished jobs with the sweep's command plus resume=true "
                     f"hydra.sweep.dir={status.sweep_dir}")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """``python -m sweeps.status <sweep_dir> [--json] [--no-slurm]``.

    Returns:
        0: every job ok; 1: all finished, some failed, cancelled, timed out or interrupted;
        2: bad input; 3: jobs still pending, running or requeued.
    """
    parser = argparse.ArgumentParser(prog="python -m sweeps.status",
                                     description="Where every job of a sweep stands (records + Slurm's accounting).")
    parser.add_argument("sweep_dir", help="the sweep's folder (hydra.sweep.dir)")
    parser.add_argument("--json", action="store_true", help="print the jobs as JSON instead of a table")
    parser.add_argument("--no-slurm", action="store_true", help="do not ask Slurm (sacct); records only")
    parser.add_argument("--settle", action="store_true",
                        help="write Slurm's verdict into the records of the jobs it ended (cancelled, timed out, out "
                             "of memory), which still say running: for a sweep launched with hydra.launcher.wait="
                             "false, whose records nobody else settles (without it this command only reads)")
    try:
        args = parser.parse_args(list(argv))
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else EXIT_BAD_INPUT
    try:
        status = sweep_status(args.sweep_dir, use_slurm=not args.no_slurm)
    except StatusInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    if args.settle:
        settle_records(status)
    if args.json:
        print(json.dumps({"sweep_dir": str(status.sweep_dir), "source": status.source, "notes": status.notes,
                          "counts": status.counts(), "exit_code": status.exit_code(),
                          "jobs": [dataclasses.asdict(j) for j in status.jobs]}, indent=1))
    else:
        print(render(status))
    return status.exit_code()
