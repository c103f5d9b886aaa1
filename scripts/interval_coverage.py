"""How often the report's 95% intervals contain the truth, at the seeds users run (2, 3, 5).

    python scripts/interval_coverage.py                 # simulation: the report's method against the old one
    python scripts/interval_coverage.py SWEEP [SWEEP..] # real jobs of a change that costs nothing (a no-op
                                                        # toggle, many seeds): sub-sweeps drawn from them

The simulation draws each job's steady rate as log-normal noise around its cell's true rate, plus what a
shared machine adds: a drift shared by a round of seeds (the jobs of one seed run together), occasional
slow jobs (heavy tails), and a bonus for the first job of each round. It compares the report's interval
(rlsweep.bootstrap.seed_ratio: Student's t over the seeds' log ratios, paired by seed) with the percentile
bootstrap of the ratio of medians it replaced, with the cells run in the same order every round and in
alternating order (rlsweep.launchers.seed_major_order).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from rlsweep.bootstrap import interval, ratio_samples, seed_ratio


def simulate_cells(rng: np.random.Generator, n: int, truth: float, *, job_sd: float, round_sd: float,
                   tail: float, first_bonus: float, alternate: bool) -> tuple[dict[str, float], dict[str, float]]:
    """One sweep of two cells (baseline, cell) over ``n`` seeds: each cell's rate by seed."""
    base, cell = {}, {}
    for r in range(n):
        shared = rng.normal(0, round_sd)
        noise = rng.normal(0, job_sd, 2) + np.where(rng.random(2) < tail, rng.normal(-0.3, 0.1, 2), 0.0)
        first = 1 if (alternate and r % 2) else 0  # which of the two runs first in this round
        bonus = np.where(np.arange(2) == first, first_bonus, 0.0)
        base[str(r)] = float(np.exp(shared + noise[0] + bonus[0]) * 100)
        cell[str(r)] = float(np.exp(shared + noise[1] + bonus[1]) * 100 * truth)
    return cell, base


def covers(method: str, cell: dict[str, float], base: dict[str, float], truth: float,
           rng: np.random.Generator) -> bool | None:
    if method == "report":
        sr = seed_ratio(cell, base)
        return None if sr.ci_low is None else sr.ci_low <= truth <= sr.ci_high
    lo, hi = interval(ratio_samples(list(cell.values()), list(base.values()), rng, 2000, paired=False))
    return lo <= truth <= hi


def simulation(trials: int) -> list[str]:
    rng = np.random.default_rng(20261205)
    machines = {"quiet (2% per job)": dict(job_sd=0.02, round_sd=0.0, tail=0.0, first_bonus=0.0),
                "shared (drift 3%, job 2%, 5% slow jobs)": dict(job_sd=0.02, round_sd=0.03, tail=0.05,
                                                               first_bonus=0.0),
                "first job of a round 3% faster": dict(job_sd=0.02, round_sd=0.03, tail=0.0, first_bonus=0.03)}
    lines = ["| machine | cells' order | method | 2 seeds | 3 seeds | 5 seeds |", "|---|---|---|---|---|---|"]
    for name, machine in machines.items():
        for alternate in (False, True):
            for method in ("report", "bootstrap"):
                row = []
                for n in (2, 3, 5):
                    hits = [covers(method, *simulate_cells(rng, n, 1.1, alternate=alternate, **machine), 1.1, rng)
                            for _ in range(trials)]
                    row.append(f"{np.mean([h for h in hits if h is not None]):.1%}")
                order = "alternating" if alternate else "same every seed"
                label = "t over seeds (report)" if method == "report" else "bootstrap of medians (before)"
                lines.append(f"| {name} | {order} | {label} | " + " | ".join(row) + " |")
    return lines


def real(sweeps: list[Path], trials: int) -> list[str]:
    """Sub-sweeps of n seeds from real jobs of two cells that differ by a change that costs nothing."""
    from rlsweep.report import build_report, load_sweep

    rng = np.random.default_rng(20261205)
    cells = [c for s in sweeps for c in build_report(load_sweep(s)).cells]
    base = next(c for c in cells if c.is_baseline)
    other = next(c for c in cells if not c.is_baseline)
    seeds = sorted(set(base.rate_by_seed) & set(other.rate_by_seed))
    lines = [f"{len(seeds)} seeds of {base.label} and {other.label} (truth: 1.0)", "",
             "| seeds | covers 1.0 | median width |", "|---|---|---|"]
    for n in (2, 3, 5):
        hits, widths = [], []
        for _ in range(trials):
            pick = rng.choice(seeds, n, replace=False)
            sr = seed_ratio({s: other.rate_by_seed[s] for s in pick}, {s: base.rate_by_seed[s] for s in pick})
            hits.append(sr.ci_low <= 1.0 <= sr.ci_high)
            widths.append(sr.ci_high / sr.ci_low - 1)
        lines.append(f"| {n} | {np.mean(hits):.1%} | {np.median(widths):.1%} |")
    return lines


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="*", type=Path)
    parser.add_argument("--trials", type=int, default=2000)
    args = parser.parse_args(argv)
    print("\n".join(real(args.sweeps, args.trials) if args.sweeps else simulation(args.trials)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
