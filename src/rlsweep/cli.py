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
from typing import TYPE_CHECKING, Any

from rlsweep.records import (
    STATUS_FAILED,
    STATUS_RUNNING,
    job_alive,
    killed,
    killed_error,
    process_alive,
    walk_records,
    write_result,
)
from rlsweep.signals import collection_deferred, skip_final_gc_at_exit

if TYPE_CHECKING:
    from rlsweep.hydra_callbacks import SweepSession

log = logging.getLogger(__name__)

#: how often the launching process looks at jobs that are still running, in seconds
_POLL_S = 0.5
#: Hydra's flags for a sweep (``hydra.mode=MULTIRUN`` is its override for one)
MULTIRUN_FLAGS = ("-m", "--multirun")


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt("SIGTERM")


@contextlib.contextmanager
def train_entry() -> Iterator[None]:
    """Around the Hydra main of ``sweeps/train.py``.

    - ``RLSWEEP_DEBUG=1`` turns on Hydra's full tracebacks too (``HYDRA_FULL_ERROR=1``).
    - Bad input that Hydra finds itself (an option or key that does not exist, a value of the wrong
      type) ends as rlsweep's checks do: one message, exit status 2, before any output folder exists.
    - SIGTERM outside a training loop stops like Ctrl-C (inside one, the loop checkpoints first).
    - After a multirun, also one whose jobs failed or were interrupted: the comparison report.
    - Ctrl-C / SIGTERM ends with one line that says how to continue, exit status 128 + signal.
    - The process's exit skips the last garbage collection (:func:`skip_final_gc_at_exit`); a run's process
      collects none until its training begins (:func:`rlsweep.signals.collection_deferred`).
    """
    from rlsweep import folder_lock
    from rlsweep.hydra_callbacks import command_session, debug_enabled, fail, hydra_errors_as_bad_input
    from rlsweep.launchers import own_nodes
    from rlsweep.toggles.compile import claim_cache_env

    skip_final_gc_at_exit()
    claim_cache_env()
    if debug_enabled():
        os.environ["HYDRA_FULL_ERROR"] = "1"
    sys.argv[1:] = own_nodes(multirun_flag_first(sys.argv[1:]))
    if problems := group_value_errors(sys.argv[1:]):
        fail(problems, title="invalid command line")
    one_run = not {*MULTIRUN_FLAGS, "hydra.mode=MULTIRUN"} & set(sys.argv[1:])
    with command_session() as session, collection_deferred() if one_run else contextlib.nullcontext():
        previous = signal.signal(signal.SIGTERM, _on_sigterm)
        try:
            with finish_sweep(session), hydra_errors_as_bad_input():
                yield
        except KeyboardInterrupt as exc:
            if debug_enabled():
                raise
            name = "SIGTERM" if "SIGTERM" in str(exc) else "SIGINT"
            where, key = ((session.sweep_dir, "hydra.sweep.dir") if session.sweep_dir
                          else (session.run_dir or "<the run's folder>", "hydra.run.dir"))
            print(f"rlsweep: stopped by {name}. Interrupted jobs wrote a checkpoint and an `interrupted` record; "
                  f"to continue, run the same command again with resume=true {_override(key, where)}", file=sys.stderr)
            raise SystemExit(128 + getattr(signal, name)) from None
        except Exception as exc:  # Hydra reports errors of jobs itself, hydra_errors_as_bad_input the input's
            if debug_enabled():
                raise
            print(f"rlsweep: {type(exc).__name__}: {exc}\n(RLSWEEP_DEBUG=1 shows the traceback)", file=sys.stderr)
            raise SystemExit(1) from None
        finally:
            signal.signal(signal.SIGTERM, previous)
            folder_lock.release_all()  # the end of the process does the same; this is for callers in-process


def multirun_flag_first(args: list[str]) -> list[str]:
    """``-m``/``--multirun`` moved before the overrides, wherever it was typed (Hydra's parser takes the
    overrides as one run of positional arguments: ``algo=td3 -m compile=none`` ends in "unrecognized arguments")."""
    flags = [a for a in args if a in MULTIRUN_FLAGS]
    if not flags or "--" in args:
        return args
    return [flags[0], *(a for a in args if a not in MULTIRUN_FLAGS)]


def _config_dirs(args: list[str]) -> list[Path]:
    """rlsweep's primary config folder, and every ``--config-dir`` of ``args``."""
    from rlsweep.resources import CONF_DIR

    dirs = [CONF_DIR]
    for i, arg in enumerate(args):
        if arg in ("--config-dir", "-cd") and i + 1 < len(args):
            dirs.append(Path(args[i + 1]).expanduser())
        elif arg.startswith("--config-dir="):
            dirs.append(Path(arg.split("=", 1)[1]).expanduser())
    return [d for d in dirs if d.is_dir()]


