"""Intervals over seeds and repeats, one implementation for the report and the bench.

A speed ratio's interval is Student's t over the log ratios (:func:`seed_ratio`): paired by seed when repeat
``i`` of both sides ran together (the bench's interleaved repeats, a report's rounds of seeds: drift shared
by a pair cancels), else Welch's over each side's logs. With two repeats it is wide, as it should be; with
one there is none. The percentile bootstrap of medians (:func:`ratio_samples`) was too sure with two or three
repeats (``scripts/interval_coverage.py`` measures both); learning keeps rliable's bootstrap (below).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np


def resample_medians(values: np.ndarray, rng: np.random.Generator, n: int) -> np.ndarray:
    """Medians of ``n`` resamples (with replacement) of ``values``, in chunks so memory stays bounded."""
    out = np.empty(n)
    chunk = max(1, 2_000_000 // max(1, len(values)))
    for start in range(0, n, chunk):
        stop = min(n, start + chunk)
        idx = rng.integers(0, len(values), size=(stop - start, len(values)))
        out[start:stop] = np.median(values[idx], axis=1)
    return out


def ratio_samples(a: Sequence[float], b: Sequence[float], rng: np.random.Generator, n: int, *,
                  paired: bool) -> np.ndarray:
    """``n`` bootstrap samples of median(a) / median(b), paired or independent (see the module)."""
    aa, bb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    if not paired:
        return resample_medians(aa, rng, n) / resample_medians(bb, rng, n)
    if len(aa) != len(bb):
        raise ValueError(f"paired resampling needs as many repeats on each side, got {len(aa)} and {len(bb)}")
    idx = rng.integers(0, len(aa), size=(n, len(aa)))
    return np.median(aa[idx], axis=1) / np.median(bb[idx], axis=1)


def interval(samples: np.ndarray) -> tuple[float, float]:
    """The 95% percentile interval of bootstrap samples."""
    lo, hi = np.percentile(samples, [2.5, 97.5])
    return float(lo), float(hi)


def ratio_with_ci(a: Sequence[float], b: Sequence[float], *, paired: bool) -> tuple[float, list[float] | None]:
    """a / b over repeats (positive values) and its 95% interval (:func:`seed_ratio`): ``paired`` when
    repeat ``i`` of both sides ran together. None for the interval with too few repeats for one."""
    if paired and len(a) != len(b):
        raise ValueError(f"paired repeats need as many on each side, got {len(a)} and {len(b)}")
    x, y = dict(enumerate(a)), dict(enumerate(b)) if paired else {f"b{i}": v for i, v in enumerate(b)}
    r = seed_ratio(x, y)
    return r.ratio, None if r.ci_low is None or r.ci_high is None else [r.ci_low, r.ci_high]


def ci_text(ci: Sequence[float] | None) -> str:
    """``[lo, hi]`` to two decimals, or why there is none."""
    if ci is None:
        return "(no interval: too few repeats)"
    return f"[{ci[0]:.2f}, {ci[1]:.2f}]"


def _p_improvement(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 over all pairs of the last axis (rliable's probability of improvement)."""
    x, y = a[..., :, None], b[..., None, :]
    return (x > y).mean(axis=(-2, -1)) + 0.5 * (x == y).mean(axis=(-2, -1))


