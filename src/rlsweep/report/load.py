"""Reading a sweep into the report's jobs: every job folder, the jobs multirun.yaml expects, the missing ones.

A job's Hydra overrides say ``twin_modules=True`` or ``algo.lr=3e-4``; its result record says ``True`` and
``0.0003``: both are normalised here (:func:`norm_value`) so that they compare equal.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rlsweep import records
from rlsweep.prepare import read_prepare
from rlsweep.records import RESULT_FILE, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_OK, STATUS_RUNNING, job_num, section
from rlsweep.report.model import STATUS_MISSING, UNKNOWN, Job, ReportInputError, Sweep
from rlsweep.report.wandb_log import wandb_target
from rlsweep.toggles import TOGGLES

TOGGLE_NAMES = tuple(t.name for t in TOGGLES)


def load_sweep(sweep_dir: str | os.PathLike[str], verdicts: Mapping[Path, tuple[str, str]] | None = None) -> Sweep:
    """Every job of the sweep in ``sweep_dir`` (a Hydra multirun folder, job folders below it, possibly
    nested), failed and missing ones included. ``verdicts``: by job folder, the status and error that Slurm's
    accounting gives a job whose record still says running (:func:`rlsweep.status.slurm_verdicts`).

    Raises:
        ReportInputError: The folder does not exist or holds no jobs at all.
    """
    root = Path(sweep_dir)
    if not root.is_dir():
        problem = "not found" if not root.exists() else "is not a folder"
        raise ReportInputError(f"sweep dir {problem}: {root}")
    notes: list[str] = []
    by_folder = {Path(f).resolve(): v for f, v in (verdicts or {}).items()}
    jobs = [_load_job(folder, by_folder.get(folder.resolve())) for folder in records.job_folders(root)]
    expected_jobs, listed, defaults = _expected(root, jobs, notes)
    if not jobs:
        raise ReportInputError(f"no jobs found under {root}: no result.json, no .hydra job folders, no multirun.yaml")
    jobs.sort(key=lambda j: (j.num is None, j.num if j.num is not None else 0, str(j.job_dir)))
    dims, toggle_dims = _assign_keys(jobs)
    version = records.SCHEMA_VERSION
    notes += [f"{job.job_dir / RESULT_FILE}: schema_version {job.record.get('schema_version')} (expected {version}); "
              "read anyway" for job in jobs if job.record.get("schema_version") not in (None, version)]
    return Sweep(sweep_dir=root, jobs=jobs, dims=dims, toggle_dims=toggle_dims, expected_jobs=expected_jobs,
                 notes=notes, wandb=wandb_target(jobs, root), listed_values=listed, config_defaults=defaults,
                 prepared=read_prepare(root))


def _expected(root: Path, jobs: list[Job], notes: list[str]) -> tuple[int | None, dict[str, list[str]], dict[str, str]]:
    """What multirun.yaml says: adds the jobs it expects that are not in ``jobs``; returns how many it
    expects (None without it) and, per swept dimension, its values in the order listed and the config's own.

    Hydra composes multirun.yaml without the sweep's overrides, so a swept key holds there the
    value the config would have without the sweep (a group's default is its entry in
    ``hydra.runtime.choices``): the report's baseline for a swept hyper-parameter.
    """
    if (multirun := records.multirun_sweep(root, notes)) is None:
        return None, {}, {}
    cfg, lists = multirun
    choices = ((cfg.get("hydra") or {}).get("runtime") or {}).get("choices") or {}
    listed: dict[str, list[str]] = {}
    defaults: dict[str, str] = {}
    for key, options in lists.items():
        dim = norm_key(key)
        if len(options) < 2 or not dim or dim == "seed" or key.startswith("hydra"):
            continue
        listed[dim] = [norm_value(split_override(o)[1]) for o in options]
        group = key.lstrip("+~")
        value = choices[group] if group in choices else _select(cfg, "env.id" if dim == "env_id" else dim,
                                                                 f"toggles.{dim}")
        if value is not _ABSENT and not isinstance(value, (dict, list)):
            defaults[dim] = norm_value(value)
    combos = records.expand_sweep(lists)  # no swept key: one job, as Hydra runs it and the status counts it
    jobs.extend(_match_expected(jobs, combos, notes))
    return len(combos), listed, defaults


# ----------------------------------------------------------------- overrides and records


def norm_value(value: Any) -> str:
    """Normalise a toggle/override value so record values and override text compare."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float_text(value)
    if isinstance(value, (list, dict)):
        return json.dumps(value, sort_keys=True)
    text = str(value).strip()
    if len(text) >= 2 and text[0] == text[-1] and text[0] in "'\"":
        text = text[1:-1]
    low = text.lower()
    if low in ("none", "null", "~"):
        return "none"
    if low in ("true", "false"):
        return low
    with contextlib.suppress(ValueError):
        return str(int(text))
    with contextlib.suppress(ValueError):
        return _float_text(float(text))
    return text


