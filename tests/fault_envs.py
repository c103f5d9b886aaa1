"""Real gymnasium environments that fail on purpose, for the fault tests.

A job picks one with gymnasium's ``module:id`` form, e.g. ``env.id=tests.fault_envs:CrashingCartPole-v0``:
the job process imports this module (the repository root is on its path), which registers them.
Each sub-environment counts its own steps, across resets.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
from gymnasium.envs.classic_control import CartPoleEnv

#: env steps (per sub-environment) after which the faults strike
FAULT_AT_STEP = 40
CRASH_MESSAGE = "injected fault: the environment crashed"


class _Counting(CartPoleEnv):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.steps_taken = 0

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        self.steps_taken += 1
        return super().step(action)


class CrashingCartPole(_Counting):
    """CartPole that raises RuntimeError at its FAULT_AT_STEP-th step."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        out = super().step(action)
        if self.steps_taken >= FAULT_AT_STEP:
            raise RuntimeError(f"{CRASH_MESSAGE} at step {self.steps_taken}")
        return out


class NaNRewardCartPole(_Counting):
    """CartPole whose rewards turn NaN from its FAULT_AT_STEP-th step on (a broken reward function)."""

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = super().step(action)
        if self.steps_taken >= FAULT_AT_STEP:
            reward = math.nan
        return obs, reward, terminated, truncated, info


class NaNRewardHighSeedCartPole(NaNRewardCartPole):
    """NaNRewardCartPole in the training envs of a job of seed HIGH_SEED (seeded HIGH_SEED + i, i < 100),
    CartPole in the others: of a sweep's seeds 0 and HIGH_SEED trained together (seeds_per_job), only the
    second's rewards turn NaN (evaluation envs are seeded 10,000 higher: none is faulty)."""

    HIGH_SEED = 1000

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        if seed is not None:
            self.faulty = self.HIGH_SEED <= seed < self.HIGH_SEED + 100
        return super().reset(seed=seed, options=options)

    def step(self, action: Any) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        return super().step(action) if getattr(self, "faulty", False) else _Counting.step(self, action)


for _cls in (CrashingCartPole, NaNRewardCartPole, NaNRewardHighSeedCartPole):
    _id = f"{_cls.__name__}-v0"
    if _id not in gym.envs.registry:
        gym.register(_id, entry_point=_cls, max_episode_steps=500)
