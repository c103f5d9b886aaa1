"""A real gymnasium environment that runs its job out of memory, for the Slurm chaos tests.

A job picks it with ``env.id=tests.slurm.chaos_envs:MemoryHogCartPole-v0``: the job process imports
this module (the repository root is on its path), which registers it.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control import CartPoleEnv

#: env steps (per sub-environment) before the hog starts to eat memory
HOG_AFTER_STEPS = 50
#: memory held by the job's process once grown (shared by every sub-environment), MiB
HOG_TOTAL_MIB = 3072
_HELD: list[np.ndarray] = []


class MemoryHogCartPole(CartPoleEnv):
    """CartPole that, after HOG_AFTER_STEPS steps, grows the process by 64 MiB of touched memory per
    step up to HOG_TOTAL_MIB, and holds it: over any job limit below that, Slurm kills the job."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps_taken = 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.steps_taken += 1
        if self.steps_taken >= HOG_AFTER_STEPS and len(_HELD) * 64 < HOG_TOTAL_MIB:
            _HELD.append(np.ones(64 << 20, dtype=np.uint8))  # ones: the pages are touched, so resident
        return super().step(action)


if "MemoryHogCartPole-v0" not in gym.envs.registry:
    gym.register("MemoryHogCartPole-v0", entry_point=MemoryHogCartPole, max_episode_steps=500)