def group_value_errors(args: list[str]) -> list[str]:
    """What is wrong with the command line's overrides, all at once, before Hydra stops at the first: a key
    given again after a sweep of it (Hydra keeps the last, so ``dtype=float32,bfloat16 ... dtype=float16``
    silently sweeps one value), a config group's value that is a number, a bool or null (``compile=0``: Hydra's traceback), an
    option no config folder has (``dtype=bf16 compile=maxauto``: both named)."""
    from hydra.errors import HydraException
    from omegaconf import OmegaConf

    from rlsweep.config import TrainConfig
    from rlsweep.hydra_callbacks import option_error
    from rlsweep.records import parse_overrides
    from rlsweep.toggles import text

    overrides = [a for a in args if "=" in a and not a.startswith("-")]
    try:
        parsed = parse_overrides(overrides)
    except HydraException:
        return []  # a syntax error: Hydra's own message says where
    dirs = _config_dirs(args)
    schema = OmegaConf.structured(TrainConfig)
    # a config group: a node of the schema that is not a value (algo's is typed by its class), or a config folder's
    groups = {"algo", *(k for k in schema if OmegaConf.is_dict(schema._get_node(k)))}
    groups |= {p.name for d in dirs for p in d.iterdir() if p.is_dir()}
    errors = []
    given: dict[str, list[Any]] = {}
    for o in parsed:
        if not o.is_delete():
            given.setdefault(o.key_or_group, []).append(o)
    for key, each in given.items():
        if len(each) > 1:
            times = "twice" if len(each) == 2 else f"{len(each)} times"
            twice = f"{key} is given {times} ({' and '.join(o.input_line for o in each)})"
            if any(o.is_sweep_override() for o in each[:-1]):  # Hydra keeps the last: a sweep would lose its values
                errors.append(f"{twice}: Hydra would keep only the last; give each key once (a sweep: key=a,b)")
            else:  # a plain value replaced, as Hydra users expect (e.g. an experiment's budget, then a sweep's)
                print(f"rlsweep: {twice}: the last one is used", file=sys.stderr)
    for o in parsed:
        key = o.key_or_group
        if "/" not in key and key not in groups:
            continue
        value = o.value()
        values = list(getattr(value, "list", None) or ([value] if not isinstance(value, list) else value))
        options = sorted({p.stem for d in dirs for p in (d / key).glob("*.yaml")})
        wrong = [v for v in values if isinstance(v, (int, float, bool)) or v is None]
        if wrong:
            choose = f"; choose one of: {', '.join(options)}" if options else ""
            shown = ", ".join(text(v) for v in wrong)
            errors.append(f"{o.input_line}: an option of the config group {key} is a name, not {shown}{choose}")
        elif options and not key.startswith("hydra/") and not o.is_delete():  # a launcher's options are plugins'
            errors += [option_error(key, v, options) for v in values if isinstance(v, str) and v not in options]
    return errors + _type_errors(schema, [o for o in parsed if not o.is_delete() and o.key_or_group not in groups],
                                 _chosen_algos(given, dirs))


def _values(override: Any) -> list[str]:
    value = override.value()
    return [str(v) for v in (getattr(value, "list", None) or [value])]


def _chosen_algos(given: dict[str, list[Any]], dirs: list[Path]) -> list[type]:
    """The hyper-parameter schemas of the algorithms the command line trains: ``algo=...`` (each of a sweep), else
    the experiment preset's (its ``override /algo``), else the primary config's default; a plugin's is its
    class's ``config_class``. Empty where that is Hydra's to decide (a preset that chooses one and ``algo=``)."""
    presets = [_yaml(dirs, "experiment", e) for e in _values(given["experiment"][-1])] if "experiment" in given else []
    chosen = [next((str(v) for d in p.get("defaults") or [] if isinstance(d, dict)
                    for k, v in d.items() if k.replace(" ", "") == "override/algo"), None) for p in presets]
    if "algo" in given:  # Hydra keeps the last
        names = [] if any(chosen) else _values(given["algo"][-1])
    else:
        names = [c or "ppo" for c in chosen] or ["ppo"]  # conf/config.yaml's default (test_bad_input.py agrees)
    return [schema for name in names if (schema := _algo_schema(name, dirs)) is not None]


def _yaml(dirs: list[Path], group: str, name: str) -> dict[str, Any]:
    """The option ``name`` of config group ``group`` as the last of ``dirs`` that has it holds it ({} if none)."""
    import yaml

    for d in reversed(dirs):
        if (path := d / group / f"{name}.yaml").is_file():
            try:
                return yaml.safe_load(path.read_text()) or {}
            except (OSError, yaml.YAMLError):
                return {}
    return {}