def learning_difference(ours: Sequence[float], peer: Sequence[float], n_boot: int = 10_000,
                        seed: int = 0) -> dict[str, Any]:
    """How one side's final returns compare with another's, over independent seeds.

    ``mean_diff`` = mean(ours) - mean(peer) with a 95% percentile-bootstrap interval (``ci_low``,
    ``ci_high``: each side resampled on its own, two libraries' seeds being unrelated runs), and
    ``p_improvement`` = P(ours > peer) over all seed pairs, ties counting half, with its interval
    (``p_improvement_ci``). ``no_worse``: ``ci_high >= 0``, ours not significantly worse at 95%
    (a weak statement with few seeds).
    """
    if not ours or not peer:
        raise ValueError(f"learning_difference needs final returns on both sides, got {len(ours)} and {len(peer)}")
    a, b = np.asarray(ours, dtype=float), np.asarray(peer, dtype=float)
    rng = np.random.default_rng(seed)
    ra, rb = rng.choice(a, (n_boot, len(a))), rng.choice(b, (n_boot, len(b)))
    lo, hi = interval(ra.mean(1) - rb.mean(1))
    # the pairwise comparison is n_boot x len(a) x len(b): bounded so 100 seeds a side stays small
    k = min(n_boot, 2000)
    return {"n_ours": len(a), "n_peer": len(b), "mean_ours": float(a.mean()), "mean_peer": float(b.mean()),
            "mean_diff": float(a.mean() - b.mean()), "ci_low": lo, "ci_high": hi,
            "p_improvement": float(_p_improvement(a, b)),
            "p_improvement_ci": list(interval(_p_improvement(ra[:k], rb[:k]))),
            "no_worse": bool(hi >= 0)}


# ------------------------------------------------------------------ a ratio over a few seeds
# A percentile bootstrap over 2-5 seeds is far too sure (two seeds give three possible medians), so a
# report's ratios use Student's t on the seeds' log ratios: exact for log-normal noise, and wide where
# the evidence is thin, as it should be. Checked by simulation and on no-op toggles (docs/guide/measuring.md).

#: Student's t, 97.5% quantile, for 1..30 degrees of freedom
_T975 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179, 2.160, 2.145,
         2.131, 2.120, 2.110, 2.101, 2.093, 2.086, 2.080, 2.074, 2.069, 2.064, 2.060, 2.056, 2.052, 2.048,
         2.045, 2.042)


def t975(df: float) -> float:
    """The 97.5% quantile of Student's t with ``df`` degrees of freedom (a fractional df rounds down: wider)."""
    k = max(1, int(df))
    if k <= len(_T975):
        return _T975[k - 1]
    z = 1.959964  # Cornish-Fisher expansion: within 1e-3 of the exact value beyond 30
    return z + (z ** 3 + z) / (4 * k) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * k * k)


@dataclass
class SeedRatio:
    """A ratio x / y over seeds: ``ratio`` = the geometric mean of the per-seed ratios (paired by seed) or of
    each side's geometric means (unpaired), its 95% interval (None: no interval, ``why`` says why), ``method``
    ("paired by seed" or "unpaired seeds"), ``n`` (pairs, or the smaller side) and ``log_sd``, the spread of
    one seed's log ratio, from which :meth:`seeds_for` says how many seeds would resolve an effect."""

    ratio: float
    ci_low: float | None = None
    ci_high: float | None = None
    method: str | None = None
    n: int = 0
    log_sd: float | None = None
    why: str | None = None

    def seeds_for(self) -> int | None:
        """Seeds per cell whose interval would exclude 1 for the effect seen, at this noise; None when there is
        no noise estimate or no effect."""
        size = abs(math.log(self.ratio))
        if self.log_sd is None or size < 1e-9:
            return None
        spread = self.log_sd * (1.0 if self.method == "paired by seed" else math.sqrt(2.0))
        n = 2
        while n < 10_000 and t975(n - 1) * spread / math.sqrt(n) >= size:
            n += 1
        return n


