"""What a sweep of many trivial jobs costs the launching process, the report and the status view.

    python scripts/scale.py --jobs 1000                           # pre-flight only (no job runs)
    python scripts/scale.py --jobs 1000 --sweep-dir /tmp/scale1000 --run        # run it too (basic launcher)
    python scripts/scale.py --jobs 256 --launcher submitit_slurm --sweep-dir /tmp/s256 --run   # on Slurm
    python scripts/scale.py --sweep-dir /tmp/scale1000 --skip-preflight         # report + status of a sweep
    python scripts/scale.py --code /tmp/old-checkout ...          # the same measurements with other code

Prints a markdown table (targets of issue 16: pre-flight <= 30 s, report <= 10 s, status <= 5 s at
1,000 jobs; every record ok) with the machine's fingerprint and its load.

- pre-flight: ``python -m sweeps.train -m <trivial sweep> seed=range(N)`` into a folder that holds
  one finished job, so the command checks every job's config and is then refused (exit 2, nothing
  run): process start, imports, expansion, every job checked. Also for 1 job, the fixed part.
- to the first job (``--first-job``): the sweep started for real into a scratch folder, timed until
  the launcher starts its first job, then stopped (Ctrl-C): pre-flight, Hydra's sweeper and the
  launcher's own set-up, i.e. all a user waits before anything trains.
- run (``--run``): the sweep itself with ``--launcher``; its wall time, the time until its first
  job started (the first record's ``started_at``), and whether ``sweeps.status`` says every job ok.
- report / status: ``python -m sweeps.report <sweep dir>`` and ``python -m sweeps.status <sweep dir>``
  on the sweep's folder (``--sweep-dir``, real records).

Wall times depend on the machine's load (a shared machine: see the load column); the CPU time of the
command (its user + system time, with its child processes) much less. Each figure is the median of
``--repeats`` runs (the pre-flight of old code at 1,000 jobs takes minutes: ``--preflight-repeats``).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import math
import os
import resource
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRIVIAL = ["experiment=smoke", "total_env_steps=256", "eval_episodes=0", "warmup_iters=0", "logger.mode=disabled",
           "progress=false"]
TARGETS_S = {"pre-flight": 30.0, "report": 10.0, "status": 5.0}  # at 1,000 jobs (issue 16)
REFUSED = "already holds 1 finished job(s)"


@dataclass
class Row:
    what: str
    jobs: int
    walls: list[float] = field(default_factory=list)
    cpus: list[float] = field(default_factory=list)
    loads: list[float] = field(default_factory=list)
    target: float | None = None
    note: str = ""
    ok: bool = True

    @property
    def wall(self) -> float:
        return statistics.median(self.walls)

    @property
    def cpu(self) -> float:
        return statistics.median(self.cpus)


def _env(code: Path) -> dict[str, str]:
    """The environment of a command that runs ``code``'s rlsweep (its src/ first on the path)."""
    path = os.pathsep.join(p for p in (str(code / "src"), str(code), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def _timed(args: list[str], code: Path, log: Path | None = None) -> tuple[float, float, float, subprocess.CompletedProcess]:
    """Run ``python args`` from ``code``: wall s, CPU s (user + system, children included), 1-min load before."""
    load = os.getloadavg()[0]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    if log is None:
        proc = subprocess.run([sys.executable, *args], cwd=code, env=_env(code), capture_output=True, text=True,
                              check=False)
    else:
        with open(log, "w", encoding="utf-8") as out:
            proc = subprocess.run([sys.executable, *args], cwd=code, env=_env(code), stdout=out,
                                  stderr=subprocess.STDOUT, text=True, check=False)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, load, proc


def _sweep_args(jobs: int, launcher: str, sweep_dir: Path) -> list[str]:
    seeds = "seed=0" if jobs == 1 else f"seed=range({jobs})"
    extra = ["hydra.launcher.timeout_min=10"] if "slurm" in launcher else []
    return ["-m", "sweeps.train", "-m", *TRIVIAL, seeds, f"hydra/launcher={launcher}", *extra,
            f"hydra.sweep.dir={sweep_dir}"]


def preflight(jobs: int, launcher: str, code: Path, repeats: int) -> Row:
    row = Row("pre-flight", jobs, target=TARGETS_S["pre-flight"] if jobs >= 1000 else None)
    for _ in range(repeats):
        folder = Path(tempfile.mkdtemp(prefix="rlsweep-scale-"))
        try:
            (folder / "0").mkdir()
            (folder / "0" / "result.json").write_text(json.dumps({"status": "ok"}), encoding="utf-8")
            wall, cpu, load, proc = _timed(_sweep_args(jobs, launcher, folder), code)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        if proc.returncode != 2 or REFUSED not in proc.stderr:  # refused for anything else: not measured
            row.ok, row.note = False, f"not refused as planned (exit {proc.returncode}): {proc.stderr.strip()[-300:]}"
            break
        row.walls.append(wall)
        row.cpus.append(cpu)
        row.loads.append(load)
    return row


def first_job(jobs: int, launcher: str, code: Path) -> Row:
    """Seconds from the command to the launcher starting its first job (the log's ``#<n> : ...``), then
    Ctrl-C: everything the launching process does before any job can run. Local launchers only."""
    row = Row("to the first job", jobs)
    folder = Path(tempfile.mkdtemp(prefix="rlsweep-scale-")) / "sweep"
    load = os.getloadavg()[0]
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, *_sweep_args(jobs, launcher, folder)], cwd=code, env=_env(code),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if "\t#" in line and " : " in line:
                row.walls.append(time.perf_counter() - start)
                row.loads.append(load)
                break
        else:
            row.ok, row.note = False, f"no job started (exit {proc.wait()})"
    finally:
        # the sweep stops as after a Ctrl-C (its job checkpoints and ends), else after a second one
        # ("stop now"), else it is killed; reading on all along: a full pipe would block its last words
        for _ in range(2):
            proc.send_signal(signal.SIGINT)
            try:
                proc.communicate(timeout=60)
                break
            except subprocess.TimeoutExpired:
                continue
        else:
            proc.kill()
            proc.communicate()
        shutil.rmtree(folder.parent, ignore_errors=True)
    row.cpus.append(float("nan"))  # the command is stopped in its first job: its CPU time is not the launcher's
    row.note = row.note or f"{launcher}; the command stopped with Ctrl-C once its first job started"
    return row


def run_sweep(jobs: int, launcher: str, sweep_dir: Path, code: Path) -> Row:
    if sweep_dir.exists() and any(sweep_dir.iterdir()):
        raise SystemExit(f"error: --run needs a new or empty --sweep-dir; {sweep_dir} holds files")
    sweep_dir.parent.mkdir(parents=True, exist_ok=True)
    log = sweep_dir.with_name(sweep_dir.name + ".log")
    launched = time.time()
    wall, cpu, load, proc = _timed(_sweep_args(jobs, launcher, sweep_dir), code, log=log)
    starts = []
    for record in sweep_dir.glob("*/result.json"):
        try:
            text = json.loads(record.read_text(encoding="utf-8")).get("started_at")
            starts.append(dt.datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp())
        except (OSError, ValueError, TypeError, AttributeError):
            continue
    first = f"first job started {min(starts) - launched:.1f} s after the command" if starts else "no job started"
    note = f"{launcher}; exit {proc.returncode}; {first}; log: {log}"
    return Row(f"run ({launcher})", jobs, [wall], [cpu], [load], note=note, ok=proc.returncode == 0)


def reading(what: str, sweep_dir: Path, code: Path, repeats: int) -> Row:
    jobs = sum(1 for _ in sweep_dir.glob("*/result.json"))
    row = Row(what, jobs, target=TARGETS_S[what] if jobs >= 1000 else None)
    args = ["-m", f"sweeps.{what}", str(sweep_dir)]
    for _ in range(repeats):
        wall, cpu, load, proc = _timed(args, code)
        row.walls.append(wall)
        row.cpus.append(cpu)
        row.loads.append(load)
        if proc.returncode != 0:
            row.ok = False
            row.note = f"exit {proc.returncode}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}"
    if what == "status" and row.ok:
        summary = [line for line in proc.stdout.splitlines() if " job(s): " in line]
        row.note = summary[-1].split(": ", 1)[1] if summary else ""
    return row


def _fingerprint() -> dict[str, object]:
    sys.path.insert(0, str(ROOT / "src"))
    from rlsweep.results import fingerprint

    fp = fingerprint()
    return {k: fp[k] for k in ("cpu_model", "cpu_count", "usable_cpus", "torch", "python", "platform", "hostname")}


def table(rows: list[Row], code: Path) -> str:
    lines = ["| measure | jobs | target | wall s (median) | wall s (each) | CPU s (median) | load (1 min) | ok | note |",
             "|---|---:|---:|---:|---|---:|---|---|---|"]
    for r in rows:
        if not r.walls:
            lines.append(f"| {r.what} | {r.jobs} | | | | | | no | {r.note} |")
            continue
        target = f"<= {r.target:g} s" if r.target else ""
        met = r.ok and (r.target is None or r.wall <= r.target)
        lines.append(f"| {r.what} | {r.jobs} | {target} | {r.wall:.1f} | {', '.join(f'{w:.1f}' for w in r.walls)} | "
                     f"{'-' if math.isnan(r.cpu) else f'{r.cpu:.1f}'} | {', '.join(f'{v:.1f}' for v in r.loads)} | {'yes' if met else 'NO'} | {r.note} |")
    try:
        commit = subprocess.run(["git", "-C", str(code), "rev-parse", "--short", "HEAD"], capture_output=True,
                                text=True, check=False, timeout=10).stdout.strip() or "not a git checkout"
    except OSError:
        commit = "unknown"
    fp = _fingerprint()
    lines += ["", f"Code: {code} ({commit}). Machine: " + ", ".join(f"{k}={v}" for k, v in fp.items()) + "."]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--jobs", type=int, default=1000, help="jobs of the trivial sweep (seeds)")
    parser.add_argument("--launcher", default="basic", help="hydra/launcher= of the sweep (basic, submitit_local, "
                        "submitit_slurm)")
    parser.add_argument("--sweep-dir", type=Path, default=None, help="the sweep's folder: report and status read it; "
                        "with --run, the sweep is run into it first")
    parser.add_argument("--run", action="store_true", help="run the sweep (minutes: one trivial job is seconds)")
    parser.add_argument("--skip-preflight", action="store_true")
    parser.add_argument("--first-job", action="store_true", help="also time the command up to its first job "
                        "(local launchers; the sweep is stopped there)")
    parser.add_argument("--repeats", type=int, default=3, help="runs of each cheap measurement (median)")
    parser.add_argument("--preflight-repeats", type=int, default=None, help="runs of the pre-flight (default --repeats)")
    parser.add_argument("--code", type=Path, default=ROOT, help="the rlsweep checkout to measure (default: this one)")
    args = parser.parse_args(argv)
    code = args.code.resolve()
    rows: list[Row] = []
    if not args.skip_preflight:
        repeats = args.preflight_repeats or args.repeats
        rows.append(preflight(1, args.launcher, code, repeats))
        rows.append(preflight(args.jobs, args.launcher, code, repeats))
    if args.first_job:
        if "slurm" in args.launcher:
            parser.error("--first-job measures local launchers (a Slurm job's start waits for the queue)")
        rows.append(first_job(args.jobs, args.launcher, code))
    if args.run:
        if args.sweep_dir is None:
            parser.error("--run needs --sweep-dir")
        rows.append(run_sweep(args.jobs, args.launcher, args.sweep_dir.resolve(), code))
    if args.sweep_dir is not None:
        rows.append(reading("report", args.sweep_dir.resolve(), code, args.repeats))
        rows.append(reading("status", args.sweep_dir.resolve(), code, args.repeats))
    print(table(rows, code))
    return 0 if all(r.ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
