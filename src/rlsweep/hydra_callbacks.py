"""Hydra callback: check every job's config, and where it will write, before the first job starts.

Before Hydra creates any output folder: every job as the basic sweeper will expand it (:func:`_check_jobs`),
then the output folder: writable, and holding no finished job unless ``resume=true`` keeps it. Every
problem ends the run with one message and exit status 2 (``RLSWEEP_DEBUG=1``: the traceback too).
"""

from __future__ import annotations

import contextlib
import contextvars
import copy
import dataclasses
import difflib
import os
import sys
import tempfile
import traceback
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NoReturn

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf, read_write

from rlsweep.algos import to_object
from rlsweep.config import config_values
from rlsweep.launchers import SEED_KEY, max_parallel_error
from rlsweep.records import (
    NEEDS_RESUME,
    OTHER_CONFIG,
    STATUS_RUNNING,
    expand_sweep,
    is_basic_sweeper,
    job_alive,
    override_key,
    parse_overrides,
    read_record,
    resume_decision,
    resume_refusal,
    sweep_lists,
    walk_records,
)
from rlsweep.validate import ConfigError, seed_errors, validate


@dataclasses.dataclass
class SweepSession:
    """What the launching process learns about one command while Hydra runs it: set by its
    :class:`RLSweepCallback` and rlsweep's launchers (which reach it through Hydra's context,
    :func:`session_of`), read by :mod:`rlsweep.cli` around the Hydra main."""

    run_dir: str | None = None  # the single run's folder (for messages)
    sweep_dir: str | None = None  # where the sweep writes, once its checks passed (for the report)
    launcher: str | None = None  # the launcher's class name (LocalLauncher: jobs are local processes)
    #: the override lists of the jobs checked, as the sweeper will launch them (not composed again)
    checked_jobs: set[tuple[str, ...]] = dataclasses.field(default_factory=set)
    #: what to print once Hydra is done when the Slurm launcher returned without waiting
    #: (``hydra.launcher.wait=false``): then no report
    submitted: list[str] = dataclasses.field(default_factory=list)


#: the command being run in this context: opened by :func:`command_session`, bound by the callback Hydra makes
_COMMAND: contextvars.ContextVar[SweepSession] = contextvars.ContextVar("rlsweep_command")


@contextlib.contextmanager
def command_session() -> Iterator[SweepSession]:
    """One command's session, from before Hydra starts until the CLI has finished with it; nothing of it
    outlives the command (a test or notebook may run several in one process)."""
    token = _COMMAND.set(SweepSession())
    try:
        yield _COMMAND.get()
    finally:
        _COMMAND.reset(token)


def current_session() -> SweepSession:
    """This command's session; a fresh one, shared by nobody, outside :func:`command_session`."""
    return _COMMAND.get(None) or SweepSession()


def session_of(hydra_context: Any) -> SweepSession | None:
    """The session of the command whose Hydra context this is (its rlsweep callback's); None when this
    Hydra app has no rlsweep callback: rlsweep's launchers then run its jobs with nothing to tell."""
    callbacks = getattr(getattr(hydra_context, "callbacks", None), "callbacks", None) or []
    return next((c.session for c in callbacks if isinstance(c, RLSweepCallback)), None)


RESUME_KEY = "resume"
FOLDER = "output folder not usable"


def debug_enabled() -> bool:
    """``RLSWEEP_DEBUG=1``: show tracebacks instead of one-message errors."""
    return os.environ.get("RLSWEEP_DEBUG", "").strip().lower() not in ("", "0", "false", "no")


def fail(lines: list[str], job: str | None = None, cause: BaseException | None = None,
          title: str = "invalid configuration") -> NoReturn:
    """End the command with one message that lists ``lines``, exit status 2 (``RLSWEEP_DEBUG=1``: the traceback too)."""
    where = f" (job with overrides: {job})" if job else ""
    msg = "\n".join("  - " + line.replace("\n", "\n    ") for line in lines)
    text = f"rlsweep: {title}{where}:\n{msg}\nNothing was run."
    if debug_enabled():
        # Hydra turns exceptions of callbacks into warnings: print the traceback, then stop
        traceback.print_stack(file=sys.stderr)
        error = ConfigError(text)
        error.__cause__ = cause
        traceback.print_exception(error, file=sys.stderr)
    print(text, file=sys.stderr)
    raise SystemExit(2)


