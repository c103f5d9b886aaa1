"""Pure computation: cells, ratios with bootstrap CIs, marginal effects, the learning check.

The methods are described in the package docstring (:mod:`rlsweep.report`).
"""

from __future__ import annotations

import json
import math
import zlib
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from rlsweep import prepare
from rlsweep.bootstrap import SeedRatio, iqm_with_ci, p_improvement, seed_ratio
from rlsweep.records import FIXED_COST_PARTS, PHASES, STATUS_FAILED, STATUS_INTERRUPTED, STATUS_OK, section
from rlsweep.report import measurement, model
from rlsweep.report.load import norm_key, norm_value
from rlsweep.report.measurement import finite, positive_int
from rlsweep.report.model import UNKNOWN, CellSummary, Job, MarginalEffect, ReportInputError, Sweep, spec_text
from rlsweep.toggles import TOGGLES

N_BOOTSTRAP = 2000
BOOTSTRAP_SEED = 20261129
#: the measurement flags a cell can carry (:data:`~rlsweep.report.model.FLAG_RULE`)
FLAG_DRIFT, FLAG_NOISY, FLAG_SEEDS, FLAG_OVERSUBSCRIBED, FLAG_STATE = (
    "drift", "noisy", "seeds_disagree", "oversubscribed", "state_differs")
#: the fingerprint fields two cells must share for their throughput to compare
FINGERPRINT_FIELDS = ("cpu_model", "cpu_count", "num_threads", "gpu", "torch", "cuda")
#: the toggles that must keep every number (:attr:`Toggle.keeps_numbers`)
KEEPS_NUMBERS = frozenset(t.name for t in TOGGLES if t.keeps_numbers)
#: the learning check's loose rule: flagged beyond max(this x the pooled spread, this fraction of the baseline's median)
LEARNING_SD_FACTOR, LEARNING_REL_FLOOR = 2.0, 0.05


def build_report(sweep: Sweep, baseline: dict[str, str] | None = None, *, n_bootstrap: int = N_BOOTSTRAP,
                 bootstrap_seed: int = BOOTSTRAP_SEED) -> model.Report:
    """Compute per-cell numbers, ratios vs the baseline, toggle effects and flags (pure data; nothing is written).

    ``baseline`` is override-style (``{"compile": "none"}``): its entries replace the all-toggles-off default. Each CI
    takes ``n_bootstrap`` resamples from an RNG seeded with ``bootstrap_seed``, so the same inputs give the same CIs.

    Raises:
        ReportInputError: An unknown baseline key, no cell matching the baseline, or
            more than one matching cell within one context.
    """
    dims = sweep.dims
    groups: dict[tuple[str, ...], list[Job]] = {}
    for job in sweep.jobs:
        groups.setdefault(tuple(job.key.get(d, UNKNOWN) for d in dims), []).append(job)
    varied = [d for i, d in enumerate(dims) if len({k[i] for k in groups}) > 1]
    cell_jobs = [(_summarise_cell(dict(zip(dims, k)), varied, jobs, n_bootstrap, bootstrap_seed), jobs)
                 for k, jobs in groups.items()]
    cells = [cell for cell, _ in cell_jobs]
    label = {id(job): cell.label for cell, jobs in cell_jobs for job in jobs}
    crowded = measurement.oversubscribed(measurement.spans(sweep.jobs))
    for cell, jobs in cell_jobs:
        if notes := [crowded[id(j)] for j in jobs if j.status == STATUS_OK and id(j) in crowded]:
            _flag(cell, FLAG_OVERSUBSCRIBED, *notes)
    _start_states(cell_jobs, sweep.prepared)
    first_num = {id(c): min((j.num for j in jobs if j.num is not None), default=10**9) for c, jobs in cell_jobs}

    spec, context, baseline_reasons, by_context = _baseline(cells, sweep, baseline, varied, first_num)
    cells.sort(key=lambda c: (not c.is_baseline, first_num[id(c)], c.label))
    for cell in cells:
        base = by_context.get(tuple(cell.key.get(d, UNKNOWN) for d in context))
        if base is None:
            cell.ratio_note = f"no baseline cell in this context ({spec_text({d: cell.key.get(d) for d in context})})"
            cell.learning_note = "not assessed: no baseline cell"
        elif cell is base:  # its ratios are 1 by definition (where it has the numbers they compare)
            cell.baseline_label, cell.ci_method, cell.learning_note = cell.label, "baseline", "baseline"
            cell.ratio_note = "baseline" if cell.env_steps_per_s else "baseline has no ok jobs"
            if cell.env_steps_per_s is not None:
                cell.ratio = cell.ci_low = cell.ci_high = 1.0
                cell.ratio_clean = not cell.flags
            if cell.wall_s is not None:
                cell.end_to_end_ratio = cell.end_to_end_ci_low = cell.end_to_end_ci_high = 1.0
        else:
            cell.baseline_label = base.label
            _compare_with_baseline(cell, base, n_bootstrap, bootstrap_seed)

    return model.Report(
        sweep_dir=sweep.sweep_dir, baseline_spec=spec, baseline_labels=[c.label for c in cells if c.is_baseline],
        varied_dims=varied, cells=cells,
        marginal_effects=_marginal_effects(cells, sweep, varied, spec),
        casualties=[model.Casualty(cell=label[id(job)], seed=job.seed, status=job.status, detail=job.error_line or "",
                                   where=str(job.job_dir or f"job {job.num} (never started)"))
                    for job in sweep.jobs if job.status != STATUS_OK],
        notes=list(sweep.notes) + _notes(cells, sweep.jobs, label),
        n_jobs=len(sweep.jobs), expected_jobs=sweep.expected_jobs, n_bootstrap=n_bootstrap,
        bootstrap_seed=bootstrap_seed, wandb=sweep.wandb, run_order=measurement.run_order(sweep.jobs, dims),
        baseline_reasons=baseline_reasons, prepared=sweep.prepared,
    )


