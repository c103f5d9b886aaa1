"""Summarise a sweep directory: which PyTorch optimization toggles pay.

Reads every job's ``result.json`` under a Hydra multirun directory, groups jobs into
*cells* (one combination of toggle values plus algo, env_id and any other non-seed
override that varies; seeds are repeats within a cell) and compares each cell with a
baseline cell. ``python -m sweeps.report <sweep_dir>`` is the command-line entry point.

Jobs and cells:
    A job is ``ok``, ``failed``, ``interrupted`` or ``missing``. Missing jobs are the
    combinations of the sweep's override lists (``hydra.sweeper.params`` plus
    ``hydra.overrides.task`` in ``multirun.yaml``, expanded to their cartesian product)
    with no result, and job folders holding ``.hydra/overrides.yaml`` but no
    ``result.json``. No job is dropped: every one is counted in its cell and every
    non-ok job is listed as a casualty. Only ok jobs feed the numbers.

Baseline:
    By default the cell with every toggle off: compile=none, dtype=float32,
    pin_memory=false, non_blocking=false, twin_modules=false, inplace=false,
    backend.matmul_precision=highest, backend.cudnn_benchmark=false, restricted to
    the dimensions the sweep varies. ``--baseline key=value ...`` overrides entries.
    Each cell is compared with the baseline cell of its own context (same algo,
    env_id and other non-toggle overrides) unless the baseline pins a context key.

Speed-up ratio and its 95% CI:
    ratio = median over seeds of the cell's steady-state ``env_steps_per_s`` divided by
    the baseline's. The CI is a percentile bootstrap (2000 resamples, fixed RNG seed,
    so the output is deterministic) of the ratio of medians:

    * ``seeds``: when both cells have >= 2 ok seeds, the seeds of each cell are
      resampled with replacement.
    * ``iterations``: otherwise the steady-state ``per_iteration_env_steps_per_s``
      values (pooled over the cell's ok seeds) are resampled. Iterations of one run are
      not independent, so this CI is optimistic: it shows timing noise within a run,
      not run-to-run variation.

    A cell gets no ratio when either cell has no ok job, when the cell's or the
    baseline's hardware/software fingerprint (cpu_model, cpu_count, num_threads, gpu,
    torch, cuda; hostname is ignored) is mixed, or when the two differ; the reason is
    given in ``ratio_note``.

Marginal effect of a toggle:
    For toggle T changed from its baseline value a to another value b, every pair of
    cells identical except T (both with ok jobs and the same fingerprint) gives
    median(b) / median(a). The effect is the geometric mean of the pair ratios; its CI
    bootstraps every pair as above and takes percentiles of the geometric mean.
    Toggles are ranked by effect, largest first ("which toggle pays").

Learning check:
    A cell's final-return noise s is the standard deviation of ``final_return`` over its
    ok seeds (ddof=1) when it has >= 2 seeds, otherwise the single job's
    ``final_return_std`` (spread over its evaluation episodes). With pooled noise
    s_p = sqrt((s_cell^2 + s_base^2) / 2) (or the one that is known), a cell is flagged
    when |median_cell - median_base| > max(2 * s_p, 0.05 * |median_base|). The 5%
    floor keeps cells with nearly noiseless returns (e.g. CartPole capped at 500) from
    being flagged for a one-point difference. Not assessed when a final return or
    every noise estimate is missing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import math
import os
import sys
import tempfile
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

SCHEMA_VERSION = 1
PHASES = ("env_step", "act", "h2d", "d2h", "update")
TOGGLE_NAMES = (
    "compile",
    "dtype",
    "pin_memory",
    "non_blocking",
    "twin_modules",
    "inplace",
    "backend",
)
DEFAULT_BASELINE: dict[str, str] = {
    "compile": "none",
    "dtype": "float32",
    "pin_memory": "false",
    "non_blocking": "false",
    "twin_modules": "false",
    "inplace": "false",
    "backend.matmul_precision": "highest",
    "backend.cudnn_benchmark": "false",
}
FINGERPRINT_FIELDS = ("cpu_model", "cpu_count", "num_threads", "gpu", "torch", "cuda")
N_BOOTSTRAP = 2000
BOOTSTRAP_SEED = 20261129
LEARNING_SD_FACTOR = 2.0
LEARNING_REL_FLOOR = 0.05
UNKNOWN = "?"

STATUS_OK = "ok"
STATUS_FAILED = "failed"
STATUS_INTERRUPTED = "interrupted"
STATUS_MISSING = "missing"

CI_RULE = (
    "95% CI: percentile bootstrap of the ratio of medians ({n} resamples, RNG seed {seed}). "
    "'seeds' = seeds of both cells resampled (both cells have >= 2 ok seeds); "
    "'iterations' = steady-state per-iteration env_steps_per_s resampled (fewer seeds; "
    "optimistic, since iterations of one run are correlated)."
)
LEARNING_RULE = (
    "Learning check: noise s = std of final_return over seeds (>= 2 seeds) or the job's "
    "eval-episode final_return_std (1 seed); pooled s_p = sqrt((s_cell^2 + s_base^2)/2); "
    "flag when |median_cell - median_base| > max(2*s_p, 5% of |median_base|)."
)


class ReportInputError(ValueError):
    """Bad input for a report: no sweep dir, no jobs, or an unmatched baseline."""


@dataclass
class Job:
    """One job of the sweep, whether it produced a result or not.

    Attributes:
        status: "ok", "failed", "interrupted" or "missing".
        overrides: The job's Hydra override strings (``key=value``).
        seed: The job's seed as text, or None when unknown.
        num: Hydra job number, or None when unknown.
        job_dir: The job's output folder, or None for a job that never started.
        result_path: Path of ``result.json``, or None when there is none.
        record: The parsed ``result.json`` (empty for missing or unreadable jobs).
        raw_status: The status string as written in the record (or why there is none).
        error_line: Last line of the error traceback for failed jobs.
        key: The job's cell dimensions (dimension -> normalised value).
    """

    status: str
    overrides: list[str]
    seed: str | None = None
    num: int | None = None
    job_dir: Path | None = None
    result_path: Path | None = None
    record: dict[str, Any] = field(default_factory=dict, repr=False)
    raw_status: str = ""
    error_line: str | None = None
    key: dict[str, str] = field(default_factory=dict)


@dataclass
class Sweep:
    """All jobs of one sweep directory.

    Attributes:
        sweep_dir: The sweep directory.
        jobs: Every job found or expected, ordered by job number.
        dims: Cell dimensions, context dimensions first, then toggle dimensions.
        toggle_dims: The subset of ``dims`` that are optimization toggles.
        expected_jobs: Number of jobs in the ``multirun.yaml`` expansion, if present.
        notes: Remarks about how the sweep was read.
    """

    sweep_dir: Path
    jobs: list[Job]
    dims: list[str]
    toggle_dims: list[str]
    expected_jobs: int | None = None
    notes: list[str] = field(default_factory=list)


@dataclass
class CellSummary:
    """Computed numbers for one cell (a toggle combination; seeds are repeats).

    Attributes ending in ``_ms`` / ``_s`` / ``_per_s`` carry their unit. Medians are
    over ok seeds. ``ratio`` is relative to ``baseline_label``'s cell.
    """

    label: str
    key: dict[str, str]
    varied: dict[str, str]
    is_baseline: bool = False
    baseline_label: str | None = None
    n_ok: int = 0
    n_failed: int = 0
    n_interrupted: int = 0
    n_missing: int = 0
    seeds_ok: list[str] = field(default_factory=list)
    env_steps_per_s: float | None = None
    env_steps_per_s_seeds: list[float] = field(default_factory=list)
    updates_per_s: float | None = None
    phase_median_ms: dict[str, float | None] = field(default_factory=dict)
    phase_total_s: dict[str, float | None] = field(default_factory=dict)
    compile_s: float | None = None
    graph_breaks: int | None = None
    recompiles: int | None = None
    final_return_median: float | None = None
    final_return_spread: float | None = None
    final_return_spread_kind: str | None = None
    final_returns: list[float] = field(default_factory=list)
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str | None = None
    ratio_note: str | None = None
    learning_flag: bool | None = None
    learning_note: str | None = None
    not_applicable: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] | None = None
    fingerprint_mixed: bool = False
    fingerprint_note: str | None = None
    errors: list[str] = field(default_factory=list)
    iteration_env_steps_per_s: list[float] = field(default_factory=list, repr=False)
    curves: list[dict[str, Any]] = field(default_factory=list, repr=False)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers (per-iteration values and curves left out)."""
        out = {k: v for k, v in self.__dict__.items()}
        out.pop("iteration_env_steps_per_s")
        out.pop("curves")
        out["n_iterations"] = len(self.iteration_env_steps_per_s)
        return out


