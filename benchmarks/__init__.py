"""Benchmarks: rlsweep side by side with peers (``python -m sweeps.bench``) and the claims table.

Stable-Baselines3 and TorchRL live in the optional ``bench`` extra (``pip install -e ".[bench]"``).
"""

from benchmarks.core import BEST_TOGGLES, COMPARISONS, Bench, markdown, run
from rlsweep.bootstrap import learning_difference, ratio_with_ci

__all__ = ["BEST_TOGGLES", "COMPARISONS", "Bench", "learning_difference", "markdown", "ratio_with_ci", "run"]