def _float_text(value: float) -> str:
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def split_override(text: str) -> tuple[str, str]:
    """``key=value`` -> (key, value); value is "" without an ``=``."""
    key, sep, value = str(text).partition("=")
    return key.strip(), value.strip() if sep else ""


def norm_key(key: str) -> str:
    """Normalise an override key: no ``+``/``~`` prefix, no ``toggles.``, ``env.id`` -> env_id."""
    k = key.strip().lstrip("+~").removeprefix("toggles.")
    return "env_id" if k == "env.id" else k


def override_signature(overrides: Iterable[str]) -> tuple[tuple[str, str], ...]:
    """Sorted normalised (key, value) pairs: equal for the same job however it was spelled."""
    return tuple(sorted((norm_key(key), norm_value(value)) for key, value in map(split_override, overrides)))


def override_dims(overrides: Iterable[str]) -> tuple[dict[str, str], str | None]:
    """Cell dimensions and seed named by a job's overrides."""
    dims: dict[str, str] = {}
    seed = None
    for key, value in map(split_override, overrides):
        if (k := norm_key(key)) == "seed":
            seed = norm_value(value)
        elif k and k != "backend":  # a backend group is represented by backend.* dims
            dims[k] = norm_value(value)
    return dims, seed


def record_dims(record: dict[str, Any]) -> dict[str, str]:
    """Cell dimensions stated by a result record (algo, env_id, toggle values)."""
    dims = {name: norm_value(record[name]) for name in ("algo", "env_id") if record.get(name) is not None}
    toggles = record.get("toggles")
    if isinstance(toggles, dict):
        for name, entry in toggles.items():
            value = entry.get("value") if isinstance(entry, dict) else entry
            if isinstance(value, dict):
                for sub, sub_value in value.items():
                    dims[f"{name}.{sub}"] = norm_value(sub_value)
            else:
                dims[str(name)] = norm_value(value)
    return dims


def is_toggle_dim(dim: str, names: Iterable[str] = TOGGLE_NAMES) -> bool:
    """Whether a dimension belongs to a toggle (``backend.num_threads`` -> ``backend``)."""
    return dim.split(".", 1)[0] in names


# ------------------------------------------------------------------------- job folders


def _read_hydra_overrides(job_dir: Path) -> list[str]:
    """Hydra's copy of the job's overrides (``.hydra/overrides.yaml``); [] without a readable one."""
    try:
        data = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text())
    except (OSError, yaml.YAMLError):
        return []
    return [str(x) for x in data] if isinstance(data, list) else []


def _missing_job(overrides: list[str], status: str = STATUS_MISSING, **fields: Any) -> Job:
    """A job without a (readable) result, its seed read from its overrides."""
    return Job(status=status, overrides=overrides, seed=override_dims(overrides)[1], **fields)


def _load_job(job_dir: Path, verdict: tuple[str, str] | None = None) -> Job:
    """The job of a job folder: from its result.json (``verdict``: the status and error Slurm gives it
    instead), or a missing one from Hydra's overrides.yaml."""
    if not (job_dir / RESULT_FILE).is_file():
        return _missing_job(_read_hydra_overrides(job_dir), num=job_num(job_dir), job_dir=job_dir,
                            error_line="no result.json in job folder")
    try:
        record = records.read_result(job_dir)
        if not isinstance(record, dict):
            raise TypeError("top level is not a JSON object")
    except (OSError, ValueError, TypeError) as exc:
        return _missing_job(_read_hydra_overrides(job_dir), STATUS_FAILED, num=job_num(job_dir), job_dir=job_dir,
                            error_line=f"unreadable result.json: {type(exc).__name__}: {exc}")
    overrides = record.get("overrides")
    if not isinstance(overrides, list):  # Hydra's copy only then: parsing YAML is most of reading a job
        overrides = _read_hydra_overrides(job_dir)
    overrides = [str(o) for o in overrides]
    raw_status = str(record.get("status") or "unknown")
    if verdict is not None:
        raw_status, record = verdict[0], {**record, "status": verdict[0], "error": verdict[1]}
    # running: a partial sweep, no result yet (sweeps.status tells running from killed); any other: failed
    statuses = {STATUS_OK: STATUS_OK, STATUS_INTERRUPTED: STATUS_INTERRUPTED, STATUS_RUNNING: STATUS_MISSING}
    status = statuses.get(raw_status, STATUS_FAILED)
    error_line = records.last_line(record.get("error")) or (
        "interrupted (no error text)" if status == STATUS_INTERRUPTED else "no error text")
    if status == STATUS_MISSING:
        error_line = f"no result yet: still running, or {records.KILLED} (see python -m sweeps.status)"
    elif status == STATUS_FAILED and raw_status != STATUS_FAILED:
        error_line = f"status {raw_status!r}: {error_line}"
    seed = norm_value(record["seed"]) if record.get("seed") is not None else override_dims(overrides)[1]
    return Job(status=status, overrides=overrides, seed=seed, num=job_num(job_dir, record), job_dir=job_dir,
               record=record, error_line=None if status == STATUS_OK else error_line)