@dataclass
class PairRatio:
    """One pair of cells identical except one toggle."""

    without: str
    with_: str
    ratio: float


@dataclass
class MarginalEffect:
    """Effect of changing one toggle from its baseline value to another value.

    Attributes:
        toggle: The toggle dimension (e.g. ``compile`` or ``backend.num_threads``).
        from_value: The baseline value.
        to_value: The changed value.
        effect: Geometric mean of the pair ratios (``None`` without pairs).
        ci_low: Lower 95% bootstrap bound.
        ci_high: Upper 95% bootstrap bound.
        ci_method: "seeds", "iterations", "mixed" or None.
        n_pairs: Number of usable pairs.
        pairs: The pair ratios.
        skipped: Why candidate pairs were not used.
        rank: 1 = pays most.
    """

    toggle: str
    from_value: str
    to_value: str
    effect: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str | None = None
    n_pairs: int = 0
    pairs: list[PairRatio] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    rank: int | None = None

    @property
    def label(self) -> str:
        """Human-readable change, e.g. ``compile: none -> default``."""
        return f"{self.toggle}: {self.from_value} -> {self.to_value}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        out = {k: v for k, v in self.__dict__.items() if k != "pairs"}
        out["label"] = self.label
        out["pairs"] = [
            {"without": p.without, "with": p.with_, "ratio": p.ratio} for p in self.pairs
        ]
        return out


@dataclass
class Casualty:
    """A job that did not finish ok."""

    cell: str
    seed: str | None
    status: str
    detail: str
    where: str


@dataclass
class Report:
    """Everything ``write_report`` and ``render_table`` need; pure data.

    Attributes:
        sweep_dir: The sweep directory.
        baseline_spec: Baseline dimension values that were matched.
        baseline_labels: Labels of the baseline cell(s) (one per context).
        varied_dims: Dimensions that vary across the sweep (they label the cells).
        cells: One summary per cell, baseline cells first.
        marginal_effects: Toggle effects ranked by effect, largest first.
        casualties: Failed, interrupted and missing jobs.
        notes: Remarks (fingerprints, duplicates, expansion mismatches, ...).
        n_jobs: Number of jobs (found and expected).
        expected_jobs: Size of the multirun.yaml expansion, if known.
        n_bootstrap: Bootstrap resamples used for CIs.
        bootstrap_seed: RNG seed for the bootstrap.
    """

    sweep_dir: Path
    baseline_spec: dict[str, str]
    baseline_labels: list[str]
    varied_dims: list[str]
    cells: list[CellSummary]
    marginal_effects: list[MarginalEffect]
    casualties: list[Casualty]
    notes: list[str]
    n_jobs: int
    expected_jobs: int | None
    n_bootstrap: int
    bootstrap_seed: int

    @property
    def n_ok(self) -> int:
        """Number of ok jobs."""
        return sum(c.n_ok for c in self.cells)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers, consumed by e.g. the W&B logger."""
        return _json_clean(
            {
                "schema_version": SCHEMA_VERSION,
                "sweep_dir": str(self.sweep_dir),
                "baseline": {"spec": self.baseline_spec, "cells": self.baseline_labels},
                "varied_dims": self.varied_dims,
                "n_jobs": self.n_jobs,
                "expected_jobs": self.expected_jobs,
                "counts": {
                    "ok": sum(c.n_ok for c in self.cells),
                    "failed": sum(c.n_failed for c in self.cells),
                    "interrupted": sum(c.n_interrupted for c in self.cells),
                    "missing": sum(c.n_missing for c in self.cells),
                },
                "cells": [c.to_dict() for c in self.cells],
                "marginal_effects": [m.to_dict() for m in self.marginal_effects],
                "learning_flags": [
                    {"cell": c.label, "note": c.learning_note}
                    for c in self.cells
                    if c.learning_flag
                ],
                "casualties": [c.__dict__ for c in self.casualties],
                "notes": self.notes,
                "methods": {
                    "ci": CI_RULE.format(n=self.n_bootstrap, seed=self.bootstrap_seed),
                    "learning": LEARNING_RULE,
                    "n_bootstrap": self.n_bootstrap,
                    "bootstrap_seed": self.bootstrap_seed,
                },
            }
        )


# --------------------------------------------------------------------------- values


def _norm_value(value: Any) -> str:
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
    try:
        return str(int(text))
    except ValueError:
        pass
    try:
        return _float_text(float(text))
    except ValueError:
        return text


def _float_text(value: float) -> str:
    if math.isfinite(value) and value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)


def _num(value: Any) -> float | None:
    """A finite float, or None for anything else (None, NaN, text, bool)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    out = float(value)
    return out if math.isfinite(out) else None


def _section(record: dict[str, Any], name: str) -> dict[str, Any]:
    """A sub-dict of a record; {} when missing or null (failed jobs may lack it)."""
    value = record.get(name)
    return value if isinstance(value, dict) else {}


def _append_num(values: list[float], value: Any) -> bool:
    """Append value when it is a finite number; returns whether it was."""
    number = _num(value)
    if number is not None:
        values.append(number)
    return number is not None


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _last_line(text: Any) -> str | None:
    if text is None:
        return None
    lines = [line.strip() for line in str(text).strip().splitlines() if line.strip()]
    return lines[-1] if lines else None


def _json_clean(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _json_clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_clean(v) for v in obj]
    if isinstance(obj, Path):
        return str(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, np.generic):
        return _json_clean(obj.item())
    return obj


# ------------------------------------------------------------------------ overrides


def _split_override(text: str) -> tuple[str, str]:
    key, sep, value = str(text).partition("=")
    return key.strip(), value.strip() if sep else ""


def _norm_key(key: str) -> str:
    k = key.strip().lstrip("+~")
    k = k.removeprefix("toggles.")
    if k == "env.id":
        k = "env_id"
    return k


def _override_signature(overrides: Iterable[str]) -> tuple[tuple[str, str], ...]:
    pairs = []
    for text in overrides:
        key, value = _split_override(text)
        pairs.append((_norm_key(key), _norm_value(value)))
    return tuple(sorted(pairs))


def _override_dims(overrides: Iterable[str]) -> tuple[dict[str, str], str | None]:
    """Cell dimensions and seed named by a job's overrides."""
    dims: dict[str, str] = {}
    seed = None
    for text in overrides:
        key, value = _split_override(text)
        k = _norm_key(key)
        if not k or k == "backend":  # a backend group is represented by backend.* dims
            continue
        if k == "seed":
            seed = _norm_value(value)
            continue
        dims[k] = _norm_value(value)
    return dims, seed


def _record_dims(record: dict[str, Any]) -> dict[str, str]:
    """Cell dimensions stated by a result record (algo, env_id, toggle values)."""
    dims: dict[str, str] = {}
    for name in ("algo", "env_id"):
        if record.get(name) is not None:
            dims[name] = _norm_value(record[name])
    toggles = record.get("toggles")
    if isinstance(toggles, dict):
        for name, entry in toggles.items():
            value = entry.get("value") if isinstance(entry, dict) else entry
            if isinstance(value, dict):
                for sub, sub_value in value.items():
                    dims[f"{name}.{sub}"] = _norm_value(sub_value)
            else:
                dims[str(name)] = _norm_value(value)
    return dims


