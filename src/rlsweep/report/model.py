"""The report's constants and data classes: what a sweep, a cell and a report hold."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsweep.records import jsonable

SCHEMA_VERSION = 1
UNKNOWN = "?"

#: a job's steady-state rate "drifted" when the median rate of its last third of steady iterations
#: differs from its first third's by more than this (and by more than its iteration noise)
DRIFT_REL = 0.10
#: a cell's seeds "disagree" when their steady rates spread by more than this fraction of their
#: median (and by more than the slowest and fastest seeds' iteration noise explains)
SEED_SPREAD_REL = 0.10
#: "more than noise" = more than this many standard errors of the difference of two medians
NOISE_SE_FACTOR = 3.0
#: fewest steady iterations per third for the drift check (fewer: not assessed)
DRIFT_MIN_PER_THIRD = 2

#: a job with no result (the records' statuses: rlsweep.records.STATUS_OK, ...)
STATUS_MISSING = "missing"

CI_RULE = (
    "95% CI over seeds: Student's t on the seeds' log ratios. 'paired by seed' = each seed's ratio to the same seed of "
    "the baseline (a round of seeds runs close in time, and the launcher alternates the cells' order from one round to "
    "the next, so the machine's drift and a first-in-round effect cancel), when >= 2 seeds ran in both; 'unpaired "
    "seeds' = Welch's interval on each side's log values. One seed: no interval (a job's own iterations say nothing of "
    "how the next job will run). Two seeds give a wide interval, honestly: the spread of two values is itself barely "
    "known. A toggle's effect pools, seed by seed, the pairs of cells that differ only in it (geometric mean), then "
    "the same interval over seeds. 'seeds needed' = seeds per cell whose interval would exclude 1 for an effect of the "
    "size seen, at the noise seen. Coverage of this method by simulation and on no-op toggles: "
    "docs/guide/measuring.md. Learning intervals are percentile bootstraps ({n} resamples, RNG seed {seed})."
)
FLAG_RULE = (
    "Measurement flags (a flagged cell's ratio, and the ratio of any cell whose baseline is flagged, is not clean): "
    "'drift' = within one job, the median per-iteration env_steps_per_s of the last third of its steady iterations "
    f"differs from the first third's by more than {DRIFT_REL:.0%} and by more than {NOISE_SE_FACTOR:g} standard errors "
    f"of that difference (at least {DRIFT_MIN_PER_THIRD} iterations per third); 'seeds_disagree' = the cell's seeds' "
    f"steady env_steps_per_s spread (max - min) by more than {SEED_SPREAD_REL:.0%} of their median and by more than "
    f"{NOISE_SE_FACTOR:g} standard errors of the slowest and fastest seeds' difference. Standard error of a median = "
    "1.2533 sd / sqrt(n), sd = the iterations' standard deviation around their own third's (or job's) mean, so a trend "
    "is not counted as noise; iterations of one run are correlated, so this noise is a lower bound, and the percentage "
    f"floor guards against that. 'noisy' = a job's median steady rate is uncertain by more than {DRIFT_REL:.0%} (2 "
    "standard errors, from the same sd): its iterations vary too much for the job to resolve the effects measured (a "
    "busy machine), and neither drift nor disagreement can be told from that noise. 'oversubscribed' = while the job "
    "ran, the jobs running on its host (its own included) had more busy threads (sum of their num_threads) than the "
    "host's usable cores (fingerprint usable_cpus; cpu_count for Slurm jobs, each confined to its own cores). "
    f"{DRIFT_REL:.0%} is about the size of the effects the cheap toggles have (twin_modules, inplace: 0.9-1.1x): a job "
    "drifting that much, or seeds that far apart, could make or hide such an effect; the noise condition keeps a short "
    "job's ordinary jitter from raising a flag. 'state_differs' = the jobs compared did not start in the same state: "
    "some were the first training run of their process (which pays its warm-up) and others not, or compiled jobs found "
    "the compile cache in different states (cold, partial, warm); their end-to-end times and compile times then "
    "measure the order of the jobs, not the toggle. A sweep prepares its cells first (prepare=true, the default) so "
    "that every job starts alike."
)
END_TO_END_RULE = (
    "Steady state vs end to end: 'ratio' = steady-state env_steps_per_s (warm-up and compile excluded) of the cell / "
    "the baseline's; 'end_to_end_ratio' = the baseline's whole-job wall_s / the cell's (>1: the cell finished sooner), "
    "over seeds with the same interval as the steady ratio. A job's wall_s runs from just before W&B/env set-up to the "
    "end of the final evaluation: environment creation, compilation, warm-up, training and evaluation are in it; the "
    "interpreter's start-up, imports and Hydra's composition (paid once per process: once per sweep with the basic "
    "launcher, once per job with submitit) are not. Fixed cost = wall_s - env_steps / steady env_steps_per_s. A toggle "
    "faster in steady state but with a higher fixed cost pays off end to end beyond break-even = fixed-cost difference "
    "/ per-step saving (1/rate_baseline - 1/rate_cell) env steps."
)
LEARNING_RULE = (
    "Learning check: per cell, the interquartile mean (IQM) of the seeds' final returns with a 95% "
    "percentile-bootstrap interval over seeds (rliable's statistics, one task); against the baseline, the probability "
    "of improvement P(a seed of the cell ends higher than one of the baseline's, ties half), paired by seed when both "
    "ran the same seeds (the same seed starts from the same weights and episodes), else over all pairs of seeds, with "
    "its bootstrap interval. Flagged: a cell that differs from its baseline only in toggles that must keep every "
    "number (twin_modules, inplace, pin_memory, non_blocking) and whose final return differs for some seed (on a CPU a "
    "bug; on CUDA possibly kernels that are not deterministic), or any cell whose median final return differs from the "
    "baseline's by more than max(2 s_p, 5% of |median_base|), s_p the pooled spread (std over seeds; one seed: its "
    "eval episodes' std). With fewer than 5 seeds a cell the rule does not flag may still learn differently: read the "
    "IQMs and P(improvement)."
)


class ReportInputError(ValueError):
    """Bad input for a report: no sweep dir, no jobs, or an unmatched baseline."""


@dataclass
class WandbTarget:
    """Where the report's W&B run goes: the same project and group as the sweep's jobs."""

    mode: str  # "offline" or "online" (a sweep logged with "disabled" gets no target)
    project: str | None  # the jobs' W&B project
    entity: str | None  # the jobs' W&B entity (None: the default one)
    group: str  # the jobs' W&B group (see rlsweep.tracking.run_group)
    # the folder the jobs' W&B runs went under (logger.dir or WANDB_DIR); None: each job's own folder, and the
    # report's run goes under the report folder
    dir: str | None = None


@dataclass
class Job:
    """One job of the sweep, whether it produced a result or not."""

    status: str  # "ok", "failed", "interrupted" or "missing"
    overrides: list[str]  # the job's Hydra override strings (key=value)
    seed: str | None = None  # as text; None when unknown
    num: int | None = None  # the Hydra job number; None when unknown
    job_dir: Path | None = None  # the job's output folder (its result.json in it); None for a job that never started
    record: dict[str, Any] = field(default_factory=dict, repr=False)  # the parsed result.json ({}: none, unreadable)
    error_line: str | None = None  # the last line of a failed job's error traceback
    key: dict[str, str] = field(default_factory=dict)  # its cell dimensions (dimension -> normalised value)


@dataclass
class Sweep:
    """All jobs of one sweep directory."""

    sweep_dir: Path
    jobs: list[Job]  # every job found or expected, ordered by job number
    dims: list[str]  # cell dimensions, context dimensions first, then toggle dimensions
    toggle_dims: list[str]  # the subset of dims that are optimization toggles
    expected_jobs: int | None = None  # the number of jobs in the multirun.yaml expansion, if present
    notes: list[str] = field(default_factory=list)  # remarks about how the sweep was read
    wandb: WandbTarget | None = None  # where the jobs logged to W&B (None: they did not)
    # per swept dimension (multirun.yaml), its values in the order listed
    listed_values: dict[str, list[str]] = field(default_factory=dict)
    # per swept dimension, the value the config has without the sweep
    config_defaults: dict[str, str] = field(default_factory=dict)
    prepared: dict[str, Any] | None = None  # the sweep's prepare.json (rlsweep.prepare), None without one


@dataclass
class CellSummary:
    """Computed numbers for one cell (a toggle combination; seeds are repeats).

    Attributes ending in ``_ms`` / ``_s`` / ``_per_s`` carry their unit. Medians are over ok seeds. ``ratio`` (steady
    state) and ``end_to_end_ratio`` (whole-job wall time) are relative to ``baseline_label``'s cell; ``ratio_clean`` is
    False when this cell or its baseline carries a measurement flag (``flags``, see :data:`FLAG_RULE`; the reasons in
    ``flag_notes``). ``job_drift`` holds, per ok job, the first and last thirds' median per-iteration rates and their
    ratio. The final return's spread for reading is the interquartile range ``final_return_q25``..``final_return_q75``
    over seeds (one seed: over its evaluation episodes, ``final_return_iqr_over`` says which).

    ``compile_reasons`` holds, per compiled function with any, dynamo's graph-break and recompile reasons from the
    cell's job records (``compile.per_function.<name>``), identical ones merged: ``{name: {"graph_breaks": [{reason,
    file, line, function, [stack], count, jobs}], "recompiles": [{reason, frame, count, jobs}], "reasons_dropped": n}}``
    (``count`` = occurrences summed over the jobs, ``jobs`` = how many of the cell's jobs had it; most frequent first),
    ``"cudagraph_skips": [{reason, count, jobs}]`` (the messages inductor gave) and ``"cudagraph_skip_count"`` (graphs
    of a CUDA-graph mode that ran without CUDA graphs, over the cell's jobs; on a CPU every one, without a message).
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
    # the same by seed ("?<job>" when a record has none): what the intervals pair across cells
    rate_by_seed: dict[str, float] = field(default_factory=dict, repr=False)
    rate_se_by_seed: dict[str, float] = field(default_factory=dict, repr=False)  # a job's own, relative (iterations)
    grouped: bool = False  # some of its seeds trained together (seeds_per_job): their process timed them once
    wall_by_seed: dict[str, float] = field(default_factory=dict, repr=False)
    updates_per_s: float | None = None
    phase_median_ms: dict[str, float | None] = field(default_factory=dict)
    phase_total_s: dict[str, float | None] = field(default_factory=dict)
    compile_s: float | None = None
    # the cell's compile on an empty cache in a fresh process, measured once by the sweep's preparation (prepare.json),
    # or by an earlier sweep whose figure it reused; compile_s is the timed jobs' own, on the cache it filled
    cold_compile_s: float | None = None
    cold_compile_source: str | None = None  # "measured by this sweep", "reused from <sweep> (<when>)"
    # the states its ok jobs started in ("<process>/<compile cache>"), see rlsweep.job.measurement_state
    start_states: list[str] = field(default_factory=list)
    graph_breaks: int | None = None
    recompiles: int | None = None
    compile_reasons: dict[str, dict[str, Any]] = field(default_factory=dict)
    final_return_median: float | None = None
    final_return_spread: float | None = None
    final_return_spread_kind: str | None = None
    final_returns: list[float] = field(default_factory=list)
    ratio: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    ci_method: str | None = None
    ci_n: int | None = None  # the seeds (pairs) the interval is over
    seeds_needed: int | None = None  # seeds per cell that would resolve an effect of the size seen, at this noise
    ratio_note: str | None = None
    ratio_clean: bool | None = None
    flags: list[str] = field(default_factory=list)
    flag_notes: list[str] = field(default_factory=list)
    job_drift: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float | None = None
    wall_s_seeds: list[float] = field(default_factory=list)
    env_steps: float | None = None
    fixed_cost_s: float | None = None
    # the median over ok jobs of each part of their fixed cost (records.FIXED_COST_PARTS: the record's fixed_cost)
    fixed_cost_parts: dict[str, float | None] = field(default_factory=dict)
    end_to_end_ratio: float | None = None
    end_to_end_ci_low: float | None = None
    end_to_end_ci_high: float | None = None
    end_to_end_ci_method: str | None = None
    end_to_end_note: str | None = None
    break_even_env_steps: float | None = None
    break_even_note: str | None = None
    final_return_q25: float | None = None
    final_return_q75: float | None = None
    final_return_iqr_over: str | None = None
    # the field's statistics (rliable): the interquartile mean of the seeds' final returns with its bootstrap
    # interval; against the baseline, P(a seed of this cell ends higher than one of the baseline's), paired by
    # seed when both ran the same seeds, and whether every seed's final return is the baseline's, exactly
    final_return_iqm: float | None = None
    final_return_iqm_ci: tuple[float, float] | None = None
    p_improvement: float | None = None
    p_improvement_ci: tuple[float, float] | None = None
    p_improvement_paired: bool | None = None
    same_numbers: bool | None = None
    learning_flag: bool | None = None
    learning_note: str | None = None
    return_by_seed: dict[str, float] = field(default_factory=dict, repr=False)
    not_applicable: list[str] = field(default_factory=list)
    fingerprint: dict[str, Any] | None = None
    fingerprint_mixed: bool = False
    fingerprint_note: str | None = None
    errors: list[str] = field(default_factory=list)
    curves: list[dict[str, Any]] = field(default_factory=list, repr=False)
    n_iterations: int = 0  # steady iterations over its ok jobs

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers (curves and the values by seed left out)."""
        return {k: v for k, v in self.__dict__.items()
                if k not in ("curves", "rate_by_seed", "rate_se_by_seed", "wall_by_seed", "return_by_seed")}


@dataclass
class PairRatio:
    """One pair of cells identical except one toggle."""

    without: str
    with_: str
    ratio: float


@dataclass
class MarginalEffect:
    """Effect of changing one toggle from its baseline value to another value."""

    toggle: str  # the toggle dimension (e.g. compile or backend.num_threads)
    from_value: str  # the baseline value
    to_value: str  # the changed value
    effect: float | None = None  # steady state: over seeds, each seed's geometric mean of its pairs' ratios
    ci_low: float | None = None  # its 95% interval (see CI_RULE)
    ci_high: float | None = None
    ci_method: str | None = None  # "paired by seed", "unpaired seeds" or None
    why: str | None = None  # why there is no interval
    n_seeds: int = 0  # the seeds the interval is over
    seeds_needed: int | None = None  # seeds that would resolve an effect of this size at this noise
    end_to_end: float | None = None  # the same for whole-job wall time (>1: sooner)
    end_to_end_ci_low: float | None = None
    end_to_end_ci_high: float | None = None
    break_even_env_steps: float | None = None  # faster but dearer to start: the budget from which it pays (median)
    learning: str | None = None  # whether learning changed, in words
    n_pairs: int = 0  # the number of usable pairs
    pairs: list[PairRatio] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # why candidate pairs were not used
    rank: int | None = None  # 1 = pays most
    clean: bool | None = None  # False when a pair's cell carries a measurement flag (see FLAG_RULE)

    @property
    def label(self) -> str:
        """Human-readable change, e.g. ``compile: none -> default``."""
        return f"{self.toggle}: {self.from_value} -> {self.to_value}"

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready form."""
        return {**{k: v for k, v in self.__dict__.items() if k != "pairs"}, "label": self.label,
                "pairs": [{"without": p.without, "with": p.with_, "ratio": p.ratio} for p in self.pairs]}


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
    """Everything ``write_report`` and ``render_table`` need; pure data."""

    sweep_dir: Path
    baseline_spec: dict[str, str]  # the baseline dimension values that were matched
    baseline_labels: list[str]  # the labels of the baseline cell(s) (one per context)
    varied_dims: list[str]  # the dimensions that vary across the sweep (they label the cells)
    cells: list[CellSummary]  # one summary per cell, baseline cells first
    marginal_effects: list[MarginalEffect]  # toggle effects ranked by effect, largest first
    casualties: list[Casualty]  # failed, interrupted and missing jobs
    notes: list[str]  # remarks (fingerprints, duplicates, expansion mismatches, ...)
    n_jobs: int  # the number of jobs (found and expected)
    expected_jobs: int | None  # the size of the multirun.yaml expansion, if known
    n_bootstrap: int  # bootstrap resamples per CI
    bootstrap_seed: int  # the bootstrap's RNG seed
    wandb: WandbTarget | None = None  # where the sweep's jobs logged to W&B; the report's run goes there too
    # how the jobs ran: order (seed-major, cell-major, mixed, single seed, single cell or unknown), max_concurrent, text
    run_order: dict[str, Any] = field(default_factory=dict)
    # per baseline dimension, why it has that value (toggle off, the config's default, chosen with --baseline, ...)
    baseline_reasons: dict[str, str] = field(default_factory=dict)
    prepared: dict[str, Any] | None = None  # the sweep's prepare.json (rlsweep.prepare), None without one

    @property
    def counts(self) -> dict[str, int]:
        """Jobs per status: ok, failed (interrupted included), interrupted, missing."""
        return {k: sum(getattr(c, f"n_{k}") for c in self.cells) for k in ("ok", "failed", "interrupted", "missing")}

    @property
    def baseline_why(self) -> str:
        """The baseline with the reason for each value, values of one reason together:
        ``compile=none twin_modules=false (toggles off); algo.lr=0.001 (the config's default)``."""
        if not self.baseline_spec:
            return "(any): nothing is compared; each cell stands alone"
        groups: dict[str, list[str]] = {}
        for key, value in self.baseline_spec.items():
            groups.setdefault(self.baseline_reasons.get(key, ""), []).append(f"{key}={value}")
        return "; ".join(" ".join(items) + (f" ({why})" if why else "") for why, items in groups.items())

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready numbers (the content of report.json)."""
        return jsonable({
            "schema_version": SCHEMA_VERSION, "sweep_dir": str(self.sweep_dir),
            "baseline": {"spec": self.baseline_spec, "cells": self.baseline_labels, "reasons": self.baseline_reasons},
            "varied_dims": self.varied_dims, "n_jobs": self.n_jobs, "expected_jobs": self.expected_jobs,
            "counts": self.counts, "cells": [c.to_dict() for c in self.cells],
            "marginal_effects": [m.to_dict() for m in self.marginal_effects],
            "learning_flags": [{"cell": c.label, "note": c.learning_note} for c in self.cells if c.learning_flag],
            "run_order": self.run_order,
            "measurement_flags": [{"cell": c.label, "flags": c.flags, "notes": c.flag_notes}
                                  for c in self.cells if c.flags],
            "casualties": [c.__dict__ for c in self.casualties], "notes": self.notes,
            "methods": {"ci": CI_RULE.format(n=self.n_bootstrap, seed=self.bootstrap_seed), "learning": LEARNING_RULE,
                        "flags": FLAG_RULE, "end_to_end": END_TO_END_RULE, "n_bootstrap": self.n_bootstrap,
                        "bootstrap_seed": self.bootstrap_seed},
        })


def spec_text(spec: dict[str, str]) -> str:
    """``key=value`` pairs joined by spaces, or ``(any)`` for an empty spec."""
    return " ".join(f"{k}={v}" for k, v in spec.items()) or "(any)"