def _assign_keys(jobs: list[Job]) -> tuple[list[str], list[str]]:
    """Fill each job's cell key; returns the ordered dimensions and the toggle ones."""
    names = list(TOGGLE_NAMES)
    for job in jobs:
        names += [str(n) for n in section(job.record, "toggles") if str(n) not in names]
    # a record's values win over its overrides' (the record says what the job ran)
    raw = [{**override_dims(job.overrides)[0], **record_dims(job.record)} for job in jobs]
    order = list(dict.fromkeys(d for dims in raw for d in dims))

    def signature(job: Job) -> tuple[tuple[str, str], ...]:
        return tuple(p for p in override_signature(job.overrides) if p[0] != "seed")

    # Jobs with the same non-seed overrides belong together: share known dimensions.
    by_overrides: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for job, dims in sorted(zip(jobs, raw), key=lambda jd: jd[0].status != STATUS_OK):
        shared = by_overrides.setdefault(signature(job), {})
        for d, v in dims.items():
            shared.setdefault(d, v)
    # else a dimension with one value in the whole sweep has it
    only = {d: vs.pop() for d in order if len(vs := {dims[d] for dims in raw if d in dims}) == 1}
    for job, dims in zip(jobs, raw):
        shared = by_overrides[signature(job)]
        job.key = {**dims, **{d: shared.get(d, only.get(d, UNKNOWN)) for d in order if d not in dims}}
    context = [d for d in ("algo", "env_id") if d in order]
    context += [d for d in order if d not in context and not is_toggle_dim(d, names)]
    toggles = [d for name in names for d in order if d.split(".", 1)[0] == name]
    return context + toggles, toggles


# ---------------------------------------------------------------------- multirun.yaml


_ABSENT = object()


def _select(cfg: Any, *paths: str) -> Any:
    """The value at the first of the dotted ``paths`` a plain config dict has, or ``_ABSENT``."""
    for dotted in paths:
        node = cfg
        for part in dotted.split("."):
            if not isinstance(node, dict) or part not in node:
                break
            node = node[part]
        else:
            return node
    return _ABSENT


def _match_expected(jobs: list[Job], combos: list[list[str]], notes: list[str]) -> list[Job]:
    """Match the multirun.yaml expansion to found jobs; returns the missing ones.

    A job matches a combination when its overrides equal it after normalisation
    (``3e-4`` == ``0.0003``, ``True`` == ``true``); failing that, when its overrides
    restricted to the combination's keys do (a job may carry extra overrides).
    """
    pool: dict[tuple[tuple[str, str], ...], list[Job]] = {}
    for job in jobs:
        pool.setdefault(override_signature(job.overrides), []).append(job)
    unmatched: list[tuple[int, list[str]]] = []
    for index, combo in enumerate(combos):
        matches = pool.get(override_signature(combo))
        if matches:
            job = matches.pop(0)
            job.num = index if job.num is None else job.num
        else:
            unmatched.append((index, combo))
    leftover = [j for group in pool.values() for j in group]
    missing: list[Job] = []
    for index, combo in unmatched:
        want = override_signature(combo)
        keys = {k for k, _ in want}
        for job in leftover:
            have = tuple(p for p in override_signature(job.overrides) if p[0] in keys)
            if have == want:
                leftover.remove(job)
                job.num = index if job.num is None else job.num
                break
        else:
            missing.append(_missing_job(list(combo), num=index,
                                        error_line="in multirun.yaml but no job folder or result.json"))
    if leftover:
        where = ", ".join(str(j.job_dir) for j in leftover[:5])
        notes.append(f"{len(leftover)} job(s) not in the multirun.yaml expansion (kept): {where}")
    return missing