def _start_states(cell_jobs: list[tuple[CellSummary, list[Job]]], prepared: dict[str, Any] | None) -> None:
    """Each cell's cold compile (from the sweep's preparation) and the states its jobs started in;
    flag every cell when the sweep's jobs did not all start alike (FLAG_STATE in FLAG_RULE).
    Records without the measurement section (older rlsweep) are not judged."""
    processes: Counter[str] = Counter()
    caches: Counter[str] = Counter()
    compiled: set[int] = set()  # the cells with a job that found the compile cache in some state
    for cell, jobs in cell_jobs:
        cold = (prepare.cell_entry(prepared, jobs[0].overrides) or {}).get("cold") or {}
        if cold.get("status") == "ok":
            cell.cold_compile_s, cell.cold_compile_source = finite(cold.get("compile_s")), prepare.cold_source(cold)
        for job in jobs:
            state = section(job.record, "measurement")
            if job.status != STATUS_OK or not state.get("process"):
                continue
            process, cache = str(state["process"]), state.get("compile_cache")
            processes[process] += 1
            if cache:
                caches[str(cache)] += 1
                compiled.add(id(cell))
            text = f"{process} process" + (f", {cache} compile cache" if cache else "")
            if text not in cell.start_states:
                cell.start_states.append(text)

    def counts(c: Counter[str]) -> str:
        return ", ".join(f"{k} x{n}" for k, n in sorted(c.items()))

    notes = []
    if len(processes) > 1:
        notes.append(f"jobs started in different process states ({counts(processes)}): the first run of a "
                     "process pays its warm-up, so end-to-end times measure the order of the jobs")
    if len(caches) > 1:
        notes.append(f"compiled jobs found the compile cache in different states ({counts(caches)}): their "
                     "compile and end-to-end times measure which job compiled first")
    hint = "" if prepared else " (the sweep was not prepared: prepare=false, or a launcher that skips it)"
    for cell, _ in cell_jobs:
        if len(processes) > 1 or (len(caches) > 1 and id(cell) in compiled):
            _flag(cell, FLAG_STATE, *[n + hint for n in notes])


def _flag(cell: CellSummary, kind: str, *notes: str) -> None:
    if kind not in cell.flags:
        cell.flags.append(kind)
    cell.flag_notes += [n for n in notes if n not in cell.flag_notes]


# ----------------------------------------------------------------------------- cells


def _numbers(jobs: Sequence[Job], name: str, key: str) -> list[float]:
    """The finite ``record[name][key]`` of each job that has one."""
    return [v for job in jobs if (v := finite(section(job.record, name).get(key))) is not None]


def _median(values: Sequence[float]) -> float | None:
    return float(np.median(values)) if len(values) else None


def _compile_reasons(jobs: list[Job]) -> dict[str, dict[str, Any]]:
    """Graph-break, recompile and CUDA-graph-skip reasons of the jobs' compiled functions (failed jobs'
    too), identical ones merged; the shape: :class:`CellSummary` (``compile_reasons``)."""
    merged: dict[str, dict[str, dict[tuple[Any, ...], dict[str, Any]]]] = {}
    dropped: Counter[str] = Counter()
    skips: Counter[str] = Counter()
    kinds = (("graph_breaks", "graph_break_reasons"), ("recompiles", "recompile_reasons"),
             ("cudagraph_skips", "cudagraph_skip_reasons"))
    for job in jobs:
        for name, fn in section(section(job.record, "compile"), "per_function").items():
            if not isinstance(fn, dict):
                continue
            for kind, field_name in kinds:
                seen: set[tuple[Any, ...]] = set()
                for entry in [e for e in fn.get(field_name) or [] if isinstance(e, dict)]:
                    key = tuple(json.dumps(entry.get(k)) for k in sorted(entry) if k not in ("count", "stack"))
                    out = merged.setdefault(str(name), {}).setdefault(kind, {}).setdefault(
                        key, {**entry, "count": 0, "jobs": 0})
                    count = entry.get("count")
                    out["count"] += count if isinstance(count, int) and not isinstance(count, bool) else 1
                    out["jobs"] += key not in seen
                    seen.add(key)
            if n_skips := positive_int(fn.get("cudagraph_skips")):
                skips[str(name)] += n_skips
            if extra := positive_int(fn.get("reasons_dropped")):
                dropped[str(name)] += extra
    result: dict[str, dict[str, Any]] = {}
    for name in dict.fromkeys([*merged, *dropped, *skips]):
        tables = merged.get(name, {})
        result[name] = {kind: sorted(tables.get(kind, {}).values(), key=lambda e: -e["count"]) for kind, _ in kinds}
        result[name].update(reasons_dropped=dropped[name], cudagraph_skip_count=skips[name])
    return result