def refuse(exc: BaseException) -> NoReturn:
    """End the command on ``exc``, an error of its input, as every check here does (:func:`fail`)."""
    fail(_error_lines(exc), cause=exc)


def command_accepted() -> bool:
    """Whether this command's callback accepted it: from then on errors are the jobs', not the input's."""
    session = current_session()
    return bool(session.run_dir or session.sweep_dir)


@contextlib.contextmanager
def hydra_errors_as_bad_input() -> Iterator[None]:
    """Around the Hydra main: an error of the command line raised before the callback accepted the command
    ends as rlsweep's checks do (:func:`fail`): in Hydra's ``run_and_report`` (``dtype=bf16``: else its
    message, exit 1) and outside it (--help with a typo, flags)."""
    from hydra._internal import utils

    hydras = utils.run_and_report

    def run_and_report(func: Any) -> Any:
        def checked() -> Any:
            try:
                return func()
            except Exception as exc:
                if not command_accepted():
                    refuse(exc)
                raise

        return hydras(checked)

    utils.run_and_report = run_and_report
    try:
        yield
    except Exception as exc:
        if not command_accepted():
            refuse(exc)
        raise
    finally:
        utils.run_and_report = hydras


def _unknown_key_line(exc: BaseException) -> str | None:
    """A key that its config node does not have (``twin_module=true``), said with the closest keys it
    has (Hydra's advice of ``+key=value`` cannot fix a typo); None for any other error."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError

    from rlsweep.config import algo_owner, unknown_key_message

    error = exc if isinstance(exc, (ConfigAttributeError, ConfigKeyError)) else exc.__cause__
    if not isinstance(error, (ConfigAttributeError, ConfigKeyError)):
        return None
    parent, key, full_key = error.parent_node, error.key, error.full_key
    if not isinstance(parent, DictConfig) or not key or not full_key or f"Key '{key}' " not in str(error):
        return None
    path = full_key.rpartition(".")[0]
    keys = list(parent.keys())
    kind = OmegaConf.get_type(parent)
    schema = kind if dataclasses.is_dataclass(kind) else None
    if path == "algo":
        target = parent.get("_target_")
        if schema is None and (schema := algo_schema(target)):  # a plugin's node, typed by its YAML file
            keys = [f.name for f in dataclasses.fields(schema)]
        if key in keys:
            return (f"{full_key} is a hyper-parameter of {target} that its config file does not list: "
                    f"set it with +{full_key}=<value>")
        return unknown_key_message(full_key, keys, algo_owner(target, schema))
    owner = f"{path or 'the config'}" + (f" ({schema.__name__})" if schema else "")
    return unknown_key_message(full_key, keys, owner)


def algo_schema(target: Any) -> type | None:
    """The hyper-parameter dataclass of the algorithm class ``target`` names; None if it names none importable here."""
    from rlsweep.algos import algorithm_class

    try:
        return algorithm_class(str(target)).config_class if target else None
    except Exception:  # noqa: BLE001 - not importable here: Hydra and the pre-flight say why
        return None


def _missing_option_line(exc: BaseException) -> str | None:
    """A config group's option that does not exist (``dtype=bf16``), said with the closest options;
    None for any other error (also a group with no options: Hydra's text names its search path)."""
    from hydra.errors import MissingConfigException

    if not isinstance(exc, MissingConfigException) or not exc.options or not exc.missing_cfg_file:
        return None
    group, _, choice = str(exc.missing_cfg_file).rpartition("/")
    return option_error(group, choice, sorted(str(o) for o in exc.options)) if group else None


def option_error(group: str, choice: str, options: list[str]) -> str:
    close = difflib.get_close_matches(choice, options, n=1)
    hint = f" (did you mean {group}={close[0]}?)" if close else ""
    return f"{group}={choice} is not an option of {group}{hint}; choose one of: {', '.join(options)}"


def _error_lines(exc: BaseException) -> list[str]:
    """An exception as the message Hydra would print for it (its own errors, and rlsweep's ``ConfigError``:
    without their type), or, for an unknown key or option, one line with the closest ones."""
    from hydra.errors import CompactHydraException
    from omegaconf.errors import OmegaConfBaseException

    if isinstance(exc, ConfigError):  # rlsweep's own, meant for the user as is (algo._target_ names no Algorithm)
        return [str(exc)]
    if line := _unknown_key_line(exc) or _missing_option_line(exc):
        return [line]
    if isinstance(exc, CompactHydraException):  # ConfigCompositionException, MissingConfigException, ...
        lines = [str(exc).strip()]
        if isinstance(exc.__cause__, OmegaConfBaseException):  # e.g. the ValidationError of a merge
            lines[0] += "\n" + str(exc.__cause__).strip()
        return lines
    return [f"{type(exc).__name__}: {exc}"]


def _check(cfg: DictConfig, *, check_device: bool, job: str | None = None) -> dict[str, Any]:
    """Check one job's composed config; returns it as the job will record it (:func:`config_values`)."""
    try:
        typed = to_object(cfg)
        errors = _choice_errors(cfg) + validate(typed, check_device=check_device)
    except Exception as exc:  # noqa: BLE001 - e.g. an interpolation that cannot resolve, a key added with +
        fail(_error_lines(exc), job, exc)
    if errors:
        fail(errors, job)
    return config_values(typed)


def _choice_errors(cfg: DictConfig) -> list[str]:
    """Options chosen for a config group that does not have them: Hydra rejects these itself, except in
    groups the defaults list marks ``optional``, where ``experiment=smok`` would silently run without the preset."""
    from hydra.core.global_hydra import GlobalHydra

    choices = OmegaConf.select(cfg, "hydra.runtime.choices", default=None) or {}
    loader = GlobalHydra.instance().config_loader()
    errors = []
    for key, choice in choices.items():
        group = str(key).split("@", 1)[0]
        if choice is None or group.startswith("hydra/"):
            continue
        # a choice Hydra loaded exists: a cheap look-up settles it; the costly full list only for one that may not
        if loader.repository.config_exists(f"{group}/{choice}"):
            continue
        options = loader.get_group_options(group)
        if options and choice not in options:
            errors.append(option_error(group, str(choice), options))
    return errors


def _launcher(config: DictConfig) -> str:
    """The class name of the sweep's launcher (``LocalLauncher``: jobs are processes of this machine)."""
    return str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "").rsplit(".", 1)[-1]


