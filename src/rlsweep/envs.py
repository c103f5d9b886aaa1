"""Gymnasium vector environments, episode statistics and the deterministic evaluation."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorWrapper

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
    envs = EpisodeStatistics(envs)
    envs.action_space.seed(seed)
    envs.reset(seed=seed)
    return envs


class EpisodeStatistics(VectorWrapper):
    """Return and length of every episode that ends, in ``info["episode"]`` (``"r"``, ``"l"``) and
    ``info["_episode"]``: the keys and numbers of gymnasium's ``RecordEpisodeStatistics``.

    For SAME_STEP autoreset only. There every step counts toward an episode, and an episode ended
    exactly when the vector env put ``"final_obs"`` in info, so a step where none ended costs two
    in-place additions. gymnasium's wrapper, which also handles NEXT_STEP and keeps wall times and
    queues, added ~20% to an 8-env CartPole step; this one adds under 10% (profiled).
    """

    def __init__(self, env: gym.vector.VectorEnv) -> None:
        super().__init__(env)
        mode = env.metadata.get("autoreset_mode")
        if mode != AutoresetMode.SAME_STEP:
            raise ValueError(f"EpisodeStatistics needs SAME_STEP autoreset, the env has {mode}")
        # float64 like gymnasium's wrapper: the same sums in the same order give the same returns
        self._returns = np.zeros(self.num_envs, dtype=np.float64)
        # lengths as (steps taken) - (step count at the episode's start): no per-step array op
        self._steps = 0
        self._started_at = np.zeros(self.num_envs, dtype=np.int64)

    def reset(self, *, seed: int | list[int] | None = None, options: dict[str, Any] | None = None) -> Any:
        obs, info = self.env.reset(seed=seed, options=options)
        mask = (options or {}).get("reset_mask")
        which = slice(None) if mask is None else mask
        self._returns[which] = 0.0
        self._started_at[which] = self._steps
        return obs, info

    def step(self, actions: Any) -> Any:
        obs, rewards, terminated, truncated, info = self.env.step(actions)
        self._returns += rewards
        self._steps += 1
        if "final_obs" in info:
            ended = terminated | truncated
            lengths = self._steps - self._started_at
            info["episode"] = {"r": np.where(ended, self._returns, 0.0), "l": np.where(ended, lengths, 0)}
            info["_episode"] = ended
            self._returns[ended] = 0.0
            self._started_at[ended] = self._steps
        return obs, rewards, terminated, truncated, info


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