def _fingerprint_key(fp: dict[str, Any]) -> tuple[str, ...]:
    """The compared fingerprint fields as comparable text (hostname is not one of them)."""
    return tuple(json.dumps(fp.get(name), sort_keys=True) for name in FINGERPRINT_FIELDS)


def _fingerprint_diff(a: tuple[str, ...], b: tuple[str, ...]) -> str:
    return "; ".join(f"{name} {json.loads(x)} vs {json.loads(y)}" for name, x, y in zip(FINGERPRINT_FIELDS, a, b)
                     if x != y)


def _summarise_cell(key: dict[str, str], varied: list[str], jobs: list[Job], n_bootstrap: int,
                    bootstrap_seed: int) -> CellSummary:
    """One cell's numbers (from its ok jobs), its errors and not-applicable toggles, and the flags its
    own jobs raise: drift, noise, seeds that disagree."""
    ok = [j for j in jobs if j.status == STATUS_OK]
    cell = CellSummary(
        label=" ".join(f"{d}={key.get(d, UNKNOWN)}" for d in varied) or "all", key=dict(key),
        varied={d: key.get(d, UNKNOWN) for d in varied}, n_ok=len(ok),
        n_failed=sum(j.status in (STATUS_FAILED, STATUS_INTERRUPTED) for j in jobs),
        n_interrupted=sum(j.status == STATUS_INTERRUPTED for j in jobs),
        n_missing=sum(j.status == model.STATUS_MISSING for j in jobs),
        seeds_ok=[j.seed if j.seed is not None else UNKNOWN for j in ok],
    )
    steps: list[float] = []
    fixed: list[float] = []
    for job in ok:
        rec = job.record
        wall, n_steps, rate = finite(rec.get("wall_s")), finite(rec.get("env_steps")), measurement.steady_rate(job)
        seed = _seed_key(job, {**cell.rate_by_seed, **cell.wall_by_seed})
        # seeds trained together (seeds_per_job) share one process and its clock: one measurement, not N
        timed = measurement.group_leader(job)
        cell.grouped |= not timed
        if wall is not None and wall > 0:
            cell.wall_s_seeds.append(wall)
            if timed:
                cell.wall_by_seed[seed] = wall
            if n_steps is not None and rate is not None:
                steps.append(n_steps)
                fixed.append(wall - n_steps / rate)
        _check_drift(cell, job, n_steps, seed if timed else None)
        if rate is not None:
            cell.env_steps_per_s_seeds.append(rate)
            if timed:
                cell.rate_by_seed[seed] = rate
        cell.n_iterations += len(measurement.iteration_rates(job))
        curve = section(section(rec, "learning"), "curve")
        if curve.get("episode_return"):
            series = ("env_steps", "wall_s", "episode_return")
            cell.curves.append({"seed": job.seed, **{k: list(curve.get(k) or []) for k in series}})
    for job in jobs:  # the toggles that did not apply, one error line per job that did not finish ok
        for name, entry in section(job.record, "toggles").items():
            if isinstance(entry, dict) and entry.get("applied") is False:
                text = f"{name}: {entry.get('reason') or 'not applied (no reason given)'}"
                if text not in cell.not_applicable:
                    cell.not_applicable.append(text)
        if job.status != STATUS_OK:
            cell.errors.append(f"{job.status} (seed {job.seed if job.seed is not None else '?'}): {job.error_line}")
    _summarise_phases(cell, ok)
    cell.env_steps_per_s = _median(cell.env_steps_per_s_seeds)
    cell.updates_per_s = _median(_numbers(ok, "throughput", "updates_per_s"))
    cell.compile_s = _median(_numbers(ok, "compile", "compile_s"))
    cell.fixed_cost_parts = {part: _median(_numbers(ok, "fixed_cost", part)) for part in FIXED_COST_PARTS}
    cell.graph_breaks = max(map(int, _numbers(ok, "compile", "graph_breaks")), default=None)
    cell.recompiles = max(map(int, _numbers(ok, "compile", "recompiles")), default=None)
    cell.compile_reasons = _compile_reasons(jobs)
    _summarise_returns(cell, ok, np.random.default_rng([bootstrap_seed, zlib.crc32(("iqm|" + cell.label).encode())]),
                       n_bootstrap)
    cell.wall_s, cell.env_steps, cell.fixed_cost_s = _median(cell.wall_s_seeds), _median(steps), _median(fixed)
    if note := measurement.seeds_disagree(ok):
        _flag(cell, FLAG_SEEDS, note)
    fps = list(dict.fromkeys(_fingerprint_key(section(job.record, "fingerprint")) for job in ok))
    if len(fps) == 1:
        cell.fingerprint = {n: json.loads(v) for n, v in zip(FINGERPRINT_FIELDS, fps[0])}
    elif len(fps) > 1:  # a note naming the fields where its ok jobs differ
        cell.fingerprint_mixed = True
        cell.fingerprint_note = "mixed fingerprints within cell: " + _fingerprint_diff(fps[0], fps[1])
    return cell


