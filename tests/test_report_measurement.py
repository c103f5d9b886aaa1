"""The report's measurement checks on synthetic sweeps: run order, drift within a job, seeds that
disagree, oversubscribed hosts, end-to-end ratios with the break-even budget, returns as IQR."""

from __future__ import annotations

import datetime as dt
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from test_report import cell, make_record, write_job

from rlsweep import report as rp
from rlsweep.report.plots import _median_band, learning_figure, png_bytes
from rlsweep.report.render import render_markdown

T0 = dt.datetime(2026, 11, 29, 21, 0, 0, tzinfo=dt.timezone.utc)


def at(seconds: float) -> str:
    """A record timestamp ``seconds`` after T0, as job.py writes it (UTC, ms, ``Z``)."""
    return (T0 + dt.timedelta(seconds=seconds)).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def timed(record: dict[str, Any], start: float, end: float, *, threads: int = 1, usable_cpus: int = 2,
          host: str = "node1", launcher: str = "BasicLauncher") -> dict[str, Any]:
    """The record with its run's start/end times, host, threads and the host's usable cores."""
    record.update(started_at=at(start), finished_at=at(end))
    record["job"].update(hostname=host, launcher=launcher)
    record["fingerprint"].update(num_threads=threads, usable_cpus=usable_cpus, hostname=host)
    return record


def build(tmp_path: Path, records: list[dict[str, Any]]) -> rp.Report:
    sweep = tmp_path / "sweep"
    for num, rec in enumerate(records):
        rec["job"]["num"] = num
        write_job(sweep, num, rec)
    return rp.build_report(rp.load_sweep(sweep), n_bootstrap=300)


def jitter(rate: float, n: int, rel: float = 0.01, seed: int = 0) -> list[float]:
    """n per-iteration rates around ``rate`` with no trend (uniform, +-rel)."""
    rng = np.random.default_rng(seed)
    return list(rate * (1 + rng.uniform(-rel, rel, n)))


# ------------------------------------------------------------------------------ drift


def test_a_job_whose_rate_drifted_flags_its_cell_and_the_ratio_is_not_clean(tmp_path: Path) -> None:
    drifting = jitter(100, 6) + jitter(90, 6, seed=1) + jitter(80, 6, seed=2)  # -20% from first to last third
    report = build(tmp_path, [
        make_record(seed=0, rate=100, iterations=jitter(100, 18)),
        make_record(seed=1, rate=100, iterations=jitter(100, 18, seed=3)),
        make_record(compile="default", seed=0, rate=150, iterations=jitter(150, 18)),
        make_record(compile="default", seed=1, rate=150, iterations=[r * 1.5 for r in drifting]),
    ])
    base, comp = cell(report, compile="none"), cell(report, compile="default")
    assert base.flags == [] and base.ratio_clean is True
    assert comp.flags == ["drift"] and comp.ratio_clean is False
    (d0, d1) = sorted(comp.job_drift, key=lambda d: d["seed"])
    assert not d0["flagged"] and d1["flagged"] and d1["drift"] == pytest.approx(0.8, abs=0.02)
    assert "seed 1's steady rate went from" in comp.flag_notes[0]
    md = render_markdown(report)
    assert "| 1.500 (not clean) |" in md and "**compile=default** (drift)" in md
    data = report.to_dict()
    row = next(c for c in data["cells"] if c["label"] == "compile=default")
    assert row["ratio_clean"] is False and row["flags"] == ["drift"]
    assert data["measurement_flags"] == [{"cell": "compile=default", "flags": ["drift"], "notes": comp.flag_notes}]
    (effect,) = report.marginal_effects
    assert effect.clean is False


