"""The record store: a job's ``result.json``, a sweep's job folders, and the jobs a sweep expands to.

The job, the pre-flight checks, the launching process, its launchers, ``sweeps.status`` and the
report read and write records through here. No torch: status and the report stay cheap.
"""

from __future__ import annotations

import contextlib
import hashlib
import itertools
import json
import math
import os
import secrets
import socket
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"
MULTIRUN_FILE = "multirun.yaml"
#: in a sweep's folder: the jobs each job trains together under seeds_per_job, by its number
GROUPS_FILE = "seed_groups.json"
#: a job's checkpoint in its folder, and the first line of every checkpoint (rlsweep.checkpoint writes
#: them; its header, the JSON line after it, is read here without torch)
CHECKPOINT_FILE = "checkpoint.pt"
CHECKPOINT_MAGIC = b"RLSWEEP-CHECKPOINT 1\n"
_MAX_CHECKPOINT_HEADER = 1 << 20

STATUS_OK, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_RUNNING = "ok", "failed", "interrupted", "running"
#: the verdict on a ``running`` record whose process is gone (sweeps.status, the sweep's end, the report)
KILLED = "killed: the job's process ended without writing a result"
#: the error a job's ``running`` record carries while it trains: what it says if the process dies
RUNNING_ERROR = (f"{KILLED} (a signal such as SIGKILL, out of memory, or the machine went down) -- "
                 "or it is still running")


def killed_error(pid: int | None, log: Path | None = None) -> str:
    """A killed job's error, with what is known of its process."""
    return (KILLED + (f" (pid {pid})" if pid is not None else "")
            + " -- a signal such as SIGKILL, out of memory, or a crash of the interpreter"
            + (f"; its log: {log}" if log is not None else ""))

# Which config keys do not change a job, a checkpoint, a compiled graph or a cell: one home for each set;
# an identity of a config without one of them is :func:`config_identity`.
#: overrides that are switches of one invocation, not part of a job's identity
INVOCATION_KEYS = ("resume",)
#: config keys that do not change a job's result: a finished record made with other values of
#: these still counts as this job's result when resuming
RECORD_VOLATILE = ("resume", "progress", "logger", "checkpoint_interval_s", "objective", "prepare")
#: nor a checkpoint's training state: the evaluation runs after the last checkpoint
CHECKPOINT_VOLATILE = (*RECORD_VOLATILE, "eval_episodes")
#: nor a compiled graph: another budget or seed is not another compile
NOT_COMPILED = ("seed", "total_env_steps", "eval_episodes", "warmup_iters", *RECORD_VOLATILE)
#: keys of a job's overrides that do not make another cell: the repeat, switches of one invocation
NOT_CELL = ("seed", *INVOCATION_KEYS, "prepare")

#: the phases a record times (``timings.<phase>``), in the order an iteration runs them
PHASES = ("env_step", "act", "h2d", "d2h", "update")

#: a record's ``fixed_cost`` parts, in the order a job pays them (seconds; docs/reference/record.md)
FIXED_COST_PARTS = ("start_s", "write_s", "wandb_init_s", "wandb_wait_s", "envs_s", "setup_s", "warmup_s", "eval_s",
                    "wandb_finish_s")

#: folders of a sweep that hold no job, not looked into: the report's, W&B's; dot folders neither
_NOT_JOBS = ("report", "wandb")