def _is_toggle_dim(dim: str, names: Iterable[str] = TOGGLE_NAMES) -> bool:
    return dim.split(".", 1)[0] in names


def _top_level_split(value: str) -> list[str]:
    parts, depth, quote, current = [], 0, "", []
    for ch in value:
        if quote:
            current.append(ch)
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
            current.append(ch)
        elif ch in "([{":
            depth += 1
            current.append(ch)
        elif ch in ")]}":
            depth -= 1
            current.append(ch)
        elif ch == "," and depth == 0:
            parts.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    parts.append("".join(current).strip())
    return parts


def _expand_overrides(arguments: list[str], notes: list[str]) -> list[list[str]]:
    """Cartesian product of a sweep's override lists, in Hydra's job order."""
    lists: dict[str, list[str]] = {}
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        parsed = OverridesParser.create().parse_overrides(arguments)
        for ov in parsed:
            key = ov.get_key_element()
            if ov.is_sweep_override():
                if not ov.is_discrete_sweep():
                    raise ValueError(f"non-discrete sweep {key}")
                lists[key] = [f"{key}={v}" for v in ov.sweep_string_iterator()]
            else:
                lists[key] = [f"{key}={ov.get_value_element_as_str()}"]
    except ImportError:
        lists = {}
        for text in arguments:
            key, value = _split_override(text)
            lists[key] = [f"{key}={v}" for v in _top_level_split(value)]
    except Exception as exc:  # noqa: BLE001 - any parser failure: fall back, say so
        notes.append(f"multirun.yaml overrides not parsed by Hydra ({exc}); split on commas")
        lists = {}
        for text in arguments:
            key, value = _split_override(text)
            lists[key] = [f"{key}={v}" for v in _top_level_split(value)]
    combos: list[list[str]] = [[]]
    for options in lists.values():
        combos = [combo + [opt] for combo in combos for opt in options]
    return combos


def _yaml_text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def _sweep_arguments(multirun_yaml: Path) -> list[str]:
    cfg = yaml.safe_load(multirun_yaml.read_text()) or {}
    hydra_cfg = cfg.get("hydra") or {}
    params = (hydra_cfg.get("sweeper") or {}).get("params") or {}
    task = (hydra_cfg.get("overrides") or {}).get("task") or []
    return [f"{k}={_yaml_text(v)}" for k, v in params.items()] + [str(t) for t in task]


# ---------------------------------------------------------------------------- loading


def _walk(root: Path) -> tuple[list[Path], list[Path]]:
    """result.json files and Hydra job folders under root, skipping .submitit."""
    results: list[Path] = []
    job_dirs: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".submitit"))
        here = Path(dirpath)
        if "result.json" in filenames:
            results.append(here / "result.json")
        if here.name == ".hydra" and "overrides.yaml" in filenames:
            job_dirs.append(here.parent)
    return results, job_dirs


def _read_hydra_overrides(job_dir: Path | None) -> list[str] | None:
    if job_dir is None:
        return None
    path = job_dir / ".hydra" / "overrides.yaml"
    try:
        data = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    return [str(x) for x in data] if isinstance(data, list) else None


def _dir_num(job_dir: Path | None) -> int | None:
    if job_dir is not None and job_dir.name.isdigit():
        return int(job_dir.name)
    return None


def _load_job(result_path: Path, job_dir: Path) -> Job:
    hydra_overrides = _read_hydra_overrides(job_dir)
    try:
        record = json.loads(result_path.read_text())
        if not isinstance(record, dict):
            raise TypeError("top level is not a JSON object")
    except (OSError, ValueError, TypeError) as exc:
        overrides = hydra_overrides or []
        return Job(
            status=STATUS_FAILED,
            overrides=overrides,
            seed=_override_dims(overrides)[1],
            num=_dir_num(job_dir),
            job_dir=job_dir,
            result_path=result_path,
            raw_status="unreadable",
            error_line=f"unreadable result.json: {type(exc).__name__}: {exc}",
        )
    overrides = record.get("overrides")
    if not isinstance(overrides, list):
        overrides = hydra_overrides or []
    overrides = [str(o) for o in overrides]
    raw_status = str(record.get("status") or "unknown")
    if raw_status == STATUS_OK:
        status = STATUS_OK
    elif raw_status == STATUS_INTERRUPTED:
        status = STATUS_INTERRUPTED
    else:
        status = STATUS_FAILED
    error_line = None
    if status != STATUS_OK:
        error_line = _last_line(record.get("error")) or (
            "interrupted (no error text)" if status == STATUS_INTERRUPTED else "no error text"
        )
        if status == STATUS_FAILED and raw_status != STATUS_FAILED:
            error_line = f"status {raw_status!r}: {error_line}"
    seed = record.get("seed")
    seed_text = _norm_value(seed) if seed is not None else _override_dims(overrides)[1]
    job_info = record.get("job") if isinstance(record.get("job"), dict) else {}
    num = job_info.get("num")
    return Job(
        status=status,
        overrides=overrides,
        seed=seed_text,
        num=num if isinstance(num, int) and not isinstance(num, bool) else _dir_num(job_dir),
        job_dir=job_dir,
        result_path=result_path,
        record=record,
        raw_status=raw_status,
        error_line=error_line,
    )


def _assign_keys(jobs: list[Job]) -> tuple[list[str], list[str]]:
    """Fill each job's cell key; returns the ordered dimensions and the toggle ones."""
    names = list(TOGGLE_NAMES)
    for job in jobs:
        toggles = job.record.get("toggles")
        if isinstance(toggles, dict):
            names += [str(n) for n in toggles if str(n) not in names]
    order: list[str] = []
    raw: list[dict[str, str]] = []
    for job in jobs:
        dims, _ = _override_dims(job.overrides)
        dims.update(_record_dims(job.record))
        raw.append(dims)
        for d in dims:
            if d not in order:
                order.append(d)
    # Jobs with the same non-seed overrides belong together: share known dimensions.
    by_overrides: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}
    for job, dims in sorted(zip(jobs, raw), key=lambda jd: jd[0].status != STATUS_OK):
        sig = tuple(p for p in _override_signature(job.overrides) if p[0] != "seed")
        shared = by_overrides.setdefault(sig, {})
        for d, v in dims.items():
            shared.setdefault(d, v)
    values: dict[str, set[str]] = {d: set() for d in order}
    for dims in raw:
        for d, v in dims.items():
            values[d].add(v)
    for job, dims in zip(jobs, raw):
        sig = tuple(p for p in _override_signature(job.overrides) if p[0] != "seed")
        key = dict(dims)
        for d in order:
            if d in key:
                continue
            if d in by_overrides.get(sig, {}):
                key[d] = by_overrides[sig][d]
            elif len(values[d]) == 1:
                key[d] = next(iter(values[d]))
            else:
                key[d] = UNKNOWN
        job.key = key
    context = [d for d in ("algo", "env_id") if d in order]
    context += [d for d in order if d not in context and not _is_toggle_dim(d, names)]
    toggles = [d for name in names for d in order if d.split(".", 1)[0] == name]
    return context + toggles, toggles


def _match_expected(jobs: list[Job], combos: list[list[str]], notes: list[str]) -> list[Job]:
    """Match the multirun.yaml expansion to found jobs; returns the missing ones.

    A job matches a combination when its overrides equal it after normalisation
    (``3e-4`` == ``0.0003``, ``True`` == ``true``); failing that, when its overrides
    restricted to the combination's keys do (a job may carry extra overrides).
    """
    pool: dict[tuple[tuple[str, str], ...], list[Job]] = {}
    for job in jobs:
        pool.setdefault(_override_signature(job.overrides), []).append(job)
    unmatched: list[tuple[int, list[str]]] = []
    for index, combo in enumerate(combos):
        matches = pool.get(_override_signature(combo))
        if matches:
            job = matches.pop(0)
            job.num = index if job.num is None else job.num
        else:
            unmatched.append((index, combo))
    leftover = [j for group in pool.values() for j in group]
    missing: list[Job] = []
    for index, combo in unmatched:
        want = _override_signature(combo)
        keys = {k for k, _ in want}
        for job in leftover:
            have = tuple(p for p in _override_signature(job.overrides) if p[0] in keys)
            if have == want:
                leftover.remove(job)
                job.num = index if job.num is None else job.num
                break
        else:
            missing.append(
                Job(
                    status=STATUS_MISSING,
                    overrides=list(combo),
                    seed=_override_dims(combo)[1],
                    num=index,
                    raw_status="not started",
                    error_line="in multirun.yaml but no job folder or result.json",
                )
            )
    if leftover:
        where = ", ".join(str(j.job_dir or j.result_path) for j in leftover[:5])
        notes.append(f"{len(leftover)} job(s) not in the multirun.yaml expansion (kept): {where}")
    return missing


