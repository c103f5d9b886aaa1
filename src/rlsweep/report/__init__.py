"""Summarise a sweep directory: which PyTorch optimization toggles pay.

Reads every job's ``result.json`` under a Hydra multirun directory, groups jobs into
*cells* (one combination of toggle values plus algo, env_id and any other non-seed
override that varies; seeds are repeats within a cell) and compares each cell with a
baseline cell. ``python -m sweeps.report <sweep_dir>`` is the command-line entry point.

Modules: ``load`` (reading a sweep), ``stats`` (the numbers below), ``render`` (terminal
table, summary.md, summary.csv), ``plots`` (PNGs), ``write`` (the report folder),
``wandb_log`` (the report as a W&B run), ``cli`` (``main``). Import from this package.

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
    the dimensions the sweep varies. A swept toggle without an off value and, when no
    toggle varies, every swept hyper-parameter (``algo.lr``, ``algo``, ``env.id``) take the
    config's default value (multirun.yaml, which Hydra composes without the sweep) when it is
    among the swept values, else the first value listed. ``--baseline key=value ...``
    overrides entries; ``Report.baseline_reasons`` says why each value was chosen.
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

End to end:
    end_to_end_ratio = median baseline ``wall_s`` / median cell ``wall_s`` (whole job: env
    creation, compile, warm-up, training, evaluation; not interpreter start-up or imports), with
    a seed bootstrap CI when both cells have >= 2 ok seeds. A cell faster in steady state with a
    higher fixed cost (``wall_s - env_steps / env_steps_per_s``) gets ``break_even_env_steps``.

Measurement flags and run order:
    The run order (seed-major, cell-major, ...) is read from the records' ``started_at``. A cell
    is flagged ``drift`` (a job's last third of steady iterations vs its first), ``seeds_disagree``
    or ``oversubscribed`` (jobs overlapping on one host with more busy threads than usable
    cores); its ratio, and the ratios against it as a baseline, are marked not clean
    (``ratio_clean``). The rules: :data:`rlsweep.report.model.FLAG_RULE`.

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

W&B:
    When the jobs logged to W&B (W&B mode offline or online in their records), the
    report is also logged as one run (name and job_type "report") in the jobs' project,
    entity and group: the per-cell table, the marginal effects and the PNGs. ``--no-wandb``
    turns this off; a W&B failure only prints a warning.
"""

from __future__ import annotations

from rlsweep.report.cli import main
from rlsweep.report.load import load_sweep
from rlsweep.report.model import (
    Casualty,
    CellSummary,
    Job,
    MarginalEffect,
    PairRatio,
    Report,
    ReportInputError,
    Sweep,
    WandbTarget,
)
from rlsweep.report.render import render_table
from rlsweep.report.stats import build_report
from rlsweep.report.write import write_report

__all__ = [
    "Casualty",
    "CellSummary",
    "Job",
    "MarginalEffect",
    "PairRatio",
    "Report",
    "ReportInputError",
    "Sweep",
    "WandbTarget",
    "build_report",
    "load_sweep",
    "main",
    "render_table",
    "write_report",
]
