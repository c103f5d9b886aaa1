"""How clean a sweep's measurement was: run order, drift within a job, seeds that disagree, jobs
that oversubscribed their host. Pure functions over the jobs' records; the rules are in
:data:`rlsweep.report.model.FLAG_RULE`.
"""

from __future__ import annotations

import datetime as dt
import itertools
from collections.abc import Sequence
from typing import Any, NamedTuple

import numpy as np

from rlsweep.launchers import round_member
from rlsweep.records import section
from rlsweep.report.load import norm_value
from rlsweep.report.model import DRIFT_MIN_PER_THIRD, DRIFT_REL, NOISE_SE_FACTOR, SEED_SPREAD_REL, UNKNOWN, Job

#: standard error of a median = this x sd / sqrt(n) (normal samples)
_MEDIAN_SE = 1.2533


def finite(value: Any) -> float | None:
    """A finite float, or None for anything else (None, NaN, text, bool)."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and np.isfinite(value)
    return float(value) if ok else None


def positive_int(value: Any) -> int:
    """A positive int, or 0 for anything else (bools, floats, text, None)."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def steady_rate(job: Job) -> float | None:
    """The job's steady-state env_steps_per_s; None unless it is a positive finite number."""
    rate = finite(section(job.record, "throughput").get("env_steps_per_s"))
    return rate if rate is not None and rate > 0 else None


def iteration_rates(job: Job) -> list[float]:
    """The job's steady per-iteration env_steps_per_s (positive finite values only)."""
    values = section(job.record, "throughput").get("per_iteration_env_steps_per_s")
    return [r for r in (finite(v) for v in values or []) if r is not None and r > 0]


def _pooled_sd(groups: Sequence[Sequence[float]]) -> float:
    """Iteration noise: the standard deviation around each group's own mean (so that a trend is not
    noise), pooled over the groups. Not robust on purpose: an outlier only makes a flag less likely."""
    dof = sum(len(g) - 1 for g in groups)
    if dof <= 0:
        return float("inf")
    ss = sum(float(np.sum((np.asarray(g) - np.mean(g)) ** 2)) for g in groups)
    return float(np.sqrt(ss / dof))


def _median_se(sd: float, n: int) -> float:
    return _MEDIAN_SE * sd / np.sqrt(n)


def job_drift(job: Job) -> dict[str, Any] | None:
    """First vs last third of a job's steady iterations; None when too few to judge.

    Returns:
        ``{"seed", "n_iterations", "first_third", "last_third", "drift", "noise", "flagged",
        "rate_uncertainty", "noisy"}``: the thirds' median rates, ``drift`` = last / first,
        ``noise`` = the difference of the thirds' medians that noise could explain (env steps/s),
        ``flagged`` per the drift rule, ``rate_uncertainty`` = 2 standard errors of the job's
        median rate relative to it, ``noisy`` when that exceeds the drift threshold.
    """
    rates = iteration_rates(job)
    k = len(rates) // 3
    if k < DRIFT_MIN_PER_THIRD:
        return None
    first, last = rates[:k], rates[-k:]
    m_first, m_last = float(np.median(first)), float(np.median(last))
    drift = m_last / m_first
    sd = _pooled_sd([first, rates[k:-k] or first, last])
    noise = float(NOISE_SE_FACTOR * np.sqrt(2) * _median_se(sd, k))
    uncertainty = 2 * _median_se(sd, len(rates)) / float(np.median(rates))
    flagged = bool(abs(drift - 1.0) > DRIFT_REL and abs(m_last - m_first) > noise)
    return {"seed": job.seed, "n_iterations": len(rates), "first_third": m_first, "last_third": m_last, "drift": drift,
            "noise": noise, "flagged": flagged, "rate_uncertainty": uncertainty, "noisy": bool(uncertainty > DRIFT_REL)}