def load_sweep(sweep_dir: str | os.PathLike[str]) -> Sweep:
    """Read every job of a sweep directory.

    Args:
        sweep_dir: A Hydra multirun directory (job folders below it, possibly nested).

    Returns:
        The sweep, including failed and missing jobs.

    Raises:
        ReportInputError: The directory does not exist or holds no jobs at all.
    """
    root = Path(sweep_dir)
    if not root.exists():
        raise ReportInputError(f"sweep dir not found: {root}")
    if not root.is_dir():
        raise ReportInputError(f"sweep dir is not a directory: {root}")
    notes: list[str] = []
    result_paths, hydra_dirs = _walk(root)
    hydra_set = set(hydra_dirs)
    jobs: list[Job] = []
    used_dirs: set[Path] = set()
    for path in result_paths:
        job_dir = path.parent
        probe = path.parent
        while True:
            if probe in hydra_set:
                job_dir = probe
                break
            if probe == root or probe.parent == probe:
                break
            probe = probe.parent
        used_dirs.add(job_dir)
        jobs.append(_load_job(path, job_dir))
    for job_dir in hydra_dirs:
        if job_dir in used_dirs:
            continue
        overrides = _read_hydra_overrides(job_dir) or []
        jobs.append(
            Job(
                status=STATUS_MISSING,
                overrides=overrides,
                seed=_override_dims(overrides)[1],
                num=_dir_num(job_dir),
                job_dir=job_dir,
                raw_status="no result.json",
                error_line="no result.json in job folder",
            )
        )

    expected_jobs = None
    multirun = root / "multirun.yaml"
    if multirun.is_file():
        try:
            combos = _expand_overrides(_sweep_arguments(multirun), notes)
        except (OSError, yaml.YAMLError, AttributeError, TypeError) as exc:
            notes.append(f"multirun.yaml unreadable ({type(exc).__name__}: {exc}); not used")
            combos = []
        if combos and combos != [[]]:
            expected_jobs = len(combos)
            jobs.extend(_match_expected(jobs, combos, notes))
    if not jobs:
        raise ReportInputError(
            f"no jobs found under {root}: no result.json, no .hydra job folders, no multirun.yaml"
        )
    jobs.sort(key=lambda j: (j.num is None, j.num if j.num is not None else 0, str(j.job_dir)))
    dims, toggle_dims = _assign_keys(jobs)
    for job in jobs:
        if job.record and job.record.get("schema_version") not in (None, SCHEMA_VERSION):
            notes.append(
                f"{job.result_path}: schema_version {job.record.get('schema_version')} "
                f"(expected {SCHEMA_VERSION}); read anyway"
            )
    return Sweep(
        sweep_dir=root,
        jobs=jobs,
        dims=dims,
        toggle_dims=toggle_dims,
        expected_jobs=expected_jobs,
        notes=notes,
    )


# -------------------------------------------------------------------------- cells


def _fingerprint(record: dict[str, Any]) -> tuple[str, ...]:
    fp = record.get("fingerprint") if isinstance(record.get("fingerprint"), dict) else {}
    return tuple(json.dumps(fp.get(name), sort_keys=True) for name in FINGERPRINT_FIELDS)


def _fingerprint_diff(a: tuple[str, ...], b: tuple[str, ...]) -> str:
    parts = [
        f"{name} {json.loads(x)} vs {json.loads(y)}"
        for name, x, y in zip(FINGERPRINT_FIELDS, a, b)
        if x != y
    ]
    return "; ".join(parts)


def _summarise_cell(key: dict[str, str], varied: list[str], jobs: list[Job]) -> CellSummary:
    label = " ".join(f"{d}={key.get(d, UNKNOWN)}" for d in varied) or "all"
    cell = CellSummary(label=label, key=dict(key), varied={d: key.get(d, UNKNOWN) for d in varied})
    ok = [j for j in jobs if j.status == STATUS_OK]
    cell.n_ok = len(ok)
    cell.n_failed = sum(j.status in (STATUS_FAILED, STATUS_INTERRUPTED) for j in jobs)
    cell.n_interrupted = sum(j.status == STATUS_INTERRUPTED for j in jobs)
    cell.n_missing = sum(j.status == STATUS_MISSING for j in jobs)
    cell.seeds_ok = [j.seed if j.seed is not None else UNKNOWN for j in ok]

    updates: list[float] = []
    compile_s: list[float] = []
    breaks: list[float] = []
    recompiles: list[float] = []
    returns: list[float] = []
    eval_sds: list[float] = []
    for job in ok:
        rec = job.record
        thr, comp, learn = (_section(rec, name) for name in ("throughput", "compile", "learning"))
        rate = _num(thr.get("env_steps_per_s"))
        if rate is not None and rate > 0:
            cell.env_steps_per_s_seeds.append(rate)
        for value in thr.get("per_iteration_env_steps_per_s") or []:
            it_rate = _num(value)
            if it_rate is not None and it_rate > 0:
                cell.iteration_env_steps_per_s.append(it_rate)
        _append_num(updates, thr.get("updates_per_s"))
        _append_num(compile_s, comp.get("compile_s"))
        _append_num(breaks, comp.get("graph_breaks"))
        _append_num(recompiles, comp.get("recompiles"))
        if _append_num(returns, learn.get("final_return")):
            _append_num(eval_sds, learn.get("final_return_std"))
        curve = _section(learn, "curve")
        if curve.get("episode_return"):
            cell.curves.append(
                {
                    "seed": job.seed,
                    "env_steps": list(curve.get("env_steps") or []),
                    "wall_s": list(curve.get("wall_s") or []),
                    "episode_return": list(curve.get("episode_return") or []),
                }
            )
    timings = [_section(j.record, "timings") for j in ok]
    for phase in PHASES:
        medians, totals = [], []
        for t in timings:
            entry = _section(t, phase)
            med = _num(entry.get("median_ms"))
            if med is not None:
                medians.append(med)
            total = _num(entry.get("total_s"))
            if total is None and med is not None and _num(entry.get("count")) is not None:
                total = med * float(entry["count"]) / 1000.0
            if total is not None:
                totals.append(total)
        cell.phase_median_ms[phase] = _median(medians)
        cell.phase_total_s[phase] = _median(totals)
    cell.env_steps_per_s = _median(cell.env_steps_per_s_seeds)
    cell.updates_per_s = _median(updates)
    cell.compile_s = _median(compile_s)
    cell.graph_breaks = int(max(breaks)) if breaks else None
    cell.recompiles = int(max(recompiles)) if recompiles else None
    cell.final_returns = returns
    cell.final_return_median = _median(returns)
    if len(returns) >= 2:
        cell.final_return_spread = float(np.std(returns, ddof=1))
        cell.final_return_spread_kind = "seed_sd"
    elif len(returns) == 1 and eval_sds:
        cell.final_return_spread = eval_sds[0]
        cell.final_return_spread_kind = "eval_sd"

    for job in jobs:
        toggles = _section(job.record, "toggles")
        for name, entry in toggles.items():
            if isinstance(entry, dict) and entry.get("applied") is False:
                text = f"{name}: {entry.get('reason') or 'not applied (no reason given)'}"
                if text not in cell.not_applicable:
                    cell.not_applicable.append(text)
        if job.status != STATUS_OK:
            seed = f"seed {job.seed}" if job.seed is not None else "seed ?"
            cell.errors.append(f"{job.status} ({seed}): {job.error_line}")

    fps = []
    for job in ok:
        fp = _fingerprint(job.record)
        if fp not in fps:
            fps.append(fp)
    if len(fps) == 1:
        cell.fingerprint = {n: json.loads(v) for n, v in zip(FINGERPRINT_FIELDS, fps[0])}
    elif len(fps) > 1:
        cell.fingerprint_mixed = True
        cell.fingerprint_note = "mixed fingerprints within cell: " + _fingerprint_diff(
            fps[0], fps[1]
        )
    return cell