def _seed_key(job: Job, taken: Mapping[str, Any]) -> str:
    """The key a job's numbers pair on across cells: its seed ("?<job>" without one; a duplicate seed gets
    its own key, unpaired)."""
    seed = str(job.seed) if job.seed is not None else f"?{job.num}"
    while seed in taken:
        seed += "'"
    return seed


def _check_drift(cell: CellSummary, job: Job, n_steps: float | None, seed: str | None) -> None:
    """The job's drift within itself (first vs last third of its steady iterations) and its noise: flags, and
    its median rate's own standard error (the floor of the intervals' spread)."""
    if (drift := measurement.job_drift(job)) is None:
        return
    cell.job_drift.append(drift)
    if seed is not None:
        cell.rate_se_by_seed[seed] = drift["rate_uncertainty"] / 2
    if drift["flagged"]:
        _flag(cell, FLAG_DRIFT, (
            f"drift: seed {job.seed}'s steady rate went from {drift['first_third']:.4g} (first third "
            f"of {drift['n_iterations']} iterations) to {drift['last_third']:.4g} env steps/s "
            f"(last third), x{drift['drift']:.3f}"))
    if drift["noisy"]:
        # the uncertainty falls as 1/sqrt(iterations): the budget that would bring it under the threshold
        more = (drift["rate_uncertainty"] / model.DRIFT_REL) ** 2
        budget = (f"; total_env_steps={math.ceil(n_steps * more / 1000) * 1000:,} (x{more:.1f}) would bring it "
                  f"under {model.DRIFT_REL:.0%}" if n_steps else "")
        _flag(cell, FLAG_NOISY, (
            f"noisy: seed {job.seed}'s median steady rate is uncertain by +-{drift['rate_uncertainty']:.0%} "
            f"(2 standard errors over {drift['n_iterations']} iterations){budget}"))


def _summarise_phases(cell: CellSummary, ok: list[Job]) -> None:
    """The median over seeds of each phase's median_ms and total_s (a total from the count when absent)."""
    for phase in PHASES:
        medians, totals = [], []
        for entry in (section(section(j.record, "timings"), phase) for j in ok):
            med, total = finite(entry.get("median_ms")), finite(entry.get("total_s"))
            if med is not None:
                medians.append(med)
            if total is None and med is not None and finite(entry.get("count")) is not None:
                total = med * float(entry["count"]) / 1000.0
            if total is not None:
                totals.append(total)
        cell.phase_median_ms[phase], cell.phase_total_s[phase] = _median(medians), _median(totals)


def _summarise_returns(cell: CellSummary, ok: list[Job], rng: np.random.Generator, n_bootstrap: int) -> None:
    """The median final return, its noise (the learning check's), its interquartile range over seeds (one seed:
    over its eval episodes) and the interquartile mean with its bootstrap interval."""
    learned = [j for j in ok if finite(section(j.record, "learning").get("final_return")) is not None]
    returns = cell.final_returns = _numbers(learned, "learning", "final_return")
    for job, value in zip(learned, returns):
        cell.return_by_seed[_seed_key(job, cell.return_by_seed)] = value
    cell.final_return_median = _median(returns)
    if returns:
        cell.final_return_iqm, *ci = iqm_with_ci(returns, rng, n_bootstrap)
        cell.final_return_iqm_ci = (ci[0], ci[1])
    eval_sds = _numbers(learned, "learning", "final_return_std")
    if len(returns) >= 2:
        cell.final_return_spread, cell.final_return_spread_kind = float(np.std(returns, ddof=1)), "seed_sd"
    elif len(returns) == 1 and eval_sds:
        cell.final_return_spread, cell.final_return_spread_kind = eval_sds[0], "eval_sd"
    eval_returns = section(learned[-1].record, "learning").get("eval_returns") if learned else None
    iqr_over = returns if len(returns) >= 2 else [r for r in map(finite, eval_returns or []) if r is not None]
    if iqr_over:
        cell.final_return_q25, cell.final_return_q75 = (float(q) for q in np.percentile(iqr_over, [25, 75]))
        cell.final_return_iqr_over = "seeds" if len(returns) >= 2 else "eval episodes"