def seeds_disagree(jobs: Sequence[Job]) -> str | None:
    """How a cell's ok seeds disagree beyond their own iteration noise; None when they agree or are too few."""
    per_job = sorted(((rate, job.seed, iters) for job in jobs
                      if (rate := steady_rate(job)) is not None and len(iters := iteration_rates(job)) >= 2),
                     key=lambda x: x[0])
    if len(per_job) < 2:
        return None
    (slow, slow_seed, slow_iters), (fast, fast_seed, fast_iters) = per_job[0], per_job[-1]
    median = float(np.median([r for r, _, _ in per_job]))
    spread = (fast - slow) / median
    se = [_median_se(_pooled_sd([it]), len(it)) for it in (slow_iters, fast_iters)]
    apart = fast - slow > NOISE_SE_FACTOR * float(np.hypot(*se))
    note = (f"seeds disagree: env_steps_per_s {slow:.4g} (seed {slow_seed}) to {fast:.4g} "
            f"(seed {fast_seed}), spread {spread:.0%} of the median")
    return note if spread > SEED_SPREAD_REL and apart else None


# ----------------------------------------------------------------------- when and where


def parse_time(text: Any) -> float | None:
    """A record's ISO 8601 UTC time (``2026-11-29T21:00:00.123Z``) as POSIX seconds; None if absent."""
    try:
        when = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except (AttributeError, TypeError, ValueError):  # not text, or not a time
        return None
    return (when if when.tzinfo is not None else when.replace(tzinfo=dt.timezone.utc)).timestamp()


class Span(NamedTuple):
    """When and where one job ran, and how many threads it kept busy."""

    job: Job
    start: float
    end: float
    host: str
    threads: int
    capacity: int


def spans(jobs: Sequence[Job]) -> list[Span]:
    """Every job with a start and an end time (failed ones too: they used the cores while running)."""
    out = []
    for job in jobs:
        rec = job.record
        start, end = parse_time(rec.get("started_at")), parse_time(rec.get("finished_at"))
        if start is None or end is None or end < start:
            continue
        info, fp = section(rec, "job"), section(rec, "fingerprint")
        host = str(info.get("hostname") or fp.get("hostname") or UNKNOWN)
        threads = positive_int(fp.get("num_threads")) or 1
        if not group_leader(job):
            threads = 0  # seeds_per_job: its group's first seed's process kept these threads busy, counted once
        # a Slurm job is confined to its own cores: jobs on one node share the node's CPUs;
        # local jobs share the launching process's affinity mask (usable_cpus)
        cores = fp.get("cpu_count") if info.get("slurm_job_id") else fp.get("usable_cpus") or fp.get("cpu_count")
        out.append(Span(job, start, end, host, threads, positive_int(cores)))
    return out


def _load(spans_: Sequence[Span]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Every start time, ascending, with the busy threads and the running jobs then.

    A sweep line over the spans' starts and ends (half-open: a job runs from its start up to,
    not including, its end), so a 1,000-job sweep is not compared pair by pair.
    """
    by_start, by_end = sorted(spans_, key=lambda s: s.start), sorted(spans_, key=lambda s: s.end)
    starts, ends = np.array([s.start for s in by_start]), np.array([s.end for s in by_end])
    threads_started = np.concatenate([[0], np.cumsum([s.threads for s in by_start])])
    threads_ended = np.concatenate([[0], np.cumsum([s.threads for s in by_end])])
    times = np.unique(starts)
    started = np.searchsorted(starts, times, side="right")
    ended = np.searchsorted(ends, times, side="right")  # end >= start: only started jobs end
    return times, threads_started[started] - threads_ended[ended], started - ended


def oversubscribed(all_spans: Sequence[Span]) -> dict[int, str]:
    """``id(job)`` -> why, for every job during which its host had more busy threads than cores.

    The peak is taken over the job's own run: at each moment a job on the same host started
    (within the run), the threads of all jobs running then are summed.
    """
    out: dict[int, str] = {}
    hosts: dict[str, list[Span]] = {}
    for s in all_spans:
        hosts.setdefault(s.host, []).append(s)
    for host_spans in hosts.values():
        times, busy, running_jobs = _load(host_spans)
        for s in host_spans:
            if s.capacity <= 0:
                continue
            if s.end > s.start:  # the most busy threads at a start time in [start, end), and the jobs then
                lo = int(np.searchsorted(times, s.start, side="left"))
                hi = max(lo + 1, int(np.searchsorted(times, s.end, side="left")))
                i = lo + int(np.argmax(busy[lo:hi]))
                peak, peak_jobs = int(busy[i]), int(running_jobs[i])
            else:  # ran for no time: only jobs that started before it and ran on count
                running = [o for o in host_spans if o.start < s.start < o.end]
                peak, peak_jobs = sum(o.threads for o in running), len(running)
            if peak > s.capacity:
                out[id(s.job)] = (f"oversubscribed: seed {s.job.seed} ran with up to {peak_jobs} job(s) and "
                                  f"{peak} busy threads on {s.capacity} usable cores of {s.host}")
    return out


def max_concurrent(all_spans: Sequence[Span]) -> int:
    """The most jobs' processes running at one moment (any host): seeds trained together count once."""
    processes = [s for s in all_spans if s.threads > 0]
    return int(_load(processes)[2].max()) if processes else 0