#: Slurm sends the --signal warning up to this many seconds earlier than asked (sbatch(1), --signal)
SLURM_SIGNAL_SLOP_S = 60


def _launcher_errors(config: DictConfig) -> list[str]:
    """A limit on local jobs at once below 1; a Slurm time limit too short for submitit's time-out
    signal (``signal_delay_s`` before it, or up to a minute earlier): the job would requeue at once."""
    if parallel_error := max_parallel_error(OmegaConf.select(config, "hydra.launcher.max_parallel", default=None)):
        return [parallel_error]
    if "Slurm" not in _launcher(config):
        return []
    timeout_min = OmegaConf.select(config, "hydra.launcher.timeout_min", default=None)
    signal_delay_s = OmegaConf.select(config, "hydra.launcher.signal_delay_s", default=None)
    if not isinstance(timeout_min, (int, float)) or not isinstance(signal_delay_s, (int, float)):
        return []
    if timeout_min * 60 <= signal_delay_s + SLURM_SIGNAL_SLOP_S:
        return [f"hydra.launcher.timeout_min={timeout_min} leaves no time to train: Slurm sends the time-out "
                f"signal signal_delay_s={signal_delay_s} s before the limit, and up to {SLURM_SIGNAL_SLOP_S} s "
                f"earlier still; raise timeout_min above {(signal_delay_s + SLURM_SIGNAL_SLOP_S) / 60:g} "
                "or lower hydra.launcher.signal_delay_s"]
    return []


def _local_gpu_error(config: DictConfig, cfg: DictConfig) -> str | None:
    """A job that would train on a GPU its launcher hides: submitit's local executor sets each job's
    CUDA_VISIBLE_DEVICES to its ``gpus_per_node`` GPUs, none unless asked (a job with device=cuda
    fails, one with device=auto trains on the CPU)."""
    device = str(OmegaConf.select(cfg, "device", default="auto"))
    if _launcher(config) != "LocalLauncher" or not device.startswith(("cuda", "auto")):
        return None
    needed = int(device.split(":")[1]) + 1 if ":" in device else 1  # the job's cuda:N is its GPU N
    gpus = OmegaConf.select(config, "hydra.launcher.gpus_per_node", default=None) or 0
    if gpus >= needed:
        return None
    if device == "auto":
        import torch

        if not torch.cuda.is_available():  # auto takes the CPU here anyway
            return None
    return (f"device={device} under hydra/launcher=submitit_local needs hydra.launcher.gpus_per_node={needed} "
            f"(submitit shows each job only its gpus_per_node GPUs, here {gpus}); or use device=cpu")


