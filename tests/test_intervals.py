"""The report's intervals mean what they say at the seeds users run (docs/guide/measuring.md has the full table,
from scripts/interval_coverage.py), and the learning statistics are the field's (rliable's definitions)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rlsweep.bootstrap import iqm, p_improvement, seed_ratio, t975


@pytest.mark.parametrize("n", [2, 3, 5])
def test_a_95_percent_interval_contains_the_true_ratio_95_percent_of_the_time(n: int) -> None:
    """Log-normal job noise plus a drift shared by each round of seeds: 2,000 simulated sweeps of a cell 10%
    faster than its baseline. A percentile bootstrap of the medians covered 66-80% at two seeds."""
    rng = np.random.default_rng(n)
    hits = 0
    for _ in range(2000):
        shared = rng.normal(0, 0.03, n)
        base = {str(s): 100 * math.exp(shared[s] + rng.normal(0, 0.02)) for s in range(n)}
        cell = {str(s): 110 * math.exp(shared[s] + rng.normal(0, 0.02)) for s in range(n)}
        sr = seed_ratio(cell, base)
        hits += sr.ci_low <= 1.1 <= sr.ci_high
    assert 0.93 <= hits / 2000 <= 0.97


def test_one_seed_has_no_interval_and_unmatched_seeds_are_compared_unpaired() -> None:
    one = seed_ratio({"0": 150.0}, {"0": 100.0})
    assert one.ratio == pytest.approx(1.5) and one.ci_low is None and one.why == "1 seed"
    apart = seed_ratio({"0": 150.0, "1": 160.0}, {"2": 100.0, "3": 104.0})
    assert apart.method == "unpaired seeds" and apart.ci_low < apart.ratio < apart.ci_high
    assert apart.ratio == pytest.approx(math.sqrt(150 * 160) / math.sqrt(100 * 104))


def test_seeds_needed_shrink_the_interval_below_the_effect() -> None:
    sr = seed_ratio({"0": 103.0, "1": 99.0, "2": 104.0}, {"0": 100.0, "1": 100.0, "2": 100.0})
    assert sr.ci_low < 1.0 < sr.ci_high  # 3 seeds: not enough for +2%
    n = sr.seeds_for()
    assert n is not None and n > 3
    assert t975(n - 1) * sr.log_sd / math.sqrt(n) < math.log(sr.ratio) <= t975(n - 2) * sr.log_sd / math.sqrt(n - 1)


def test_t_quantiles() -> None:
    assert t975(1) == 12.706 and t975(4) == 2.776 and t975(1.7) == 12.706  # a fractional df rounds down: wider
    assert t975(60) == pytest.approx(2.000, abs=1e-3) and t975(10**6) == pytest.approx(1.960, abs=1e-3)


def test_interquartile_mean_and_probability_of_improvement_as_rliable_defines_them() -> None:
    assert iqm(np.array([1.0, 2.0, 3.0, 4.0, 100.0])) == 3.0  # scipy.stats.trim_mean(x, 0.25)
    assert iqm(np.array([1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0])) == 4.5
    rng = np.random.default_rng(0)
    p, lo, hi, paired = p_improvement({"0": 2.0, "1": 1.0}, {"0": 1.0, "1": 1.0}, rng, 500)
    assert (p, paired) == (0.75, True) and 0.5 <= lo <= p <= hi <= 1.0  # a tie counts half
    p, *_, paired = p_improvement({"0": 2.0, "1": 1.0}, {"2": 1.0, "3": 3.0}, rng, 500)
    assert (p, paired) == (0.375, False)  # all four pairs of runs: 2>1, 2<3, 1=1 (half), 1<3


def test_two_seeds_that_agree_by_chance_keep_their_own_measurement_noise() -> None:
    """A no-op toggle read 0.92x [0.92, 0.92] when two seeds' ratios agreed to three digits: the spread of two
    values can be near zero by chance, but never below what each job's own iteration noise implies."""
    cell, base = {"0": 92.0, "1": 92.1}, {"0": 100.0, "1": 100.1}
    bare = seed_ratio(cell, base)
    assert bare.ci_high / bare.ci_low < 1.01
    se = {"0": 0.02, "1": 0.02}  # each job's median rate known to +-2% (one standard error)
    floored = seed_ratio(cell, base, se, se)
    assert floored.ratio == pytest.approx(bare.ratio)
    assert floored.ci_low < 0.75 and floored.ci_high > 1.0