def _algo_schema(name: str, dirs: list[Path]) -> type | None:
    """A built-in algorithm's hyper-parameter dataclass, or a plugin's (its YAML's ``_target_``); None if unknown."""
    from rlsweep.config import ALGO_SCHEMAS
    from rlsweep.hydra_callbacks import algo_schema

    if name in ALGO_SCHEMAS:
        return ALGO_SCHEMAS[name]
    node = _yaml(dirs, "algo", name)
    node = node.get("algo", node)  # a `# @package _global_` option nests its node under algo:
    return algo_schema(node.get("_target_") if isinstance(node, dict) else None)


def _type_errors(schema: Any, parsed: list[Any], algos: list[type]) -> list[str]:
    """Each value of a key of ``schema`` (TrainConfig's) that its type refuses (``seed=abc total_env_steps=xyz``:
    both named; Hydra would stop at the first). An algorithm's own keys (``algo.clip_coef``) are checked against the
    schema of each of ``algos`` that has them; a key none has is left to Hydra."""
    import copy

    from omegaconf import OmegaConf, ValueNode
    from omegaconf.errors import OmegaConfBaseException

    own = [OmegaConf.structured(a) for a in algos]
    errors = []
    for o in parsed:
        parent_key, _, leaf = o.key_or_group.rpartition(".")
        parent = OmegaConf.select(schema, parent_key) if parent_key else schema
        node = parent._get_node(leaf) if OmegaConf.is_dict(parent) and leaf in parent else None
        if node is None and parent_key == "algo":
            node = next((a._get_node(leaf) for a in own if leaf in a), None)
        if not isinstance(node, ValueNode):
            continue
        value = o.value()
        values = getattr(value, "list", None) if o.is_sweep_override() else [value]
        for v in values or ():  # a range or interval sweep, a glob: Hydra expands and checks them itself
            if isinstance(v, str) and "${" in v or not isinstance(v, (str, int, float, bool, type(None))):
                continue  # an interpolation: resolved against the composed config
            try:
                copy.copy(node)._set_value(v)
            except OmegaConfBaseException as exc:  # OmegaConf's own words, as Hydra would print them
                why = str(exc).splitlines()[0].replace("$VALUE_TYPE", type(v).__name__).replace("$VALUE", str(v))
                errors.append(f"{o.input_line}: {why}" if len(values) == 1 else f"{o.input_line}: {v!r}: {why}")
    return errors


def _override(key: str, path: str) -> str:
    """``key=path`` as one shell word that Hydra's override grammar reads back as the same folder."""
    if all(c.isalnum() or c in "/._-" for c in path):
        return f"{key}={path}"
    hydra_text = '"' + path.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return shlex.quote(f"{key}={hydra_text}")


@contextlib.contextmanager
def finish_sweep(session: SweepSession) -> Iterator[None]:
    """After a multirun, also a failed one (Hydra skips ``on_multirun_end``): wait for its jobs still running
    here, settle the records of the jobs that were killed (the one writer of those verdicts: ``sweeps.status``
    and the report only read them, but ``sweeps.status --settle``), write the report, print the line that
    uploads its offline W&B runs."""
    report_rc = 0
    try:
        yield
    finally:
        if session.submitted:  # hydra.launcher.wait=false: the jobs were only submitted; no waiting, no report yet
            print("\n".join(session.submitted), flush=True)
        elif session.sweep_dir and Path(session.sweep_dir).is_dir():
            sweep = Path(session.sweep_dir)
            try:
                wait_for_jobs(sweep, local_jobs=session.launcher == "LocalLauncher")
                mark_killed_jobs(sweep)
                if session.launcher == "SlurmLauncher":  # the jobs Slurm ended: its verdict into their records
                    from rlsweep.status import settle_records, sweep_status

                    settle_records(sweep_status(sweep))
            except Exception as exc:  # noqa: BLE001 - never lose the report over this
                log.warning("checking the sweep's jobs failed: %s", exc)
            t0 = time.perf_counter()
            try:
                from rlsweep.report import main as report_main

                report_rc = report_main([str(sweep)])
            except Exception as exc:  # noqa: BLE001 - the sweep's results are on disk either way
                print(f"rlsweep: the sweep report failed ({type(exc).__name__}: {exc}); "
                      f"run `python -m sweeps.report {sweep}`", file=sys.stderr)
                report_rc = 1
            with contextlib.suppress(Exception):  # a summary line only
                if line := wall_time_line(sweep, time.perf_counter() - t0):
                    print(line, flush=True)
            if report_rc:  # the report, which says how to upload the sweep's offline W&B runs, did not end
                from rlsweep.report.workspace import print_upload_line

                print_upload_line(sweep)
    # reached only when the sweep itself ended without an exception: a report that could not be
    # written (it said why) must not end the command with status 0
    if report_rc:
        raise SystemExit(report_rc)