def _output_dir_problem(path: str) -> str | None:
    """Why ``path`` cannot be the output folder (None: it can). Creates nothing that stays."""
    target = Path(path).expanduser().absolute()
    probe = target
    try:
        while not probe.exists() and probe.parent != probe:
            probe = probe.parent
        if not probe.is_dir():
            return (f"output folder {target} cannot be created: {probe} is a file" if probe != target
                    else f"output folder {target} exists and is not a folder")
        os.rmdir(tempfile.mkdtemp(prefix=".rlsweep-write-check-", dir=probe))
    except OSError as exc:
        return f"output folder {target} cannot be created: no folder can be made in {probe} ({exc.strerror or exc})"
    return None


def _custom_subdir(config: DictConfig) -> str | None:
    """``hydra.sweep.subdir`` when not the job's number (each job's folder ``<sweep dir>/<num>``); else None."""
    subdir = OmegaConf.to_container(config.hydra.sweep, resolve=False).get("subdir")
    return None if subdir == "${hydra.job.num}" else str(subdir)


def _in_use(folder: Path, record: dict[str, Any]) -> str | None:
    if record.get("status") == STATUS_RUNNING and job_alive(record):
        return (f"{folder} is in use: its job is running right now (pid {record['job']['pid']}); "
                "wait for it or stop it first")
    return None


def _check_finished_run(values: dict[str, Any], out: Path, resume: bool) -> None:
    if (record := read_record(out)) is None:
        return
    if problem := _in_use(out, record) or resume_refusal(
            resume_decision(record, lambda: values, resume), out, "hydra.run.dir"):
        fail([problem], title=FOLDER)


def _check_finished_sweep(config: DictConfig, sweep: Path, jobs: list[_Job], resume: bool) -> None:
    records = dict(walk_records(sweep))  # each read once, also for the clashes below
    if busy := [msg for folder, record in records.items() if (msg := _in_use(folder, record))]:
        fail(busy, title=FOLDER)
    finished = [] if resume else [folder for folder, record in records.items()
                                  if resume_decision(record, dict, resume) == NEEDS_RESUME]
    if finished:
        fail([(f"{sweep} already holds {len(finished)} finished job(s) (e.g. {finished[0]}): add resume=true "
               "to keep them and run only the unfinished ones, or choose another hydra.sweep.dir")], title=FOLDER)
    if _custom_subdir(config):
        return  # a custom layout: each job checks its own folder when it starts
    clashes = []
    for num, job in enumerate(jobs):
        record = records.get(sweep / str(num))
        if resume_decision(record, job.config, resume) == OTHER_CONFIG:
            was = " ".join(str(o) for o in record.get("overrides") or []) or "(none)"
            clashes.append(f"job {num} ({' '.join(job.overrides) or 'no overrides'}): {sweep / str(num)} holds a "
                           f"finished job with another config (overrides: {was})")
    if clashes:
        fail([*clashes, ("resume=true continues a sweep with the same arguments as its first run; "
                         "for a different sweep choose another hydra.sweep.dir")], title=FOLDER)


@contextlib.contextmanager
def _locked(folder: Path) -> Iterator[None]:
    """Take the folder's lock (:mod:`rlsweep.folder_lock`) for the checks of what it holds (no command
    can finish jobs there in between); a refused command leaves the folder as it found it."""
    from rlsweep import folder_lock

    existed = folder.is_dir()
    try:
        created = folder_lock.acquire(folder)
    except folder_lock.FolderBusy as exc:
        fail([str(exc)], title=FOLDER)
    except OSError as exc:
        fail([f"{folder}: cannot create its lock file ({exc.strerror or exc})"], title=FOLDER)
    try:
        yield
    except BaseException:
        folder_lock.release(folder, remove=created)
        if not existed:
            with contextlib.suppress(OSError):
                folder.rmdir()
        raise