def _cell_fp(cell: CellSummary) -> tuple[str, ...] | None:
    if cell.fingerprint is None:
        return None
    return tuple(json.dumps(cell.fingerprint.get(n), sort_keys=True) for n in FINGERPRINT_FIELDS)


def _comparable(cell: CellSummary, base: CellSummary) -> str | None:
    """Why two cells' throughput can't be compared, or None when it can."""
    if cell.env_steps_per_s is None:
        if cell.n_ok == 0:
            return f"no ok jobs ({cell.n_failed} failed, {cell.n_missing} missing)"
        return "no env_steps_per_s in ok jobs"
    if base.env_steps_per_s is None:
        return f"baseline ({base.label}) has no ok jobs with env_steps_per_s"
    if cell.fingerprint_mixed:
        return cell.fingerprint_note
    if base.fingerprint_mixed:
        return f"baseline ({base.label}) has {base.fingerprint_note}"
    fp_cell, fp_base = _cell_fp(cell), _cell_fp(base)
    if fp_cell != fp_base and fp_cell is not None and fp_base is not None:
        return "fingerprint differs: " + _fingerprint_diff(fp_cell, fp_base)
    return None


def _bootstrap_medians(values: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    out = np.empty(n)
    chunk = max(1, 2_000_000 // max(1, len(values)))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        idx = rng.integers(0, len(values), size=(stop - start, len(values)))
        out[start:stop] = np.median(values[idx], axis=1)
    return out


def _ratio_samples(
    cell: CellSummary, base: CellSummary, rng: np.random.Generator, n: int
) -> tuple[np.ndarray | None, str | None]:
    """Bootstrap samples of median(cell) / median(base) and the method used."""
    if len(cell.env_steps_per_s_seeds) >= 2 and len(base.env_steps_per_s_seeds) >= 2:
        x, y, method = cell.env_steps_per_s_seeds, base.env_steps_per_s_seeds, "seeds"
    else:
        x, y = cell.iteration_env_steps_per_s, base.iteration_env_steps_per_s
        method = "iterations"
        if not x or not y:
            return None, None
    num = _bootstrap_medians(np.asarray(x, dtype=float), rng, n)
    den = _bootstrap_medians(np.asarray(y, dtype=float), rng, n)
    return num / den, method


def _rng(seed: int, label: str) -> np.random.Generator:
    return np.random.default_rng([seed, zlib.crc32(label.encode())])


def _learning_check(cell: CellSummary, base: CellSummary) -> tuple[bool | None, str]:
    if cell.final_return_median is None or base.final_return_median is None:
        return None, "not assessed: no final_return"
    spreads = [s for s in (cell.final_return_spread, base.final_return_spread) if s is not None]
    if not spreads:
        return None, "not assessed: no noise estimate (1 seed and no final_return_std)"
    pooled = math.sqrt(sum(s * s for s in spreads) / len(spreads))
    threshold = max(LEARNING_SD_FACTOR * pooled, LEARNING_REL_FLOOR * abs(base.final_return_median))
    diff = cell.final_return_median - base.final_return_median
    text = (
        f"final_return {cell.final_return_median:.4g} vs baseline "
        f"{base.final_return_median:.4g} (diff {diff:+.4g}, threshold {threshold:.4g})"
    )
    return abs(diff) > threshold, text


def _parse_baseline(
    baseline: dict[str, str] | None, dims: list[str], varied: list[str]
) -> tuple[dict[str, str], set[str]]:
    """Default baseline restricted to varied dims, overlaid with the user's choice."""
    spec = {d: v for d, v in DEFAULT_BASELINE.items() if d in varied}
    user: set[str] = set()
    for raw_key, raw_value in (baseline or {}).items():
        key = _norm_key(str(raw_key))
        if key not in dims:
            known = ", ".join(dims) or "(none)"
            raise ReportInputError(f"unknown baseline key {raw_key!r}; known keys: {known}")
        spec[key] = _norm_value(raw_value)
        user.add(key)
    return spec, user


def build_report(
    sweep: Sweep,
    baseline: dict[str, str] | None = None,
    *,
    n_bootstrap: int = N_BOOTSTRAP,
    bootstrap_seed: int = BOOTSTRAP_SEED,
) -> Report:
    """Compute per-cell numbers, ratios vs the baseline, toggle effects and flags.

    Args:
        sweep: The loaded sweep.
        baseline: Override-style baseline choice (e.g. ``{"compile": "none"}``); entries
            replace the all-toggles-off default. None uses the default.
        n_bootstrap: Bootstrap resamples per CI.
        bootstrap_seed: RNG seed; the same inputs give the same CIs.

    Returns:
        The report (pure data; nothing is written).

    Raises:
        ReportInputError: An unknown baseline key, no cell matching the baseline, or
            more than one matching cell within one context.
    """
    dims = sweep.dims
    groups: dict[tuple[str, ...], list[Job]] = {}
    for job in sweep.jobs:
        groups.setdefault(tuple(job.key.get(d, UNKNOWN) for d in dims), []).append(job)
    varied = [d for i, d in enumerate(dims) if len({k[i] for k in groups}) > 1]
    cells = [_summarise_cell(dict(zip(dims, k)), varied, jobs) for k, jobs in groups.items()]
    unsorted_cells = list(cells)
    first_num = {
        id(c): min((j.num for j in jobs if j.num is not None), default=10**9)
        for c, jobs in zip(cells, groups.values())
    }

    spec, user_keys = _parse_baseline(baseline, dims, varied)
    candidates = [c for c in cells if all(c.key.get(d) == v for d, v in spec.items())]
    spec_text = " ".join(f"{k}={v}" for k, v in spec.items()) or "(any)"
    if not candidates:
        options = "; ".join(
            f"{d} in {{{', '.join(sorted({c.key.get(d, UNKNOWN) for c in cells}))}}}" for d in spec
        )
        raise ReportInputError(f"no cell matches baseline {spec_text} (values in sweep: {options})")
    context = [d for d in dims if d not in sweep.toggle_dims and d not in user_keys]
    by_context: dict[tuple[str, ...], CellSummary] = {}
    for cand in candidates:
        ctx = tuple(cand.key.get(d, UNKNOWN) for d in context)
        if ctx in by_context:
            other = by_context[ctx]
            differ = [d for d in dims if other.key.get(d) != cand.key.get(d)]
            raise ReportInputError(
                f"baseline {spec_text} is ambiguous: cells {other.label!r} and {cand.label!r} "
                f"both match; pin {', '.join(differ)} with --baseline"
            )
        by_context[ctx] = cand
    for cand in by_context.values():
        cand.is_baseline = True

    cells.sort(key=lambda c: (not c.is_baseline, first_num[id(c)], c.label))
    for cell in cells:
        base = by_context.get(tuple(cell.key.get(d, UNKNOWN) for d in context))
        if base is None:
            where = " ".join(f"{d}={cell.key.get(d)}" for d in context)
            cell.ratio_note = f"no baseline cell in this context ({where})"
            cell.learning_note = "not assessed: no baseline cell"
            continue
        cell.baseline_label = base.label
        if cell is base:
            if base.env_steps_per_s is not None:
                cell.ratio, cell.ci_low, cell.ci_high = 1.0, 1.0, 1.0
            cell.ci_method = "baseline"
            cell.ratio_note = "baseline" if base.env_steps_per_s else "baseline has no ok jobs"
            cell.learning_note = "baseline"
            continue
        why = _comparable(cell, base)
        if why is None:
            assert cell.env_steps_per_s is not None and base.env_steps_per_s is not None
            cell.ratio = cell.env_steps_per_s / base.env_steps_per_s
            samples, method = _ratio_samples(
                cell, base, _rng(bootstrap_seed, cell.label + "|" + base.label), n_bootstrap
            )
            cell.ci_method = method or "none"
            if samples is not None:
                cell.ci_low = float(np.percentile(samples, 2.5))
                cell.ci_high = float(np.percentile(samples, 97.5))
            else:
                cell.ratio_note = "no CI: no per-iteration throughput"
        else:
            cell.ratio_note = why
        cell.learning_flag, cell.learning_note = _learning_check(cell, base)

    toggles_varied = [d for d in varied if d in sweep.toggle_dims]
    effects = _marginal_effects(cells, dims, toggles_varied, spec, n_bootstrap, bootstrap_seed)

    casualties = []
    label_of = {k: cell.label for k, cell in zip(groups, unsorted_cells)}
    for job in sweep.jobs:
        if job.status == STATUS_OK:
            continue
        where = job.job_dir or job.result_path
        casualties.append(
            Casualty(
                cell=label_of[tuple(job.key.get(d, UNKNOWN) for d in dims)],
                seed=job.seed,
                status=job.status,
                detail=job.error_line or "",
                where=str(where) if where else f"job {job.num} (never started)",
            )
        )

    notes = list(sweep.notes)
    for cell in cells:
        seeds = [s for s in cell.seeds_ok if s != UNKNOWN]
        if len(set(seeds)) < len(seeds):
            notes.append(f"{cell.label}: duplicate seeds {sorted(seeds)} (all kept)")
        if cell.fingerprint_mixed:
            notes.append(f"{cell.label}: {cell.fingerprint_note}")
        elif cell.ratio_note and cell.ratio_note.startswith("fingerprint differs"):
            notes.append(f"{cell.label}: {cell.ratio_note}")
    return Report(
        sweep_dir=sweep.sweep_dir,
        baseline_spec=spec,
        baseline_labels=[c.label for c in cells if c.is_baseline],
        varied_dims=varied,
        cells=cells,
        marginal_effects=effects,
        casualties=casualties,
        notes=notes,
        n_jobs=len(sweep.jobs),
        expected_jobs=sweep.expected_jobs,
        n_bootstrap=n_bootstrap,
        bootstrap_seed=bootstrap_seed,
    )


def _marginal_effects(
    cells: list[CellSummary],
    dims: list[str],
    toggles_varied: list[str],
    spec: dict[str, str],
    n_bootstrap: int,
    bootstrap_seed: int,
) -> list[MarginalEffect]:
    """Geometric-mean pair ratios per (toggle, value) change, ranked largest first."""
    effects: list[MarginalEffect] = []
    baseline_cells = [c for c in cells if c.is_baseline]
    for toggle in toggles_varied:
        if toggle in spec:
            a = spec[toggle]
        elif baseline_cells:
            a = baseline_cells[0].key.get(toggle, UNKNOWN)
        else:
            continue
        values: list[str] = []
        for cell in cells:
            v = cell.key.get(toggle, UNKNOWN)
            if v not in values and v != UNKNOWN:
                values.append(v)
        others = [d for d in dims if d != toggle]
        index: dict[tuple[str, ...], dict[str, CellSummary]] = {}
        for cell in cells:
            rest = tuple(cell.key.get(d, UNKNOWN) for d in others)
            index.setdefault(rest, {})[cell.key.get(toggle, UNKNOWN)] = cell
        for b in values:
            if b == a:
                continue
            eff = MarginalEffect(toggle=toggle, from_value=a, to_value=b)
            logs: list[np.ndarray] = []
            methods: set[str] = set()
            ci_ok = True
            for by_value in index.values():
                ca, cb = by_value.get(a), by_value.get(b)
                if ca is None or cb is None:
                    continue
                why = _comparable(cb, ca)
                if why is not None:
                    eff.skipped.append(f"{cb.label} vs {ca.label}: {why}")
                    continue
                assert ca.env_steps_per_s is not None and cb.env_steps_per_s is not None
                eff.pairs.append(
                    PairRatio(
                        without=ca.label,
                        with_=cb.label,
                        ratio=cb.env_steps_per_s / ca.env_steps_per_s,
                    )
                )
                samples, method = _ratio_samples(
                    cb, ca, _rng(bootstrap_seed, f"{toggle}|{cb.label}|{ca.label}"), n_bootstrap
                )
                if samples is None or method is None:
                    ci_ok = False
                else:
                    logs.append(np.log(samples))
                    methods.add(method)
            eff.n_pairs = len(eff.pairs)
            if eff.pairs:
                eff.effect = float(np.exp(np.mean([np.log(p.ratio) for p in eff.pairs])))
                if ci_ok and logs:
                    geo = np.exp(np.mean(np.vstack(logs), axis=0))
                    eff.ci_low = float(np.percentile(geo, 2.5))
                    eff.ci_high = float(np.percentile(geo, 97.5))
                    eff.ci_method = methods.pop() if len(methods) == 1 else "mixed"
            effects.append(eff)
    effects.sort(key=lambda e: (e.effect is None, -(e.effect or 0.0), e.label))
    for rank, eff in enumerate((e for e in effects if e.effect is not None), start=1):
        eff.rank = rank
    return effects


# -------------------------------------------------------------------------- output


def _fmt(value: float | None, spec: str = ".4g") -> str:
    if value is None:
        return "-"
    return format(value, spec)


def _ci_text(low: float | None, high: float | None) -> str:
    if low is None or high is None:
        return "-"
    return f"[{low:.3f}, {high:.3f}]"


def _return_text(cell: CellSummary) -> str:
    if cell.final_return_median is None:
        return "-"
    if cell.final_return_spread is None:
        return f"{cell.final_return_median:.4g}"
    return f"{cell.final_return_median:.4g} ± {cell.final_return_spread:.3g}"


def _extremes(report: Report) -> tuple[CellSummary | None, CellSummary | None]:
    rated = [c for c in report.cells if c.ratio is not None and not c.is_baseline]
    if len(rated) < 2:
        return None, None
    best = max(rated, key=lambda c: c.ratio or 0.0)
    worst = min(rated, key=lambda c: c.ratio or 0.0)
    return (best, worst) if best is not worst else (None, None)


def _table_rows(report: Report) -> tuple[list[str], list[list[str]]]:
    header = [
        "cell",
        "ok",
        "fail",
        "miss",
        "env_steps/s",
        "ratio",
        "95% CI",
        "method",
        "compile_s",
        "breaks/recomp",
        "final_return",
        "flags",
    ]
    rows = []
    for cell in report.cells:
        flags = []
        if cell.is_baseline:
            flags.append("baseline")
        if cell.learning_flag:
            flags.append("LEARNING")
        if cell.ratio is None and cell.ratio_note and not cell.is_baseline:
            flags.append(cell.ratio_note)
        gb = (
            f"{_fmt(cell.graph_breaks, 'd')}/{_fmt(cell.recompiles, 'd')}"
            if cell.graph_breaks is not None or cell.recompiles is not None
            else "-"
        )
        rows.append(
            [
                ("* " if cell.is_baseline else "  ") + cell.label,
                str(cell.n_ok),
                str(cell.n_failed),
                str(cell.n_missing),
                _fmt(cell.env_steps_per_s, ".1f"),
                _fmt(cell.ratio, ".3f"),
                _ci_text(cell.ci_low, cell.ci_high) if not cell.is_baseline else "-",
                cell.ci_method or "-",
                _fmt(cell.compile_s, ".2f"),
                gb,
                _return_text(cell),
                "; ".join(flags),
            ]
        )
    return header, rows


def render_table(report: Report, color: bool) -> str:
    """Plain-text table for the terminal.

    Args:
        report: The computed report.
        color: Use ANSI bold/colour for the best (green) and worst (red) ratio.

    Returns:
        The rendered text (no trailing newline).
    """
    header, rows = _table_rows(report)
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header) - 1)]
    best, worst = _extremes(report) if color else (None, None)
    ratio_col = header.index("ratio")

    def line(row: list[str], cell: CellSummary | None = None) -> str:
        parts = []
        for i, text in enumerate(row[:-1]):
            padded = text.rjust(widths[i]) if i else text.ljust(widths[i])
            if cell is not None and i in (0, ratio_col):
                if cell is best:
                    padded = f"\x1b[1;32m{padded}\x1b[0m"
                elif cell is worst:
                    padded = f"\x1b[1;31m{padded}\x1b[0m"
            parts.append(padded)
        parts.append(row[-1])
        return "  ".join(parts).rstrip()

    counts = report.to_dict()["counts"]
    expected = f" of {report.expected_jobs} expected" if report.expected_jobs else ""
    out = [
        (
            f"Sweep {report.sweep_dir}: {report.n_jobs} jobs{expected} "
            f"({counts['ok']} ok, {counts['failed']} failed, {counts['missing']} missing)"
        ),
        "Baseline: " + (" ".join(f"{k}={v}" for k, v in report.baseline_spec.items()) or "(any)"),
        "",
        line(header),
    ]
    out += [line(row, cell) for row, cell in zip(rows, report.cells)]
    if report.marginal_effects:
        out += ["", "Which toggle pays (geometric mean of pair ratios):"]
        for eff in report.marginal_effects:
            rank = f"{eff.rank}." if eff.rank else "-"
            out.append(
                f"  {rank:>3} {eff.label}: x{_fmt(eff.effect, '.3f')} "
                f"{_ci_text(eff.ci_low, eff.ci_high)} pairs={eff.n_pairs}"
                + (f" ({eff.ci_method})" if eff.ci_method else "")
            )
    details = [f"  {where}: {text}" for text, where in _not_applicable_groups(report)]
    for cell in report.cells:
        if cell.learning_flag:
            details.append(f"  {cell.label}: LEARNING differs: {cell.learning_note}")
    for cas in report.casualties:
        details.append(f"  {cas.cell} (seed {cas.seed}): {cas.status}: {cas.detail}")
    for note in report.notes:
        details.append(f"  {note}")
    if details:
        out += ["", "Notes:", *details]
    return "\n".join(out)