def _notes(cells: list[CellSummary], jobs: list[Job], label: dict[int, str]) -> list[str]:
    """Duplicate seeds and fingerprint problems, one note per cell and problem; then which code the jobs
    ran on, when not all on one commit (a ratio between jobs on different commits measures the code
    change as well as the toggle), jobs resumed on other code and rejected checkpoints."""
    notes = []
    for cell in cells:
        seeds = [s for s in cell.seeds_ok if s != UNKNOWN]
        if len(set(seeds)) < len(seeds):
            notes.append(f"{cell.label}: duplicate seeds {sorted(seeds)} (all kept)")
        if cell.fingerprint_mixed:
            notes.append(f"{cell.label}: {cell.fingerprint_note}")
        elif cell.ratio_note and cell.ratio_note.startswith("fingerprint differs"):
            notes.append(f"{cell.label}: {cell.ratio_note}")
    code_notes: list[str] = []
    by_commit: dict[str, list[str]] = {}
    for job in (job for job in jobs if job.record):
        where = f"{label[id(job)]} seed {job.seed}"
        # the commits it ran on, one per attempt, as abc1234 (+dirty with uncommitted changes)
        history = job.record.get("code_history")
        if not isinstance(history, list) or not history:
            code = section(section(section(job.record, "provenance"), "code"), "rlsweep")
            history = [code] if code else []
        commits = [str(segment["commit"])[:7] + ("+dirty" if segment.get("dirty") else "")
                   for segment in history if isinstance(segment, dict) and segment.get("commit")]
        if commits:
            by_commit.setdefault(commits[-1], []).append(where)
        if len(dict.fromkeys(commits)) > 1:
            code_notes.append(f"{where}: resumed on other code: {' → '.join(commits)}")
        if rejected := job.record.get("checkpoint_rejected"):
            code_notes.append(f"{where}: its checkpoint was not used ({rejected}); it started afresh")
    if len(by_commit) > 1:
        parts = "; ".join(f"{commit}: {', '.join(where)}" for commit, where in by_commit.items())
        notes.append(f"jobs ran on different code, so ratios between them include the code change: {parts}")
    return notes + code_notes


# -------------------------------------------------------------------------- baseline


REASON_OFF = "toggle off"
#: every toggle off (:meth:`Toggle.baseline`), as the report compares values (``"false"``, ``"none"``)
DEFAULT_BASELINE = {dim: norm_value(off) for t in TOGGLES for dim, off in t.baseline().items()}
#: a toggle's values in the order it lists them (the fallback baseline is the first one present)
TOGGLE_VALUE_ORDER = {t.name: tuple(norm_value(v) for v in t.values) for t in TOGGLES if t.values is not None}


def _baseline(
    cells: list[CellSummary], sweep: Sweep, baseline: dict[str, str] | None, varied: list[str], first_num: dict[int, int],
) -> tuple[dict[str, str], list[str], dict[str, str], dict[tuple[str, ...], CellSummary]]:
    """The baseline spec, the context dimensions (each context gets its own baseline cell), why each
    baseline value was chosen, and the one cell matching the spec in each context (marked is_baseline).

    Toggles default to off (restricted to the varied ones), overlaid with ``--baseline``. A varied toggle with no off
    value (``backend.num_threads``, a plugin's toggle) and, when no toggle varies and ``--baseline`` is not given, every
    varied hyper-parameter (``-m algo.lr=0.001,0.0003``) is pinned too, so that every sweep gets a comparison: to the
    config's default value when it is among the swept values, else to the first value listed (else the value of the
    sweep's first job). An off value that no cell has (``compile=default,max-autotune``) is replaced by the toggle's
    first value in the sweep (values ordered as the toggle lists them, else alphabetically).
    """
    dims = sweep.dims
    spec = {d: v for d, v in DEFAULT_BASELINE.items() if d in varied}
    reasons = dict.fromkeys(spec, REASON_OFF)
    for raw_key, raw_value in (baseline or {}).items():
        key = norm_key(str(raw_key))
        if key not in dims:
            raise ReportInputError(f"unknown baseline key {raw_key!r}; known keys: {', '.join(dims) or '(none)'}")
        spec[key], reasons[key] = norm_value(raw_value), "chosen with --baseline"
    toggles_varied = [d for d in varied if d in sweep.toggle_dims]
    open_dims = varied if not baseline and not toggles_varied else [d for d in toggles_varied if d not in spec]
    for dim in [*spec, *open_dims]:  # the open dimensions are not in the spec yet
        present = {c.key[dim] for c in cells} - {UNKNOWN}  # a varied dimension has a value besides UNKNOWN
        if dim in spec:
            if reasons[dim] == REASON_OFF and spec[dim] not in present:
                known = TOGGLE_VALUE_ORDER.get(dim, ())
                spec[dim] = min(present, key=lambda v: (known.index(v) if v in known else len(known), v))
                reasons[dim] = "the off value was not swept: the toggle's first value in the sweep"
            continue
        default = sweep.config_defaults.get(dim)
        unswept = f"; the config's default {dim}={default} was not swept" if default is not None else ""
        listed = [v for v in sweep.listed_values.get(dim, []) if v in present]
        if default in present:
            spec[dim], reasons[dim] = default, "the config's default"
        elif listed:
            spec[dim], reasons[dim] = listed[0], "the first value listed" + unswept
        else:
            first = min((c for c in cells if c.key.get(dim) in present), key=lambda c: (first_num[id(c)], c.label))
            spec[dim], reasons[dim] = str(first.key[dim]), "the value of the sweep's first job" + unswept
    context = [d for d in dims if d not in sweep.toggle_dims and d not in reasons]
    text = spec_text(spec)
    by_context: dict[tuple[str, ...], CellSummary] = {}
    for cand in (c for c in cells if all(c.key.get(d) == v for d, v in spec.items())):
        ctx = tuple(cand.key.get(d, UNKNOWN) for d in context)
        if (other := by_context.get(ctx)) is not None:
            differ = [d for d in dims if other.key.get(d) != cand.key.get(d)]
            raise ReportInputError(f"baseline {text} is ambiguous: cells {other.label!r} and {cand.label!r} "
                                   f"both match; pin {', '.join(differ)} with --baseline")
        by_context[ctx] = cand
        cand.is_baseline = True
    if not by_context:
        options = "; ".join(f"{d} in {{{', '.join(sorted({c.key.get(d, UNKNOWN) for c in cells}))}}}" for d in spec)
        raise ReportInputError(f"no cell matches baseline {text} (values in sweep: {options})")
    return spec, context, reasons, by_context