def _output_folder(config: DictConfig, key: str, what: str, hint: str = "") -> tuple[Path, bool]:
    """The output folder ``key`` names, when usable, and whether ``resume=true`` (then ``key`` must be given)."""
    folder = str(OmegaConf.select(config, key))
    if problem := _output_dir_problem(folder):
        fail([f"{problem}; set {key}=<a writable folder>"], title=FOLDER)
    resume = bool(OmegaConf.select(config, RESUME_KEY, default=False))
    given = OmegaConf.select(config, "hydra.overrides.hydra", default=None) or []  # on the command line
    if resume and not any(override_key(str(o)) == key for o in given):
        fail([f"resume=true needs the folder of the {what} to resume: add {key}=<that folder>{hint}"])
    return Path(folder), resume


class RLSweepCallback(Callback):
    """The pre-flight checks; each ends with ``fail`` (SystemExit), also an error nobody foresaw: Hydra
    would turn an exception into a warning and run the jobs. What they learn goes into this command's
    :class:`SweepSession`."""

    def __init__(self) -> None:
        self.session = current_session()

    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            values = _check(config, check_device=True)
            self.session.run_dir = str(Path(str(config.hydra.run.dir)))
            out, resume = _output_folder(config, "hydra.run.dir", "run")
            with _locked(out):
                _check_finished_run(values, out, resume)
        except Exception as exc:  # noqa: BLE001 - one message, not a warning and the same error again
            refuse(exc)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        try:
            if launcher_errors := _launcher_errors(config):
                fail(launcher_errors)
            jobs = _check_jobs(config, _expand_sweep(config), check_device="Slurm" not in _launcher(config))
            sweep, resume = _output_folder(config, "hydra.sweep.dir", "sweep", " (the sweep's first run printed it)")
            with _locked(sweep):
                _check_finished_sweep(config, sweep, jobs, resume)
            _move_resume_to_hydra_overrides(config)
            # the jobs as the sweeper will launch them: its task overrides are without resume=..., moved above
            self.session.checked_jobs.update(tuple(o for o in job.overrides if override_key(o) != RESUME_KEY) for job in jobs)
        except Exception as exc:  # noqa: BLE001 - one message, not a warning and the same error again
            refuse(exc)
        # only now: a refused sweep must not get a report (finish_sweep) in a folder it was refused
        self.session.sweep_dir = str(config.hydra.sweep.dir)
        self.session.launcher = _launcher(config)


@dataclasses.dataclass
class _Cell:
    """Jobs whose overrides differ only in ``seed=``: composed and validated once, for the first."""

    cfg: DictConfig  # the first job's config, checked
    #: no value of the config refers to the seed: the other jobs' configs are this one with their seed
    seed_only: bool
    values: dict[str, Any]  # ``cfg`` as the job records it (config_values)
    scratch: DictConfig | None = None  # a copy of ``cfg`` on which each further job's seed is set in turn


@dataclasses.dataclass
class _Job:
    """One job of a checked sweep: its overrides, its cell, and its seed where not the cell's first."""

    overrides: list[str]
    cell: _Cell
    seed: int | None = None  # None: the cell's config is this job's own

    def config(self) -> dict[str, Any]:
        """The config the job records (:func:`rlsweep.config.config_values`)."""
        return self.cell.values if self.seed is None else {**self.cell.values, SEED_KEY: self.seed}


def _check_jobs(config: DictConfig, sweep: list[list[str]], *, check_device: bool) -> list[_Job]:
    """Check every job of the sweep; the first bad one ends the command with its message. A cell's first
    job is composed and validated in full, a further one only its seed (:func:`_seed_in`) where that is sure."""
    cells: dict[tuple[str, ...], _Cell] = {}
    jobs = []
    for overrides in sweep:
        key, seed_override = _without_seed(overrides)
        if (seed := _seed_in(cells.get(key), seed_override)) is not None:
            jobs.append(_Job(overrides, cells[key], seed))
            continue
        job = " ".join(overrides)
        try:  # Hydra composed the sweep's base config; a job's own values are first composed here
            cfg = _compose(config, overrides)
        except Exception as exc:  # noqa: BLE001 - every kind: composition, parse, missing option, type
            fail(_error_lines(exc), job, exc)
        values = _check(cfg, check_device=check_device, job=job)
        if error := _local_gpu_error(config, cfg):
            fail([error], job)
        own = _Cell(cfg, seed_only=not _refers_to(cfg, SEED_KEY), values=values)
        if (OmegaConf.select(cfg, "seeds_per_job", default=1) or 1) > 1 and (errors := _seeds_per_job_errors(config, own)):
            fail(errors, job)
        cells.setdefault(key, own)
        jobs.append(_Job(overrides, own))
    return jobs


