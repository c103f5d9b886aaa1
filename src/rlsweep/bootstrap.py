"""Bootstrap intervals, one implementation for the report and the bench.

A ratio's interval is the 2.5-97.5 percentile of median(a) / median(b) over resamples, drawn
``paired=True`` when repeat ``i`` of both sides ran together (the bench's interleaved repeats: one
set of indices keeps each pair whole, so drift shared by a pair cancels) or ``paired=False`` for
independent samples (a report's cells: separate jobs; each side resampled on its own, any length).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
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


def ratio_with_ci(a: Sequence[float], b: Sequence[float], *, paired: bool, n_boot: int = 2000,
                  seed: int = 0) -> tuple[float, list[float]]:
    """median(a) / median(b) and its 95% bootstrap interval; a single repeat gives a zero-width one."""
    ratio = statistics.median(a) / statistics.median(b)
    if min(len(a), len(b)) < 2:
        return ratio, [ratio, ratio]
    return ratio, list(interval(ratio_samples(a, b, np.random.default_rng(seed), n_boot, paired=paired)))


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
    diffs = ra.mean(1) - rb.mean(1)
    lo, hi = np.percentile(diffs, [2.5, 97.5])
    # the pairwise comparison is n_boot x len(a) x len(b): bounded so 100 seeds a side stays small
    k = min(n_boot, 2000)
    p_lo, p_hi = np.percentile(_p_improvement(ra[:k], rb[:k]), [2.5, 97.5])
    return {"n_ours": len(a), "n_peer": len(b), "mean_ours": float(a.mean()), "mean_peer": float(b.mean()),
            "mean_diff": float(a.mean() - b.mean()), "ci_low": float(lo), "ci_high": float(hi),
            "p_improvement": float(_p_improvement(a, b)), "p_improvement_ci": [float(p_lo), float(p_hi)],
            "no_worse": bool(hi >= 0)}