def test_jitter_is_not_drift_but_a_job_too_noisy_to_resolve_10_percent_is_flagged_noisy(tmp_path: Path) -> None:
    noisy = jitter(100, 9, rel=0.6)  # +-60% jitter, no trend: the median rate is uncertain by ~+-20%
    report = build(tmp_path, [make_record(seed=0, rate=100, iterations=noisy),
                              make_record(compile="default", seed=0, rate=150, iterations=jitter(150, 9))])
    base = cell(report, compile="none")
    assert base.flags == ["noisy"] and base.job_drift[0]["rate_uncertainty"] > 0.1
    assert "seed 0's median steady rate is uncertain by" in base.flag_notes[0]
    # and what would make it enough: the uncertainty falls as 1/sqrt(iterations), so (u / 10%)^2 the budget
    factor = (base.job_drift[0]["rate_uncertainty"] / 0.1) ** 2
    steps = math.ceil(1000 * factor / 1000) * 1000  # the record's 1,000 env steps, rounded up to a thousand
    assert f"; total_env_steps={steps:,} (x{factor:.1f}) would bring it under 10%" in base.flag_notes[0]
    assert cell(report, compile="default").ratio_clean is False  # against a noisy baseline
    # and the interval's spread is at least that job's own noise: with one seed, none; the se is kept
    assert base.rate_se_by_seed == {"0": pytest.approx(base.job_drift[0]["rate_uncertainty"] / 2)}


def test_quiet_slightly_drifting_or_short_jobs_are_not_flagged(tmp_path: Path) -> None:
    slight = jitter(100, 6) + jitter(98, 6, seed=1) + jitter(95, 6, seed=2)  # -5%: under the 10% threshold
    short = [100.0, 100.0, 50.0, 50.0, 50.0]  # one iteration per third: not assessed
    report = build(tmp_path, [
        make_record(seed=0, rate=100, iterations=jitter(100, 18, rel=0.05)),
        make_record(compile="default", seed=0, rate=100, iterations=slight),
        make_record(twin=True, seed=0, rate=100, iterations=short),
    ])
    assert all(c.flags == [] and c.ratio_clean for c in report.cells), [c.flag_notes for c in report.cells]
    assert not cell(report, twin_modules="true").job_drift  # too short to judge
    assert "No cell flagged" in render_markdown(report)


# ------------------------------------------------------------------------- seeds


def test_seeds_that_disagree_beyond_their_own_noise_are_flagged(tmp_path: Path) -> None:
    report = build(tmp_path, [
        make_record(seed=0, rate=100, iterations=jitter(100, 9)),
        make_record(seed=1, rate=101, iterations=jitter(101, 9, seed=1)),
        make_record(compile="default", seed=0, rate=150, iterations=jitter(150, 9)),
        make_record(compile="default", seed=1, rate=150, iterations=jitter(150, 9, seed=1)),
        make_record(compile="default", seed=2, rate=195, iterations=jitter(195, 9, seed=2)),  # 30% apart
    ])
    base, comp = cell(report, compile="none"), cell(report, compile="default")
    assert base.flags == [] and comp.flags == ["seeds_disagree"]
    assert "150 (seed 0) to 195 (seed 2)" in comp.flag_notes[0]
    assert comp.ratio_clean is False


def test_seeds_apart_within_their_iteration_noise_do_not_disagree(tmp_path: Path) -> None:
    report = build(tmp_path, [
        make_record(seed=0, rate=100, iterations=jitter(100, 9, rel=0.6)),
        make_record(seed=1, rate=120, iterations=jitter(120, 9, rel=0.6, seed=1)),  # 20% apart, iterations +-60%
        make_record(compile="default", seed=0, rate=150, iterations=jitter(150, 9)),
        make_record(compile="default", seed=1, rate=155, iterations=jitter(155, 9, seed=1)),  # 3% apart
    ])
    assert "seeds_disagree" not in cell(report, compile="none").flags  # (its jobs are "noisy" instead)
    assert cell(report, compile="default").flags == []


# ----------------------------------------------------------------- oversubscription