# ------------------------------------------------------------------------- comparison


def _comparable(cell: CellSummary, base: CellSummary) -> str | None:
    """Why two cells' throughput can't be compared, or None when it can."""
    if cell.env_steps_per_s is None:
        no_jobs = f"no ok jobs ({cell.n_failed} failed, {cell.n_missing} missing)"
        return no_jobs if cell.n_ok == 0 else "no env_steps_per_s in ok jobs"
    if base.env_steps_per_s is None:
        return f"baseline ({base.label}) has no ok jobs with env_steps_per_s"
    if cell.fingerprint_mixed:
        return cell.fingerprint_note
    if base.fingerprint_mixed:
        return f"baseline ({base.label}) has {base.fingerprint_note}"
    if cell.fingerprint is not None and base.fingerprint is not None:
        fp_cell, fp_base = _fingerprint_key(cell.fingerprint), _fingerprint_key(base.fingerprint)
        if fp_cell != fp_base:
            return "fingerprint differs: " + _fingerprint_diff(fp_cell, fp_base)
    return None


def _per_process(why: str, grouped: bool) -> str:
    """Why there is no interval, said of processes where seeds trained together were timed once."""
    return why.replace("seed", "timed process", 1) + ": seeds trained together are timed once" if grouped else why


def _compare_with_baseline(cell: CellSummary, base: CellSummary, n_bootstrap: int, bootstrap_seed: int) -> None:
    """Fill the cell's steady ratio and CI, learning flag, whole-job wall-time ratio (baseline / cell)
    with its CI, and break-even budget, relative to its baseline cell."""
    if (why := _comparable(cell, base)) is None:
        sr = seed_ratio(cell.rate_by_seed, base.rate_by_seed, cell.rate_se_by_seed, base.rate_se_by_seed)
        cell.ratio, cell.ci_low, cell.ci_high, cell.ci_method = sr.ratio, sr.ci_low, sr.ci_high, sr.method or "none"
        cell.ci_n, cell.seeds_needed, cell.ratio_clean = sr.n, sr.seeds_for(), not cell.flags and not base.flags
        if sr.why:
            cell.ratio_note = f"no interval: {_per_process(sr.why, cell.grouped or base.grouped)}"
        if base.flags:
            cell.flag_notes.append(f"baseline ({base.label}) flagged: {', '.join(base.flags)}")
    else:
        cell.ratio_note = why
    _compare_learning(cell, base, np.random.default_rng([bootstrap_seed, zlib.crc32(cell.label.encode())]),
                      n_bootstrap)

    if cell.wall_s is None or base.wall_s is None:
        cell.end_to_end_note = "no wall_s in ok jobs" if cell.wall_s is None else "baseline has no wall_s"
        return
    if why is not None and (cell.fingerprint_mixed or base.fingerprint_mixed or why.startswith("fingerprint")):
        cell.end_to_end_note = why
        return
    if cell.env_steps is not None and base.env_steps is not None and cell.env_steps != base.env_steps:
        cell.end_to_end_note = f"different budgets: {cell.env_steps:.0f} vs {base.env_steps:.0f} env steps"
        return
    e2e = seed_ratio(base.wall_by_seed, cell.wall_by_seed)
    cell.end_to_end_ratio, cell.end_to_end_ci_low, cell.end_to_end_ci_high = e2e.ratio, e2e.ci_low, e2e.ci_high
    cell.end_to_end_ci_method = e2e.method
    if e2e.why:
        cell.end_to_end_note = f"no interval: {e2e.why}"
    if cell.ratio is None or (even := _break_even(cell, base)) is None:
        return
    cell.break_even_env_steps, extra_s, saving_s = even
    where = (f"loses end to end at this budget ({cell.env_steps:.0f} env steps)"
             if cell.end_to_end_ratio < 1 else "wins end to end at this budget")
    cell.break_even_note = (
        f"faster in steady state but {extra_s:.3g} s more fixed cost (start-up, compile, evaluation): pays off beyond "
        f"~{cell.break_even_env_steps:,.0f} env steps at {saving_s * 1e6:.3g} us saved per step; {where}")