def _not_applicable_groups(report: Report) -> list[tuple[str, str]]:
    """("<toggle> n/a: <reason>", "all cells" or the cell labels), in first-seen order."""
    groups: dict[str, list[str]] = {}
    for cell in report.cells:
        for entry in cell.not_applicable:
            name, _, reason = entry.partition(": ")
            groups.setdefault(f"{name} n/a: {reason}", []).append(cell.label)
    with_records = [c for c in report.cells if c.n_ok + c.n_failed > 0]
    out = []
    for text, labels in groups.items():
        where = "all cells" if len(labels) == len(with_records) > 1 else ", ".join(labels)
        out.append((text, where))
    return out


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _render_markdown(report: Report) -> str:
    counts = report.to_dict()["counts"]
    lines = [
        f"# Sweep report: `{report.sweep_dir}`",
        "",
        f"Jobs: {report.n_jobs}"
        + (f" (multirun.yaml expects {report.expected_jobs})" if report.expected_jobs else "")
        + f": {counts['ok']} ok, {counts['failed']} failed "
        f"({counts['interrupted']} interrupted), {counts['missing']} missing.",
        "",
        "Baseline: `"
        + (" ".join(f"{k}={v}" for k, v in report.baseline_spec.items()) or "(any)")
        + "` → "
        + ", ".join(f"`{b}`" for b in report.baseline_labels),
        "",
        "## Cells",
        "",
    ]
    header = [
        "cell",
        "ok",
        "failed",
        "missing",
        "env_steps_per_s",
        "ratio",
        "95% CI",
        "CI method",
        *[f"{p} median_ms" for p in PHASES],
        "compile_s",
        "graph_breaks",
        "recompiles",
        "final_return",
        "learning",
        "notes",
    ]
    lines.append("| " + " | ".join(header) + " |")
    lines.append("|" + "---|" * len(header))
    for cell in report.cells:
        notes = []
        if cell.ratio_note and not cell.is_baseline:
            notes.append(cell.ratio_note)
        notes += [
            f"{n.partition(': ')[0]} n/a: {n.partition(': ')[2]}" for n in cell.not_applicable
        ]
        notes += cell.errors
        row = [
            f"**{cell.label}** (baseline)" if cell.is_baseline else cell.label,
            str(cell.n_ok),
            str(cell.n_failed),
            str(cell.n_missing),
            _fmt(cell.env_steps_per_s, ".1f"),
            _fmt(cell.ratio, ".3f"),
            "-" if cell.is_baseline else _ci_text(cell.ci_low, cell.ci_high),
            cell.ci_method or "-",
            *[_fmt(cell.phase_median_ms.get(p), ".4g") for p in PHASES],
            _fmt(cell.compile_s, ".2f"),
            _fmt(cell.graph_breaks, "d"),
            _fmt(cell.recompiles, "d"),
            _return_text(cell),
            "FLAG" if cell.learning_flag else ("ok" if cell.learning_flag is False else "-"),
            "; ".join(notes),
        ]
        lines.append("| " + " | ".join(_md_escape(x) for x in row) + " |")
    lines += ["", "## Which toggle pays", ""]
    if report.marginal_effects:
        lines.append("| rank | change | effect (geo-mean ratio) | 95% CI | pairs | CI method |")
        lines.append("|---|---|---|---|---|---|")
        for eff in report.marginal_effects:
            lines.append(
                f"| {eff.rank or '-'} | {_md_escape(eff.label)} | {_fmt(eff.effect, '.3f')} | "
                f"{_ci_text(eff.ci_low, eff.ci_high)} | {eff.n_pairs} | {eff.ci_method or '-'} |"
            )
        for eff in report.marginal_effects:
            for skip in eff.skipped:
                lines.append(f"- {_md_escape(eff.label)}: pair skipped: {skip}")
    else:
        lines.append("No toggle varies in this sweep.")
    lines += ["", "## Learning check", "", LEARNING_RULE, ""]
    flagged = [c for c in report.cells if c.learning_flag]
    lines += [f"- **{c.label}**: {c.learning_note}" for c in flagged] or ["No cell flagged."]
    lines += ["", "## Casualties", ""]
    lines += [
        f"- `{c.cell}` seed {c.seed}: **{c.status}**: {c.detail} ({c.where})"
        for c in report.casualties
    ] or ["None."]
    lines += ["", "## Not-applicable toggles", ""]
    lines += [f"- {where}: {text}" for text, where in _not_applicable_groups(report)] or ["None."]
    lines += ["", "## Fingerprints", ""]
    fps = {json.dumps(c.fingerprint, sort_keys=True) for c in report.cells if c.fingerprint}
    for fp in sorted(fps):
        lines.append(f"- `{fp}`")
    fp_notes = [n for n in report.notes if "fingerprint" in n]
    lines += [f"- {n}" for n in fp_notes]
    if not fps and not fp_notes:
        lines.append("No fingerprints recorded.")
    other = [n for n in report.notes if "fingerprint" not in n]
    if other:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in other]
    lines += [
        "",
        "## Method",
        "",
        CI_RULE.format(n=report.n_bootstrap, seed=report.bootstrap_seed),
        "",
    ]
    return "\n".join(lines)


