"""Benchmark rlsweep against Stable-Baselines3 and TorchRL, the env-stepping limit and its own overhead.

    python -m sweeps.bench                      # full: PPO, DQN, SAC, Atari PPO x 10 repeats (hours)
    python -m sweeps.bench --quick --out b.json # smoke version (tiny budgets); JSON + b.md
    python -m sweeps.bench --claims             # the talk's claims as measured verdicts

Needs the bench extra: pip install -e ".[bench]".
"""

from __future__ import annotations

import sys
from pathlib import Path

from benchmarks.cli import main

if __name__ == "__main__":
    sys.exit(main(root=Path(__file__).resolve().parents[1]))