def test_overlapping_jobs_with_more_threads_than_cores_are_flagged(tmp_path: Path) -> None:
    """As in the issue: 3 one-thread jobs started together on 2 usable cores; then the same cells alone."""
    report = build(tmp_path, [
        timed(make_record(seed=0, rate=100), 0, 10),
        timed(make_record(compile="default", seed=0, rate=480), 0.5, 8),
        timed(make_record(twin=True, seed=0, rate=120), 1, 9),
    ])
    assert all(c.flags == ["oversubscribed"] for c in report.cells)
    assert cell(report, compile="default").ratio_clean is False
    base = cell(report, compile="none", twin_modules="false")
    assert "up to 3 job(s) and 3 busy threads on 2 usable cores of node1" in base.flag_notes[0]
    text = rp.render_table(report, color=False)
    assert "NOT CLEAN: oversubscribed" in text and "up to 3 jobs at once" in text
    assert "(oversubscribed)" in render_markdown(report)


@pytest.mark.parametrize("case", ["two_jobs_two_cores", "one_after_another", "other_hosts"])
def test_jobs_that_fit_their_host_are_not_flagged(tmp_path: Path, case: str) -> None:
    starts = {"two_jobs_two_cores": [(0, 10), (1, 9), (10.5, 20)], "one_after_another": [(0, 10), (10, 20), (20, 30)],
              "other_hosts": [(0, 10), (0, 10), (0, 10)]}[case]
    hosts = ["a", "b", "c"] if case == "other_hosts" else ["node1"] * 3
    records = [make_record(seed=0, rate=100), make_record(compile="default", seed=0, rate=150),
               make_record(twin=True, seed=0, rate=120)]
    report = build(tmp_path, [timed(r, s, e, host=h) for r, (s, e), h in zip(records, starts, hosts)])
    assert all(c.flags == [] for c in report.cells), [c.flag_notes for c in report.cells]


def test_one_job_with_more_threads_than_usable_cores_is_flagged(tmp_path: Path) -> None:
    report = build(tmp_path, [  # the baseline job ran under a 1-core affinity mask (taskset)
        timed(make_record(seed=0, rate=100), 0, 10, threads=2, usable_cpus=1),
        timed(make_record(compile="default", seed=0, rate=150), 11, 20, threads=2, usable_cpus=2),
    ])
    assert cell(report, compile="none").flags == ["oversubscribed"]
    assert cell(report, compile="default").flags == []
    assert cell(report, compile="default").ratio_clean is False  # its baseline is not clean
    assert "baseline (compile=none) flagged: oversubscribed" in cell(report, compile="default").flag_notes


# ----------------------------------------------------------------------- run order


def test_the_report_says_the_run_order(tmp_path: Path) -> None:
    cells = [("none", False), ("default", False)]

    def sweep(order: list[tuple[int, int]], where: Path) -> rp.Report:
        recs = [timed(make_record(compile=cells[c][0], seed=s, rate=100 + 50 * c), 10 * i, 10 * i + 9)
                for i, (c, s) in enumerate(order)]
        return build(where, recs)

    seed_major = sweep([(0, 0), (1, 0), (0, 1), (1, 1), (0, 2), (1, 2)], tmp_path / "a")
    assert seed_major.run_order["order"] == "seed-major"
    assert seed_major.run_order["max_concurrent"] == 1
    md = render_markdown(seed_major)
    assert "Run order: interleaved, seed-major" in md and "one job at a time (BasicLauncher)" in md
    assert json.loads(json.dumps(seed_major.to_dict()))["run_order"]["order"] == "seed-major"
    cell_major = sweep([(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)], tmp_path / "b")
    assert cell_major.run_order["order"] == "cell-major"
    assert "drift of the machine lands on whole cells" in render_markdown(cell_major)
    untimed = build(tmp_path / "c", [make_record(seed=0), make_record(compile="default", seed=0)])
    assert untimed.run_order["order"] == "unknown"
    # the launcher alternates the cells' order from one seed to the next, and the report says it did
    alternating = sweep([(0, 0), (1, 0), (1, 1), (0, 1)], tmp_path / "d")
    assert "(the cells' order alternating from one seed to the next)" in alternating.run_order["text"]
    assert "(the cells in the same order every seed)" in seed_major.run_order["text"]