def _keeps_numbers(cell: CellSummary, base: CellSummary) -> list[str]:
    """The toggles the cell changes from its baseline when every one of them must keep the numbers, else []."""
    changed = [d for d in cell.key if cell.key.get(d) != base.key.get(d)]
    return changed if changed and all(d in KEEPS_NUMBERS for d in changed) else []


def _compare_learning(cell: CellSummary, base: CellSummary, rng: np.random.Generator, n_bootstrap: int) -> None:
    """The cell's learning against its baseline: P(improvement), whether a toggle that must keep the numbers
    kept them, the loose rule on medians; the flag and the note that says why (see LEARNING_RULE)."""
    if not cell.return_by_seed or not base.return_by_seed:
        cell.learning_note = "not assessed: no final_return"
        return
    p, lo, hi, cell.p_improvement_paired = p_improvement(cell.return_by_seed, base.return_by_seed, rng, n_bootstrap)
    cell.p_improvement, cell.p_improvement_ci = p, (lo, hi)
    over = "paired by seed" if cell.p_improvement_paired else "over all pairs of seeds"
    said = [f"IQM {_iqm_text(cell)} vs baseline {_iqm_text(base)}; P(improvement) {p:.2f} [{lo:.2f}, {hi:.2f}] ({over})"]
    common = [s for s in cell.return_by_seed if s in base.return_by_seed]
    if (kept := _keeps_numbers(cell, base)) and common:
        changed = [s for s in common if cell.return_by_seed[s] != base.return_by_seed[s]]
        cell.same_numbers = not changed
        if changed:
            s = changed[0]
            cell.learning_flag = True
            cuda = " (on CUDA: or kernels that are not deterministic; compare two runs of the baseline)" if (
                cell.fingerprint or {}).get("gpu") else ""
            cell.learning_note = (f"NUMBERS CHANGED: {', '.join(kept)} must keep every number, but {len(changed)} of "
                                  f"{len(common)} seeds end elsewhere (seed {s}: {cell.return_by_seed[s]:.6g} vs "
                                  f"{base.return_by_seed[s]:.6g}){cuda}; " + said[0])
            return
        said.append("the same final return for every seed, as it must")
    spreads = [s for s in (cell.final_return_spread, base.final_return_spread) if s is not None]
    if not spreads:
        cell.learning_note = "; ".join([*said, "no noise estimate for the median rule (1 seed, no final_return_std)"])
        return
    pooled = math.sqrt(sum(s * s for s in spreads) / len(spreads))
    threshold = max(LEARNING_SD_FACTOR * pooled, LEARNING_REL_FLOOR * abs(base.final_return_median or 0.0))
    diff = (cell.final_return_median or 0.0) - (base.final_return_median or 0.0)
    cell.learning_flag = abs(diff) > threshold
    cell.learning_note = "; ".join([*said, f"median {cell.final_return_median:.4g} vs {base.final_return_median:.4g} "
                                           f"(diff {diff:+.4g}, threshold {threshold:.4g})"])


def _iqm_text(cell: CellSummary) -> str:
    if cell.final_return_iqm is None:
        return "-"
    ci = cell.final_return_iqm_ci
    return f"{cell.final_return_iqm:.4g}" + (f" [{ci[0]:.4g}, {ci[1]:.4g}]" if ci and len(cell.return_by_seed) > 1 else "")


def _marginal_effects(cells: list[CellSummary], sweep: Sweep, varied: list[str],
                      spec: dict[str, str]) -> list[MarginalEffect]:
    """Geometric-mean pair ratios per (varied toggle, value) change, ranked largest first."""
    effects: list[MarginalEffect] = []
    for toggle in (d for d in varied if d in sweep.toggle_dims):
        a = spec[toggle]  # _baseline gave every varied toggle its baseline value
        index: dict[tuple[str, ...], dict[str, CellSummary]] = {}  # cells by their other dimensions, then value
        for cell in cells:
            rest = tuple(cell.key.get(d, UNKNOWN) for d in sweep.dims if d != toggle)
            index.setdefault(rest, {})[cell.key.get(toggle, UNKNOWN)] = cell
        for b in dict.fromkeys(cell.key.get(toggle, UNKNOWN) for cell in cells):
            if b not in (a, UNKNOWN):
                effects.append(_marginal_effect(toggle, a, b, index))
    effects.sort(key=lambda e: (e.effect is None, -(e.effect or 0.0), e.label))
    for rank, eff in enumerate((e for e in effects if e.effect is not None), start=1):
        eff.rank = rank
    return effects