def seed_ratio(x: Mapping[str, float], y: Mapping[str, float], x_se: Mapping[str, float] | None = None,
               y_se: Mapping[str, float] | None = None) -> SeedRatio:
    """x / y over seeds (``{seed: value}``, positive values): paired by seed when at least two seeds ran on
    both sides (a round of seeds ran close in time, so the machine's drift between rounds cancels), else
    unpaired (Welch) when each side has two; with fewer there is no honest interval and ``why`` says so.

    ``x_se``, ``y_se``: each value's own relative standard error (a job's median rate, from its iterations),
    where known. The spread used is never less than they imply: two seeds whose ratios agree by chance
    would otherwise give a zero-width interval (seen on a no-op toggle: 0.92x [0.92, 0.92])."""
    def floor(seeds: Sequence[str], *ses: Mapping[str, float] | None) -> float:
        return math.sqrt(float(np.mean([sum((se or {}).get(s, 0.0) ** 2 for se in ses) for s in seeds])))

    common = [s for s in x if s in y]
    if len(common) >= 2:
        d = np.log([x[s] for s in common]) - np.log([y[s] for s in common])
        sd = max(float(np.std(d, ddof=1)), floor(common, x_se, y_se))
        half = t975(len(d) - 1) * sd / math.sqrt(len(d))
        m = float(d.mean())
        return SeedRatio(math.exp(m), math.exp(m - half), math.exp(m + half), "paired by seed", len(d), sd)
    lx, ly = np.log(list(x.values())), np.log(list(y.values()))
    point = math.exp(float(lx.mean() - ly.mean())) if len(lx) and len(ly) else math.nan
    if len(lx) < 2 or len(ly) < 2:
        n = min(len(lx), len(ly))
        return SeedRatio(point, n=n, why=f"{n} seed{'s' if n != 1 else ''}")
    sx, sy = max(lx.std(ddof=1), floor(list(x), x_se)), max(ly.std(ddof=1), floor(list(y), y_se))
    vx, vy = sx ** 2 / len(lx), sy ** 2 / len(ly)
    se = math.sqrt(vx + vy)
    df = (vx + vy) ** 2 / (vx ** 2 / (len(lx) - 1) + vy ** 2 / (len(ly) - 1)) if se > 0 else len(lx) + len(ly) - 2
    half = t975(df) * se
    return SeedRatio(point, point * math.exp(-half), point * math.exp(half), "unpaired seeds",
                     min(len(lx), len(ly)), math.sqrt((sx ** 2 + sy ** 2) / 2))


# ------------------------------------------------------------------ learning, as the field compares it
# rliable (Agarwal et al., 2021): the interquartile mean of the runs' scores with a stratified bootstrap
# interval (one task here, so the strata are the one task's seeds), and the probability of improvement.
# Written here rather than imported: rliable needs arch and scipy for these few lines of numpy.


def iqm(values: np.ndarray) -> np.ndarray:
    """The interquartile mean over the last axis: the mean of the middle half (scipy's trim_mean(x, 0.25))."""
    x = np.sort(values, axis=-1)
    k = int(0.25 * x.shape[-1])
    return x[..., k:x.shape[-1] - k].mean(axis=-1)


def iqm_with_ci(values: Sequence[float], rng: np.random.Generator, n: int) -> tuple[float, float, float]:
    """The IQM of ``values`` and its 95% percentile-bootstrap interval (seeds resampled)."""
    x = np.asarray(values, dtype=float)
    lo, hi = interval(iqm(x[rng.integers(0, len(x), size=(n, len(x)))]))
    return float(iqm(x)), lo, hi


def p_improvement(x: Mapping[str, float], y: Mapping[str, float], rng: np.random.Generator,
                  n: int) -> tuple[float, float, float, bool]:
    """P(a run of x scores more than a run of y), ties half, with its 95% bootstrap interval, and whether it
    was paired: by seed when both ran the same seeds (the same seed starts from the same weights and
    episodes), else over all pairs of runs (rliable's)."""
    if set(x) == set(y):
        seeds = sorted(x)
        a, b = np.array([x[s] for s in seeds]), np.array([y[s] for s in seeds])
        wins = (a > b) + 0.5 * (a == b)
        return float(wins.mean()), *interval(wins[rng.integers(0, len(wins), size=(n, len(wins)))].mean(axis=1)), True
    a, b = np.array(list(x.values())), np.array(list(y.values()))
    k = min(n, 2000)
    samples = _p_improvement(a[rng.integers(0, len(a), size=(k, len(a)))], b[rng.integers(0, len(b), size=(k, len(b)))])
    return float(_p_improvement(a, b)), *interval(samples), False