def test_seeds_trained_together_run_in_the_round_of_their_first_seed(tmp_path: Path) -> None:
    """seeds_per_job=1,2 seeds 0,1: the launcher starts (alone, 0) then the group (0, 1), then (alone, 1); the
    group's seeds share one process and its start time, and the report calls the order seed-major, as the
    launcher did (it read "mixed")."""
    recs = [timed(make_record(seed=0, rate=100), 0, 9), timed(make_record(compile="default", seed=0, rate=150), 10, 19),
            timed(make_record(compile="default", seed=1, rate=150), 10, 19), timed(make_record(seed=1, rate=100), 20, 29)]
    for rec in recs[1:3]:
        rec["group"] = {"seeds": [0, 1], "jobs": [1, 2], "leader": 1}
    report = build(tmp_path, recs)
    assert report.run_order["order"] == "seed-major" and report.run_order["n_timed_jobs"] == 4
    # and their process timed them once: one measurement, not two (16 seeds together read 1.03x [1.03, 1.03])
    together = cell(report, compile="default")
    assert together.grouped and list(together.rate_by_seed) == ["0"] and together.ci_low is None
    assert together.ratio_note == ("no interval: 1 timed process: seeds trained together are timed once")
    assert len(together.return_by_seed) == 2  # each seed learns on its own: learning counts both


# -------------------------------------------------------------------- end to end


def test_end_to_end_ratio_and_the_break_even_budget(tmp_path: Path) -> None:
    """Compile doubles the steady rate but adds 15 s of fixed cost: it loses end to end at 1000 steps
    and pays off beyond 15 s / (1/100 - 1/200 s per step) = 3000 env steps."""
    recs = []
    for seed, jit in enumerate((0.0, 0.2, -0.2)):
        base = make_record(seed=seed, rate=100)
        base["wall_s"] = 10.0 + jit  # 1000 steps at 100/s: no fixed cost
        comp = make_record(compile="default", seed=seed, rate=200)
        comp["wall_s"] = 20.0 + jit  # 1000 steps at 200/s = 5 s, + 15 s fixed
        recs += [base, comp]
    report = build(tmp_path, recs)
    comp = cell(report, compile="default")
    assert comp.ratio == pytest.approx(2.0)
    assert comp.end_to_end_ratio == pytest.approx(0.5, rel=1e-3)  # the geometric mean of 10/20, 10.2/20.2, 9.8/19.8
    assert comp.end_to_end_ci_method == "paired by seed"
    assert 9.8 / 20.2 <= comp.end_to_end_ci_low <= 0.5 <= comp.end_to_end_ci_high <= 10.2 / 19.8
    assert comp.fixed_cost_s == pytest.approx(15.0) and cell(report, compile="none").fixed_cost_s == pytest.approx(0)
    assert comp.break_even_env_steps == pytest.approx(3000.0)
    assert "loses end to end at this budget (1000 env steps)" in comp.break_even_note
    md = render_markdown(report)
    assert "## Steady state and end to end" in md and "3,000" in md
    row = next(c for c in report.to_dict()["cells"] if c["label"] == "compile=default")
    for key in ("ratio", "ci_low", "ci_high", "end_to_end_ratio", "end_to_end_ci_low", "end_to_end_ci_high"):
        assert isinstance(row[key], float), key
    # a toggle that wins both ways has no break-even to show
    assert cell(report, compile="none").break_even_env_steps is None


def test_one_seed_gives_an_end_to_end_ratio_without_interval(tmp_path: Path) -> None:
    base, comp = make_record(seed=0, rate=100), make_record(compile="default", seed=0, rate=110)
    base["wall_s"], comp["wall_s"] = 10.0, 8.0
    comp_cell = cell(build(tmp_path, [base, comp]), compile="default")
    assert comp_cell.end_to_end_ratio == pytest.approx(1.25)
    assert comp_cell.end_to_end_ci_low is None and "no interval: 1 seed" in comp_cell.end_to_end_note
    assert comp_cell.break_even_env_steps is None  # faster and cheaper: no break-even


