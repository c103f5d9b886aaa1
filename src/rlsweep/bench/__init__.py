"""Benchmarks: rlsweep side by side with peers (``python -m sweeps.bench``) and the claims table.

Stable-Baselines3 and TorchRL live in the optional ``bench`` extra (``pip install -e ".[bench]"``).
"""

from rlsweep.bench.core import BEST_TOGGLES, COMPARISONS, Bench, markdown, ratio_with_ci, run

__all__ = ["BEST_TOGGLES", "COMPARISONS", "Bench", "markdown", "ratio_with_ci", "run"]
