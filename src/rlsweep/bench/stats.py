"""The bench's statistics: speed ratios with bootstrap intervals, and the learning comparison.

One home for both: ``python -m sweeps.bench``, the claims table and ``scripts/dqn_parity.py``
use these functions, so a verdict means the same thing wherever it is printed.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from typing import Any

import numpy as np


def ratio_with_ci(a: Sequence[float], b: Sequence[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, list[float]]:
    """median(a) / median(b), and a 95% bootstrap interval resampling the paired repeats."""
    ratio = statistics.median(a) / statistics.median(b)
    if len(a) < 2:
        return ratio, [ratio, ratio]
    rng = np.random.default_rng(seed)
    aa, bb = np.asarray(a, dtype=float), np.asarray(b, dtype=float)
    idx = rng.integers(0, len(a), size=(n_boot, len(a)))
    boot = np.median(aa[idx], axis=1) / np.median(bb[idx], axis=1)
    lo, hi = np.percentile(boot, [2.5, 97.5])
    return ratio, [float(lo), float(hi)]


def _p_improvement(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """P(X > Y) + P(X = Y) / 2 over all pairs of the last axis (rliable's probability of improvement)."""
    x, y = a[..., :, None], b[..., None, :]
    return (x > y).mean(axis=(-2, -1)) + 0.5 * (x == y).mean(axis=(-2, -1))


def learning_difference(ours: Sequence[float], peer: Sequence[float], n_boot: int = 10_000,
                        seed: int = 0) -> dict[str, Any]:
    """How one side's final returns compare with another's, over independent seeds.

    ``mean_diff`` = mean(ours) - mean(peer) with a 95% percentile-bootstrap interval
    (``ci_low``, ``ci_high``: each side resampled on its own, the seeds of two libraries being
    unrelated runs), and ``p_improvement`` = P(ours > peer) over all seed pairs, ties counting
    half, with its bootstrap interval (``p_improvement_ci``). ``no_worse``: the interval's upper
    bound is >= 0, i.e. ours is not significantly worse at 95%; with few seeds that is a weak
    statement, which is why the full bench runs at least 10 seeds a side.
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