# ------------------------------------------------------------------- presentation


def test_returns_read_as_median_and_interquartile_range(tmp_path: Path) -> None:
    recs = [make_record(seed=s, final_return=r) for s, r in enumerate((100.0, 200.0, 300.0, 400.0))]
    one = make_record(compile="default", seed=0, final_return=25.0)
    one["learning"]["eval_returns"] = [10.0, 20.0, 30.0, 40.0]
    report = build(tmp_path, [*recs, one])
    base, comp = cell(report, compile="none"), cell(report, compile="default")
    assert (base.final_return_median, base.final_return_q25, base.final_return_q75) == (250.0, 175.0, 325.0)
    assert (comp.final_return_q25, comp.final_return_q75, comp.final_return_iqr_over) == (17.5, 32.5, "eval episodes")
    md = render_markdown(report)
    assert "250 [IQR 175, 325; seeds]" in md and "25 [IQR 17.5, 32.5; eval]" in md
    assert "±" not in md


def test_learning_curves_of_several_seeds_have_a_median_and_a_band() -> None:
    x = list(range(0, 1000, 10))
    curves = [(x, [v + k for v in x]) for k in (0.0, 100.0, 300.0)]
    grid, med, q25, q75 = _median_band(curves)
    # the median seed's curve (offset 100), between the quartiles (offsets 50 and 200)
    assert np.allclose(med, np.interp(grid, x, [v + 100.0 for v in x]), atol=60)
    assert np.all(q25 < med) and np.all(med < q75)
    assert _median_band(curves[:1]) is None  # one seed: just its line


def test_the_learning_plot_draws_several_seeds(tmp_path: Path) -> None:
    report = build(tmp_path, [make_record(seed=s, rate=100) for s in range(3)]
                   + [make_record(compile="default", seed=s, rate=150) for s in range(3)])
    png = png_bytes(learning_figure(report))
    assert png is not None and png[:8] == b"\x89PNG\r\n\x1a\n"


def _pairwise_oversubscribed(all_spans) -> dict[int, str]:
    """The definition, job by job against every other (the sweep line must agree with it)."""
    out = {}
    for s in all_spans:
        if s.capacity <= 0:
            continue
        same = [o for o in all_spans if o.host == s.host and o.start < s.end and s.start < o.end]
        peak, peak_jobs = 0, 0
        for t in sorted({s.start, *(o.start for o in same if s.start <= o.start < s.end)}):
            running = [o for o in same if o.start <= t < o.end]
            if sum(o.threads for o in running) > peak:
                peak, peak_jobs = sum(o.threads for o in running), len(running)
        if peak > s.capacity:
            out[id(s.job)] = (f"oversubscribed: seed {s.job.seed} ran with up to {peak_jobs} job(s) and "
                              f"{peak} busy threads on {s.capacity} usable cores of {s.host}")
    return out


@pytest.mark.parametrize("seed", range(6))
def test_the_sweep_line_finds_what_comparing_every_pair_of_jobs_finds(seed: int) -> None:
    """Ties, jobs that end as another starts, zero-length jobs, several hosts, Slurm-like crowds."""
    from rlsweep.report.measurement import Span, max_concurrent, oversubscribed

    rng = np.random.default_rng(seed)
    spans = []
    for i in range(300):
        start = float(rng.integers(0, 60))  # integer times: many ties
        end = start + float(rng.choice([0, 1, 2, 5, 30]))
        job = rp.Job(status="ok", overrides=[], seed=str(i))
        spans.append(Span(job, start, end, host=str(rng.choice(["a", "b", "c"])), threads=int(rng.integers(1, 4)),
                          capacity=int(rng.choice([0, 4, 16, 64]))))
    expected = _pairwise_oversubscribed(spans)
    assert 0 < len(expected) < len(spans)  # the case has both kinds
    assert oversubscribed(spans) == expected
    assert max_concurrent(spans) == max(sum(o.start <= s.start < o.end for o in spans) for s in spans)
    assert max_concurrent([]) == 0