def jsonable(value: Any) -> Any:
    """A JSON-ready copy, recursively: non-finite floats -> None (invalid JSON), paths -> str, numpy scalars -> Python."""
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    if type(value).__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        value = value.item()
    return None if isinstance(value, float) and not math.isfinite(value) else value


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync and rename (all or nothing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = _new_temp_file(path)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


def _new_temp_file(path: Path) -> tuple[int, str]:
    """A new file beside ``path``, opened for writing, with the permissions the umask gives any new
    file (mkstemp's 0600 would hide results from other users; reading the umask means setting it,
    which no thread may see half done)."""
    while True:
        tmp = str(path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"))
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (see :func:`write_bytes_atomic`)."""
    write_bytes_atomic(path, json.dumps(jsonable(data), indent=2, allow_nan=False).encode("utf-8"))


def write_result(output_dir: Path, record: dict[str, Any]) -> None:
    """Write ``record`` as the job's ``result.json`` in ``output_dir``, atomically, with the schema version."""
    write_json_atomic(Path(output_dir) / RESULT_FILE, {"schema_version": SCHEMA_VERSION, **record})


def read_result(output_dir: Path) -> dict[str, Any]:
    """The result record in ``output_dir``; raises when there is none or it is not JSON."""
    with open(Path(output_dir) / RESULT_FILE, encoding="utf-8") as f:
        return json.load(f)


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in ``path`` (each file rlsweep writes holds one); None when there is none or it cannot be read."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_record(out_dir: Path) -> dict[str, Any] | None:
    """The result record in ``out_dir``; None when there is none or it cannot be read."""
    return read_json(Path(out_dir) / RESULT_FILE)


def write_groups(sweep_dir: Path, nums: Sequence[int], groups: Mapping[int, list[dict[str, Any]]]) -> None:
    """Record which jobs train together (``seeds_per_job``): ``groups`` maps a job's number to its group's
    members (``num``, ``seed``, ``overrides``), itself first. Entries of the jobs ``nums`` left by an
    earlier launch of the sweep are replaced; a job in no group trains alone."""
    path = sweep_dir / GROUPS_FILE
    stale = {str(n) for n in nums}
    kept = {k: v for k, v in (read_json(path) or {}).items() if k not in stale}
    if groups or kept or path.is_file():
        write_json_atomic(path, {**kept, **{str(k): v for k, v in groups.items()}})


def read_group(sweep_dir: Path, num: int | None) -> list[dict[str, Any]] | None:
    """The members of the group job ``num`` of the sweep in ``sweep_dir`` trains (None: it trains alone)."""
    return None if num is None else (read_json(sweep_dir / GROUPS_FILE) or {}).get(str(num))


def checkpoint_head(header: Mapping[str, Any]) -> bytes:
    """What a checkpoint file starts with: the magic line, then ``header`` as one line of JSON."""
    return CHECKPOINT_MAGIC + json.dumps(header, sort_keys=True).encode() + b"\n"


def split_checkpoint(data: bytes) -> tuple[dict[str, Any] | None, bytes]:
    """A checkpoint's bytes (the whole file, or its start) as (header, what follows its line); the
    header is None when ``data`` does not start with one."""
    end = data.find(b"\n", len(CHECKPOINT_MAGIC))
    if not data.startswith(CHECKPOINT_MAGIC) or end < 0:
        return None, b""
    try:
        header = json.loads(data[len(CHECKPOINT_MAGIC):end])
    except ValueError:
        return None, b""
    return (header, data[end + 1:]) if isinstance(header, dict) else (None, b"")


def read_checkpoint_header(path: Path) -> dict[str, Any] | None:
    """The header of the checkpoint at ``path`` (not verified against the payload); None if it has none."""
    try:
        with open(path, "rb") as f:
            start = f.read(len(CHECKPOINT_MAGIC)) + f.readline(_MAX_CHECKPOINT_HEADER)
    except OSError:
        return None
    return split_checkpoint(start)[0]


def last_line(text: Any) -> str:
    """The last non-empty line of ``text``: of a record's error, the exception's message."""
    lines = [line.strip() for line in str(text or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""


def job_folders(root: Path) -> list[Path]:
    """The folders under ``root`` (itself included) that hold a job: a ``result.json`` or Hydra's ``.hydra``.

    Depth first in name order; a job folder is not looked into, nor are the folders that hold no job.
    """
    out: list[Path] = []
    stack = [Path(root)]
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            continue
        names = {e.name: e for e in entries}
        if (RESULT_FILE in names and names[RESULT_FILE].is_file()) or (".hydra" in names and names[".hydra"].is_dir()):
            out.append(folder)
            continue
        stack.extend(reversed([Path(e.path) for e in entries if e.is_dir(follow_symlinks=False)
                               and not e.name.startswith(".") and e.name not in _NOT_JOBS]))
    return out


def section(record: dict[str, Any], name: str) -> dict[str, Any]:
    """A sub-dict of a record; {} when missing or null (failed jobs may lack it)."""
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def job_num(folder: Path, record: dict[str, Any] | None = None) -> int | None:
    """The job's number in its sweep: the record's, else its folder's name when that is a number."""
    num = section(record or {}, "job").get("num")
    if isinstance(num, int) and not isinstance(num, bool):
        return num
    # isdigit alone takes "²" or "①", which int() refuses
    return int(folder.name) if folder.name.isascii() and folder.name.isdigit() else None


def walk_records(root: Path) -> list[tuple[Path, dict[str, Any]]]:
    """Every job folder under ``root`` with a readable result record, and that record."""
    return [(folder, record) for folder in job_folders(root) if (record := read_record(folder)) is not None]


def process_alive(pid: int) -> bool:
    """Whether process ``pid`` of this machine is running (a zombie is not: it only awaits reaping)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        try:
            os.kill(pid, 0)  # no /proc (macOS): existence only
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return state not in ("Z", "X")


def job_alive(record: dict[str, Any]) -> bool | None:
    """Whether the process that wrote ``record`` runs right now (this very process does not count); None
    when that process ran on another machine (or the record names none): it cannot be seen from here."""
    job = section(record, "job")
    pid = job.get("pid")
    if not isinstance(pid, int) or job.get("hostname") != socket.gethostname():
        return None
    return pid != os.getpid() and process_alive(pid)


def killed(record: dict[str, Any]) -> bool:
    """Whether ``record`` says ``running`` while the process that wrote it, on this machine, is gone: the
    verdict :data:`KILLED` (:func:`killed_error` when written into the record)."""
    return record.get("status") == STATUS_RUNNING and job_alive(record) is False


def override_key(override: str) -> str:
    """``+algo.lr=1`` -> ``algo.lr``."""
    return override.split("=", 1)[0].lstrip("+~")


def cell_key(overrides: Sequence[str], ignore: Sequence[str] = ("seed",)) -> tuple[str, ...]:
    """A job's cell (the jobs that differ only in their seed): its overrides but those of the keys ``ignore``."""
    return tuple(o for o in overrides if override_key(o) not in ignore)


def config_identity(config: Mapping[str, Any], ignore: Sequence[str]) -> str:
    """A config (a dict of its top-level keys) as one text without the keys ``ignore``: two configs are the
    same job, checkpoint or compile (by the key set passed) exactly when their texts are equal."""
    return json.dumps({k: v for k, v in config.items() if k not in ignore}, sort_keys=True, default=str)


def config_digest(config: Mapping[str, Any], ignore: Sequence[str] = (), length: int = 16) -> str:
    """:func:`config_identity`'s sha256, its first ``length`` hex digits."""
    return hashlib.sha256(config_identity(config, ignore).encode()).hexdigest()[:length]


def comparable_config(config: dict[str, Any]) -> str:
    """A job's resolved config without :data:`RECORD_VOLATILE` keys, as its record stores it, in one text."""
    from rlsweep.tracking import scrub  # here: its config import is not needed by status and the report

    return config_identity(scrub(config), RECORD_VOLATILE)


#: what a job does with the record in its folder (:func:`resume_decision`)
RUN, KEEP, NEEDS_RESUME, OTHER_CONFIG = "run", "keep", "needs resume", "other config"


def resume_decision(record: dict[str, Any] | None, config: Callable[[], dict[str, Any]], resume: bool) -> str:
    """The resume policy for one job folder holding ``record``, for the pre-flight checks and the job alike:
    :data:`RUN` (nothing finished there: rerun, from the checkpoint if any), :data:`NEEDS_RESUME` (finished,
    no ``resume=true``), :data:`OTHER_CONFIG` (finished with another config than ``config()``, called only
    then) or :data:`KEEP` (this job's finished result)."""
    if record is None or record.get("status") != STATUS_OK:
        return RUN
    if not resume:
        return NEEDS_RESUME
    return KEEP if comparable_config(section(record, "config")) == comparable_config(config()) else OTHER_CONFIG


def resume_refusal(decision: str, folder: Path, key: str) -> str | None:
    """Why a command may not write in ``folder`` after :func:`resume_decision` gave ``decision`` (None: it
    may), for the pre-flight checks and the job alike; ``key`` is the setting that chooses another folder."""
    if decision == NEEDS_RESUME:
        return f"{folder} already holds a finished result: add resume=true to keep it, or choose another {key}"
    if decision == OTHER_CONFIG:
        return (f"{folder} holds the finished result of a run with another config: resume=true continues "
                f"the same run; for a different one choose another {key}")
    return None


def parse_overrides(overrides: Sequence[str], config_loader: Any = None) -> list[Any]:
    """Hydra's parse of command-line overrides; without Hydra's ``config_loader`` a ``glob(...)`` sweep,
    which lists its config group's options, cannot be expanded (Hydra's BasicSweeper parses with its loader)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create(config_loader=config_loader).parse_overrides(list(overrides))


def is_basic_sweeper(target: Any) -> bool:
    """Whether sweeper ``target`` expands a grid of jobs (Hydra's or rlsweep's ``BasicSweeper``; a search, Optuna,
    chooses them as it goes); none named (a multirun.yaml always names its sweeper) is read as the basic one."""
    return not target or str(target).endswith("BasicSweeper")


def sweep_lists(task: Sequence[Any], params: Mapping[str, Any] | None = None,
                config_loader: Any = None) -> dict[str, list[str]]:
    """Each key's ``key=value`` options in the order listed (the sweeper's ``params``, then ``task``, as Hydra's
    BasicSweeper joins them); a later one for a key replaces an earlier one (``config_loader``: :func:`parse_overrides`).

    Raises:
        ValueError: a sweep that is not a list of values (``interval(...)``): the basic sweeper refuses it too.
    """
    lists: dict[str, list[str]] = {}
    arguments = [f"{k}={v}" for k, v in (params or {}).items()] + [str(t) for t in task]
    for ov in parse_overrides(arguments, config_loader):
        key = ov.get_key_element()
        if not ov.is_sweep_override():
            lists[key] = [f"{key}={ov.get_value_element_as_str()}"]
        elif ov.is_discrete_sweep():
            lists[key] = [f"{key}={v}" for v in ov.sweep_string_iterator()]
        else:
            raise ValueError(f"{ov.input_line}: the basic sweeper sweeps lists of values (a,b, range(...), choice(...), "
                             "glob(...)), not an interval; a search over one needs a sweeper that samples "
                             "(hydra/sweeper=optuna)")
    return lists


def expand_sweep(lists: Mapping[str, list[str]]) -> list[list[str]]:
    """Every job's overrides, in job order: the product of the options (see :func:`sweep_lists`)."""
    return [list(job) for job in itertools.product(*lists.values())]


def multirun_sweep(sweep_dir: Path, notes: list[str]) -> tuple[dict[str, Any], dict[str, list[str]]] | None:
    """The sweep's ``multirun.yaml`` (Hydra writes it before launching) and each swept key's options in it
    (:func:`sweep_lists`; its jobs: :func:`expand_sweep` of them), for the status and the report alike. None
    when there is none, or, with a note in ``notes``, when it cannot be read or parsed or its sweeper chooses
    its jobs as it goes (a search: Optuna), so that no grid of its ``choice(...)`` is expected."""
    import yaml

    path = Path(sweep_dir) / MULTIRUN_FILE
    if not path.is_file():
        return None
    try:
        cfg = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        if not isinstance(cfg, dict):
            raise TypeError("top level is not a mapping")
        hydra_cfg = cfg.get("hydra") or {}
        sweeper = hydra_cfg.get("sweeper") or {}
        if not is_basic_sweeper(sweeper.get("_target_")):
            notes.append(f"sweeper {sweeper['_target_']} chooses its jobs as it goes: none expected, jobs from their "
                         "folders only")
            return None
        return cfg, sweep_lists((hydra_cfg.get("overrides") or {}).get("task") or [], sweeper.get("params"))
    except Exception as exc:  # noqa: BLE001 - unreadable, or any parser failure: the jobs from their folders, say so
        notes.append(f"{MULTIRUN_FILE} not used ({type(exc).__name__}: {exc}); jobs from their folders only")
        return None