def group_leader(job: Job) -> bool:
    """A job that trained alone, or the first of the seeds trained with it in one process."""
    members = section(job.record, "group").get("jobs")
    return not members or members[0] == section(job.record, "job").get("num")


def run_order(jobs: Sequence[Job], dims: Sequence[str]) -> dict[str, Any]:
    """How the jobs were started: seed-major (interleaved), cell-major (seeds back to back), ...

    Read from the records' ``started_at`` (ties: ``job.num``); see :class:`~rlsweep.report.model.Report`.
    """
    timed = sorted(spans(jobs), key=lambda s: (s.start, s.job.num if s.job.num is not None else 0))
    concurrent, n_timed = max_concurrent(timed), len(timed)
    # seeds trained together (seeds_per_job) started as one process: their group's first job stands for them,
    # in the round of its middle seed, where the launcher scheduled it (rlsweep.launchers.round_member)
    timed = [s for s in timed if group_leader(s.job)]
    launchers = sorted({str(section(s.job.record, "job").get("launcher") or UNKNOWN) for s in timed})
    limits = sorted({str(m) for s in timed if (m := section(s.job.record, "job").get("max_parallel"))})
    base = {"n_timed_jobs": n_timed, "max_concurrent": concurrent, "launchers": launchers, "max_parallel": limits}
    if len(timed) < 2:
        return {**base, "order": "unknown", "text": "unknown: fewer than two jobs carry start and end times"}
    cells = [tuple(s.job.key.get(d, UNKNOWN) for d in dims) for s in timed]
    seeds = [norm_value(round_member(grouped)) if (grouped := section(s.job.record, "group").get("seeds"))
             else s.job.seed for s in timed]

    def contiguous(seq: list[Any]) -> bool:  # each value's occurrences in one run
        return sum(1 for _ in itertools.groupby(seq)) == len(set(seq))

    n_cells, n_seeds = len(set(cells)), len(set(seeds))
    at_once = ("one job at a time" if concurrent <= 1 else f"up to {concurrent} jobs at once") + (
        f" ({', '.join(launchers)}" + (f", max_parallel {', '.join(limits)}" if limits else "") + ")")
    if n_seeds < 2:
        order, what = "single seed", "one seed per cell: no repeats to spread drift over"
    elif n_cells < 2:
        order, what = "single cell", "one cell: its seeds one after another"
    elif contiguous(seeds):
        rounds = [[c for c, s in zip(cells, seeds) if s == seed] for seed in dict.fromkeys(seeds)]
        turns = ("the cells' order alternating from one seed to the next" if all(
            r == p[::-1] for p, r in zip(rounds, rounds[1:])) else "the cells in the same order every seed")
        order, what = "seed-major", ("interleaved, seed-major: every cell's first seed, then every "
                                     f"cell's next seed, ... ({turns}); drift of the machine spreads over all cells")
    elif contiguous(cells):
        order, what = "cell-major", ("cell-major: each cell's seeds ran back to back, so drift of the "
                                     "machine lands on whole cells and their ratios carry it")
    else:
        order, what = "mixed", "mixed: neither seed-major nor cell-major"
    return {**base, "order": order, "text": f"{what}; {at_once}"}