def _render_csv(report: Report) -> str:
    fixed = [
        "cell",
        *report.varied_dims,
        "is_baseline",
        "baseline_cell",
        "n_ok",
        "n_failed",
        "n_interrupted",
        "n_missing",
        "seeds_ok",
        "env_steps_per_s",
        "env_steps_per_s_seeds",
        "updates_per_s",
        "ratio",
        "ci_low",
        "ci_high",
        "ci_method",
        "ratio_note",
        *[f"{p}_median_ms" for p in PHASES],
        *[f"{p}_total_s" for p in PHASES],
        "compile_s",
        "graph_breaks",
        "recompiles",
        "final_return_median",
        "final_return_spread",
        "final_return_spread_kind",
        "learning_flag",
        "learning_note",
        "not_applicable",
        "fingerprint_note",
        "errors",
    ]

    def text(value: Any) -> str:
        if value is None:
            return ""
        if isinstance(value, float):
            return repr(value) if math.isfinite(value) else ""
        if isinstance(value, list):
            return ";".join(text(v) for v in value)
        return str(value)

    buf = io.StringIO()
    writer = csv.writer(buf, lineterminator="\n")
    writer.writerow(fixed)
    for cell in report.cells:
        values: dict[str, Any] = dict(cell.varied)
        values.update(
            {
                "cell": cell.label,
                "is_baseline": cell.is_baseline,
                "baseline_cell": cell.baseline_label,
                **{f"{p}_median_ms": cell.phase_median_ms.get(p) for p in PHASES},
                **{f"{p}_total_s": cell.phase_total_s.get(p) for p in PHASES},
            }
        )
        for name in fixed:
            if name not in values and hasattr(cell, name):
                values[name] = getattr(cell, name)
        writer.writerow([text(values.get(name)) for name in fixed])
    return buf.getvalue()