def wall_time_line(sweep: Path, report_s: float) -> str | None:
    """Where this command's wall time went: its start-up, the sweep's preparation, the timed jobs (the sum of
    their ``wall_s``, or their span when they ran side by side), what the jobs spent outside their clocks, the
    report. None without the process's start time (not Linux)."""
    from rlsweep.prepare import read_prepare
    from rlsweep.report.measurement import parse_time
    from rlsweep.results import process_age_s

    age = process_age_s()
    if age is None:
        return None
    began = time.time() - age
    jobs = [(parse_time(r.get("started_at")), parse_time(r.get("finished_at")), r.get("wall_s") or 0.0)
            for _, r in walk_records(sweep) if (parse_time(r.get("started_at")) or 0) >= began]
    prepared = read_prepare(sweep) or {}
    prep_s = prepared.get("prepare_s") or 0.0
    if (parse_time(prepared.get("written_at")) or 0) < began:
        prep_s = 0.0  # an earlier run's (a resumed sweep)
    starts = [s for s, _, _ in jobs if s] + ([parse_time(prepared["written_at"]) - prep_s] if prep_s else [])
    start_up = (min(starts) - began) if starts else 0.0
    timed = sum(w for _, _, w in jobs)
    span = (max(f or 0 for _, f, _ in jobs) - min(s or 0 for s, _, _ in jobs)) if jobs else 0.0
    side_by_side = timed > span * 1.05  # jobs overlapped: their sum is not wall time
    ran = span if side_by_side else timed
    rest = age - start_up - prep_s - ran - report_s
    how = f"the {len(jobs)} timed jobs " + (f"{span:.1f} s (side by side: {timed:.1f} s of wall_s in all)"
                                             if side_by_side else f"{timed:.1f} s (the sum of their wall_s)")
    return (f"Wall time {age:.1f} s = {how}, preparation {prep_s:.1f} s, start-up {start_up:.1f} s (interpreter, "
            f"imports, composition, checks), between and around the jobs {rest:.1f} s (Hydra's job set-up, W&B "
            f"finish, records), report {report_s:.1f} s" + (f": {age / ran:.2f}x the timed jobs." if ran else "."))


def _running_records(sweep: Path) -> list[tuple[Path, dict[str, Any]]]:
    return [(d, r) for d, r in walk_records(sweep) if r.get("status") == STATUS_RUNNING]


def _local_submitit_pids(sweep: Path) -> list[int]:
    """Processes of submitit_local jobs of this sweep that are still running (job id = pid)."""
    pids = []
    root = sweep / ".submitit"
    for folder in root.iterdir() if root.is_dir() else []:
        if not (folder.name.isascii() and folder.name.isdigit()) or not process_alive(int(folder.name)):
            continue
        try:
            cmdline = Path(f"/proc/{folder.name}/cmdline").read_bytes()
        except OSError:
            continue
        if b"submitit" in cmdline:
            pids.append(int(folder.name))
    return pids


def wait_for_jobs(sweep: Path, local_jobs: bool) -> None:
    """Wait while jobs of ``sweep`` still run on this machine: after a job failed, or after a stop signal
    while the stopped jobs write their checkpoints. Ctrl-C stops waiting (and a job that already got
    one stop request stops at once)."""
    said = False
    try:
        while True:
            running = [d for d, r in _running_records(sweep) if job_alive(r)]
            pids = _local_submitit_pids(sweep) if local_jobs else []
            if not running and not pids:
                return
            if not said:
                what = ", ".join(str(d) for d in running) or f"submitit processes {pids}"
                print(f"rlsweep: waiting for the sweep's jobs still running ({what}) before the report "
                      "(Ctrl-C stops waiting)", file=sys.stderr)
                said = True
            time.sleep(_POLL_S)
    except KeyboardInterrupt:
        print("rlsweep: not waiting any longer; the report shows those jobs as they are now", file=sys.stderr)


def mark_killed_jobs(sweep: Path) -> None:
    """Turn the ``running`` records of this machine's jobs whose process is gone into ``failed`` ones that say so."""
    for folder, record in walk_records(sweep):
        if not killed(record):  # not running, alive, or on another machine: not seen from here
            continue
        record.pop("schema_version", None)
        record.update(status=STATUS_FAILED, error=killed_error(record["job"]["pid"], folder / "train.log"))
        write_result(folder, record)