def _seeds_per_job_errors(config: DictConfig, cell: _Cell) -> list[str]:
    """Why a sweep cannot train this cell's seeds together (:func:`rlsweep.launchers.seed_groups`)."""
    errors = []
    if subdir := _custom_subdir(config):
        errors.append(f"seeds_per_job > 1 writes each seed's record in <sweep dir>/<job number>: "
                      f"hydra.sweep.subdir={subdir} is not supported with it")
    if not cell.seed_only:
        errors.append("seeds_per_job > 1: a value of this config refers to the seed (${seed}), so the seeds' "
                      "configs differ in more than their seed and cannot share one process; use seeds_per_job=1")
    return errors


def _without_seed(overrides: list[str]) -> tuple[tuple[str, ...], str | None]:
    """The job's cell key (its overrides without ``seed=...``) and that override; only a plain
    ``seed=<value>`` given once is split off (else: the whole list, None)."""
    seeds = [o for o in overrides if o.split("=", 1)[0] == SEED_KEY]
    if len(seeds) != 1:
        return tuple(overrides), None
    return tuple(o for o in overrides if o != seeds[0]), seeds[0]


def _seed_in(cell: _Cell | None, seed_override: str | None) -> int | None:
    """The seed ``seed_override`` gives a job of ``cell``, set as Hydra sets it; None where the job
    must be checked on its own (no cell or seed yet, the cell's config refers to the seed, or the seed is not valid)."""
    if cell is None or seed_override is None or not cell.seed_only:
        return None
    try:
        if cell.scratch is None:
            cell.scratch = copy.deepcopy(cell.cfg)
        (override,) = parse_overrides([seed_override])
        # what Hydra's composition does with a plain ``key=value``: its parsed value merged in, the
        # typed node (an int) converting or refusing it
        OmegaConf.update(cell.scratch, SEED_KEY, override.value(), merge=True)
        seed = cell.scratch[SEED_KEY]
    except Exception:  # noqa: BLE001 - composed on its own, the job gets its message
        cell.scratch = None
        return None
    return seed if type(seed) is int and not seed_errors(seed) else None


def _refers_to(cfg: DictConfig, key: str) -> bool:
    """Whether an interpolation in the job's config (not ``hydra``) may read ``key`` (conservative:
    any one that names it)."""
    stack: list[Any] = [OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]))]
    while stack:
        value = stack.pop()
        if isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, list):
            stack.extend(value)
        elif isinstance(value, str) and "${" in value and key in value:
            return True
    return False


def _move_resume_to_hydra_overrides(config: DictConfig) -> None:
    """Move ``resume=...`` from the sweep's arguments (multirun.yaml, which the report expands) to
    ``hydra.overrides.hydra``: a resumed sweep expands to the same jobs as its first run."""
    task = [str(o) for o in config.hydra.overrides.task]
    switch = [o for o in task if override_key(o) == RESUME_KEY]
    if not switch:
        return
    with read_write(config.hydra.overrides):
        config.hydra.overrides.task = [o for o in task if o not in switch]
        config.hydra.overrides.hydra = [*config.hydra.overrides.hydra, *switch]


def _expand_sweep(config: DictConfig) -> list[list[str]]:
    """Every job's override list, as Hydra's basic sweeper will produce them."""
    task = list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
    if not is_basic_sweeper(OmegaConf.select(config, "hydra.sweeper._target_", default=None)):
        # other sweepers (Optuna) choose jobs as they go: check the base config, without the
        # overrides they search over (interval(...), choice(...))
        return [[str(o.input_line) for o in parse_overrides(task) if not o.is_sweep_override()]]
    from hydra.core.global_hydra import GlobalHydra

    # with Hydra's config loader, as the sweeper parses them: glob(...) lists its group's options
    loader = GlobalHydra.instance().config_loader()
    return expand_sweep(sweep_lists(task, OmegaConf.select(config, "hydra.sweeper.params", default=None), loader))


def _compose(config: DictConfig, overrides: list[str]) -> DictConfig:
    from hydra import compose

    return compose(config_name=config.hydra.job.config_name, overrides=overrides, return_hydra_config=True)