def _atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write data to path via a temp file in the same directory and os.replace."""
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    return path


def _new_figure(width_in: float, height_in: float) -> Any:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width_in, height_in), dpi=110)
    FigureCanvasAgg(fig)
    return fig


def _png_bytes(fig: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png")
    return buf.getvalue()


def _plot_ratio(report: Report) -> bytes | None:
    cells = [c for c in report.cells if c.ratio is not None]
    if not cells:
        return None
    fig = _new_figure(9.0, max(3.5, 0.45 * len(cells) + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    ys = np.arange(len(cells))[::-1]
    ratios = [c.ratio for c in cells]
    low = [max(0.0, c.ratio - c.ci_low) if c.ci_low is not None and c.ratio else 0.0 for c in cells]
    high = [
        max(0.0, c.ci_high - c.ratio) if c.ci_high is not None and c.ratio else 0.0 for c in cells
    ]
    colors = []
    for c in cells:
        if c.is_baseline:
            colors.append("#888888")
        elif c.ci_low is not None and c.ci_low > 1.0:
            colors.append("#2a9d3f")
        elif c.ci_high is not None and c.ci_high < 1.0:
            colors.append("#c0392b")
        else:
            colors.append("#5b7fbf")
    ax.barh(ys, ratios, xerr=[low, high], color=colors, capsize=3)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(ys)
    ax.set_yticklabels(
        [c.label + (" (baseline)" if c.is_baseline else "") for c in cells], fontsize=8
    )
    ax.set_xlabel("env_steps_per_s ratio vs baseline (95% CI)")
    ax.set_title("Speed-up vs baseline")
    return _png_bytes(fig)


def _plot_phases(report: Report) -> bytes | None:
    cells = [c for c in report.cells if any(v is not None for v in c.phase_total_s.values())]
    if not cells:
        return None
    fig = _new_figure(9.0, max(3.5, 0.45 * len(cells) + 1.5))
    ax = fig.add_subplot(1, 1, 1)
    ys = np.arange(len(cells))[::-1]
    left = np.zeros(len(cells))
    for phase in PHASES:
        widths = np.array([c.phase_total_s.get(phase) or 0.0 for c in cells])
        if not widths.any():
            continue
        ax.barh(ys, widths, left=left, label=phase)
        left += widths
    ax.set_yticks(ys)
    ax.set_yticklabels([c.label for c in cells], fontsize=8)
    ax.set_xlabel("steady-state seconds per phase (median over seeds)")
    ax.set_title("Where the time goes")
    ax.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=len(PHASES))
    return _png_bytes(fig)


def _plot_learning(report: Report) -> bytes | None:
    cells = [c for c in report.cells if c.curves]
    if not cells:
        return None
    fig = _new_figure(12.0, 4.5)
    ax_steps = fig.add_subplot(1, 2, 1)
    ax_wall = fig.add_subplot(1, 2, 2)
    cmap = _colormap(len(cells))
    for i, cell in enumerate(cells):
        for j, curve in enumerate(cell.curves):
            ret = curve["episode_return"]
            label = cell.label if j == 0 else None
            if len(curve["env_steps"]) == len(ret):
                ax_steps.plot(curve["env_steps"], ret, color=cmap[i], alpha=0.7, label=label)
            if len(curve["wall_s"]) == len(ret):
                ax_wall.plot(curve["wall_s"], ret, color=cmap[i], alpha=0.7, label=label)
    ax_steps.set_xlabel("env steps")
    ax_wall.set_xlabel("wall-clock s")
    for ax in (ax_steps, ax_wall):
        ax.set_ylabel("episode return")
    ax_steps.set_title("Return vs env steps")
    ax_wall.set_title("Return vs wall-clock")
    ax_steps.legend(fontsize=7, loc="best")
    return _png_bytes(fig)


def _colormap(n: int) -> list[Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if n <= 10 else "viridis"]
    return [cmap(i if n <= 10 else i / max(1, n - 1)) for i in range(n)]


def write_report(report: Report, out_dir: str | os.PathLike[str], plots: bool = True) -> list[Path]:
    """Write summary.csv, summary.md, report.json and (optionally) PNG plots.

    Each file is written atomically (temp file in ``out_dir`` + ``os.replace``). A plot
    without data (e.g. every job failed) is skipped; the text outputs are still written.

    Args:
        report: The computed report.
        out_dir: Output folder; created when missing.
        plots: Also write ratio.png, phases.png and learning_curves.png.

    Returns:
        Paths of the files written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    written = [
        _atomic_write_bytes(out / "summary.csv", _render_csv(report).encode()),
        _atomic_write_bytes(out / "summary.md", _render_markdown(report).encode()),
        _atomic_write_bytes(
            out / "report.json",
            (json.dumps(report.to_dict(), indent=2, allow_nan=False) + "\n").encode(),
        ),
    ]
    if plots:
        for name, make in (
            ("ratio.png", _plot_ratio),
            ("phases.png", _plot_phases),
            ("learning_curves.png", _plot_learning),
        ):
            data = make(report)
            if data is not None:
                written.append(_atomic_write_bytes(out / name, data))
    return written


# ----------------------------------------------------------------------------- CLI


def _parse_args(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m sweeps.report",
        description="Summarise a sweep: per-cell throughput, speed-up vs baseline, "
        "toggle effects, learning check, casualties.",
    )
    parser.add_argument("sweep_dir", help="Hydra multirun directory of the sweep")
    parser.add_argument(
        "--baseline",
        nargs="+",
        action="extend",
        default=[],
        metavar="KEY=VALUE",
        help="baseline cell, override-style (default: every toggle off)",
    )
    parser.add_argument("--out", default=None, help="output folder (default: <sweep_dir>/report)")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    return parser.parse_args(list(argv))


def main(argv: Sequence[str]) -> int:
    """Command-line entry point.

    Args:
        argv: Arguments without the program name.

    Returns:
        0 when a report was produced (failed jobs included), 2 for bad input.
    """
    try:
        args = _parse_args(argv)
    except SystemExit as exc:  # argparse has already printed its message
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    baseline: dict[str, str] = {}
    for item in args.baseline:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            print(f"error: bad --baseline item {item!r}: expected key=value", file=sys.stderr)
            return 2
        baseline[key.strip()] = value.strip()
    try:
        sweep = load_sweep(args.sweep_dir)
        report = build_report(sweep, baseline or None)
    except ReportInputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    out_dir = Path(args.out) if args.out else Path(args.sweep_dir) / "report"
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    print(render_table(report, color=color))
    try:
        written = write_report(report, out_dir, plots=not args.no_plots)
    except OSError as exc:
        print(f"error: cannot write report to {out_dir}: {exc}", file=sys.stderr)
        return 2
    print()
    print(f"Wrote {len(written)} files to {out_dir}: {', '.join(p.name for p in written)}")
    return 0
