"""One readable module per algorithm; :data:`ALGORITHMS` maps ``algo.name`` to its class."""

from __future__ import annotations

from rlsweep.algos.base import Algorithm
from rlsweep.algos.dqn import DQN
from rlsweep.algos.ppo import PPO
from rlsweep.algos.sac import SAC

ALGORITHMS: dict[str, type[Algorithm]] = {"ppo": PPO, "dqn": DQN, "sac": SAC}

__all__ = ["ALGORITHMS", "Algorithm"]