def _marginal_effect(toggle: str, a: str, b: str,
                     index: dict[tuple[str, ...], dict[str, CellSummary]]) -> MarginalEffect:
    """The effect of ``toggle`` a -> b over every pair of cells that differ only there: per seed, the geometric
    mean of the pairs' ratios, then over seeds as a cell's ratio is (:func:`rlsweep.bootstrap.seed_ratio`)."""
    eff = MarginalEffect(toggle=toggle, from_value=a, to_value=b)
    pairs: list[tuple[CellSummary, CellSummary]] = []
    for ca, cb in ((v.get(a), v.get(b)) for v in index.values()):
        if ca is None or cb is None:
            continue
        if (why := _comparable(cb, ca)) is not None:
            eff.skipped.append(f"{cb.label} vs {ca.label}: {why}")
            continue
        assert ca.env_steps_per_s is not None and cb.env_steps_per_s is not None
        eff.pairs.append(model.PairRatio(ca.label, cb.label, cb.env_steps_per_s / ca.env_steps_per_s))
        eff.clean = (eff.clean is not False) and not ca.flags and not cb.flags
        pairs.append((ca, cb))
    eff.n_pairs = len(eff.pairs)
    if not pairs:
        return eff
    steady = _over_pairs(pairs, "rate_by_seed")
    eff.effect, eff.ci_low, eff.ci_high, eff.ci_method = steady.ratio, steady.ci_low, steady.ci_high, steady.method
    eff.n_seeds, eff.seeds_needed, eff.why = steady.n, steady.seeds_for(), steady.why
    if steady.method is None:  # no two seeds ran in every cell of the pairs: the pairs' ratios, without an interval
        eff.effect = float(np.exp(np.mean([np.log(p.ratio) for p in eff.pairs])))
        eff.why = _per_process(str(steady.why), any(c.grouped for pair in pairs for c in pair))
    if (e2e := _over_pairs([(cb, ca) for ca, cb in pairs], "wall_by_seed")).method is not None:
        eff.end_to_end, eff.end_to_end_ci_low, eff.end_to_end_ci_high = e2e.ratio, e2e.ci_low, e2e.ci_high
    eff.break_even_env_steps = _median([even[0] for ca, cb in pairs if (even := _break_even(cb, ca)) is not None])
    eff.learning = _toggle_learning(toggle, pairs)
    return eff


def _toggle_learning(toggle: str, pairs: list[tuple[CellSummary, CellSummary]]) -> str | None:
    """Whether a toggle changed what was learnt, over its pairs' seeds: for a toggle that must keep the numbers,
    whether it did; else the probability that a seed ends higher with it than without (ties half)."""
    runs = [(ca.return_by_seed[s], cb.return_by_seed[s]) for ca, cb in pairs for s in ca.return_by_seed
            if s in cb.return_by_seed]
    if not runs:
        return None
    changed = sum(a != b for a, b in runs)
    if toggle in KEEPS_NUMBERS:
        return (f"NUMBERS CHANGED in {changed} of {len(runs)} runs (it must keep every number)" if changed
                else f"the same final return in all {len(runs)} runs, as it must")
    p = sum((b > a) + 0.5 * (b == a) for a, b in runs) / len(runs)
    return f"P(improvement) {p:.2f} over {len(runs)} runs paired by seed" + (
        "" if changed else " (every final return unchanged)")


def _over_pairs(pairs: list[tuple[CellSummary, CellSummary]], by_seed: str) -> SeedRatio:
    """The second cells' ``by_seed`` values over the first cells', pairs pooled seed by seed (each seed's
    geometric mean over the pairs), over the seeds that ran in every cell; when fewer than 2 did, no ratio
    (NaN, no ``method``) and ``why``."""
    seeds = set.intersection(*(set(getattr(c, by_seed)) for pair in pairs for c in pair))
    if len(seeds) < 2:
        return SeedRatio(math.nan,
                         why="1 seed" if len(seeds) == 1 else "fewer than 2 seeds ran in every cell of its pairs")
    pooled = [{s: math.exp(float(np.mean([math.log(getattr(p[side], by_seed)[s]) for p in pairs]))) for s in seeds}
              for side in (1, 0)]
    if by_seed != "rate_by_seed":
        return seed_ratio(*pooled)
    # each side's standard error of the mean of the pairs' logs
    ses = [{s: math.sqrt(sum(p[side].rate_se_by_seed.get(s, 0.0) ** 2 for p in pairs)) / len(pairs) for s in seeds}
           for side in (1, 0)]
    return seed_ratio(*pooled, *ses)


def _break_even(cell: CellSummary, base: CellSummary) -> tuple[float, float, float] | None:
    """Env steps beyond which ``cell`` (faster in steady state, dearer to start) finishes sooner than ``base``, with
    its extra fixed cost and the seconds it saves per step."""
    if None in (cell.env_steps_per_s, base.env_steps_per_s, cell.fixed_cost_s, base.fixed_cost_s):
        return None
    extra_s = cell.fixed_cost_s - base.fixed_cost_s  # type: ignore[operator]
    saving_s = 1.0 / base.env_steps_per_s - 1.0 / cell.env_steps_per_s  # type: ignore[operator]
    return (extra_s / saving_s, extra_s, saving_s) if saving_s > 0 and extra_s > 0 else None
