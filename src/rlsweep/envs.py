"""Gymnasium vector environments, episode statistics and the deterministic evaluation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode

from rlsweep.config import EnvConfig


def make_envs(env_cfg: EnvConfig, num_envs: int, seed: int) -> gym.vector.VectorEnv:
    """A vector env with SAME_STEP autoreset and episode statistics, reset with ``seed``.

    SAME_STEP autoreset makes every step a real transition: when an episode ends, the step
    returns the next episode's first observation and the true last one in
    ``info["final_obs"]``. The default NEXT_STEP mode inserts a reset step whose action is
    ignored, which would enter rollouts and replay buffers as a fake transition.
    """
    kwargs: dict[str, Any] = {}
    if env_cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = env_cfg.max_episode_steps
    envs = gym.make_vec(
        env_cfg.id,
        num_envs=num_envs,
        vectorization_mode=env_cfg.vectorization,
        vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP},
        **kwargs,
    )
    envs = gym.wrappers.vector.RecordEpisodeStatistics(envs)
    envs.action_space.seed(seed)
    envs.reset(seed=seed)
    return envs


def finished_episodes(info: dict[str, Any]) -> list[tuple[float, int]]:
    """(return, length) of every episode that ended in this vector step (gymnasium 1.x)."""
    if "episode" not in info:
        return []
    mask = info["_episode"]
    ep = info["episode"]
    return [(float(ep["r"][i]), int(ep["l"][i])) for i in np.flatnonzero(mask)]


def evaluate(
    policy: Callable[[np.ndarray], np.ndarray],
    env_cfg: EnvConfig,
    episodes: int,
    seed: int,
) -> list[float]:
    """Returns of ``episodes`` episodes of the deterministic ``policy``, one per env, batched."""
    envs = make_envs(env_cfg, episodes, seed)
    obs, _ = envs.reset(seed=seed)
    returns: list[float | None] = [None] * episodes
    try:
        while any(r is None for r in returns):
            obs, _, _, _, info = envs.step(policy(obs))
            if "episode" in info:
                for i in np.flatnonzero(info["_episode"]):
                    if returns[i] is None:
                        returns[i] = float(info["episode"]["r"][i])
    finally:
        envs.close()
    return [float(r) for r in returns if r is not None]
