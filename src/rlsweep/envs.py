"""Gymnasium vector environments, episode statistics and the deterministic evaluation."""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Sequence
from copy import deepcopy
from typing import Any

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode, VectorWrapper
from gymnasium.vector.utils import concatenate, iterate

from rlsweep.config import EnvConfig, in_range_errors


def make_envs(env_cfg: EnvConfig, num_envs: int, seed: int | Sequence[int]) -> gym.vector.VectorEnv:
    """A vector env with SAME_STEP autoreset and episode statistics, reset with ``seed``.

    A list of seeds (``seeds_per_job``) splits the envs among them (:func:`env_seeds`). SAME_STEP
    autoreset makes every step a real transition (the true last observation is in
    ``info["final_obs"]``), where NEXT_STEP would insert a fake one. ``env.vectorization=sync`` steps
    the envs in this process (:class:`SameStepSyncVectorEnv`), ``async`` in a process each. With
    ``env_cfg.atari`` every env is wrapped by :func:`atari_wrappers` (episodes are whole games).
    """
    kwargs: dict[str, Any] = {}
    if env_cfg.max_episode_steps is not None:
        kwargs["max_episode_steps"] = env_cfg.max_episode_steps
    if env_cfg.atari:
        register_ale()
        # ALE's own frame skip and sticky actions off: AtariPreprocessing skips (and max-pools)
        kwargs.update(frameskip=1, repeat_action_probability=env_cfg.repeat_action_probability)
    env_fns = [functools.partial(_make_env, env_cfg, kwargs)] * num_envs
    if env_cfg.vectorization == "sync":
        envs: gym.vector.VectorEnv = SameStepSyncVectorEnv(env_fns)
    else:
        envs = gym.vector.AsyncVectorEnv(env_fns, autoreset_mode=AutoresetMode.SAME_STEP)
    envs = EpisodeStatistics(envs, game_key=GameStatistics.KEY if env_cfg.atari else None)
    envs.action_space.seed(seed if isinstance(seed, int) else seed[0])
    envs.reset(seed=env_seeds(seed, num_envs))
    return envs


def env_seeds(seed: int | Sequence[int], num_envs: int) -> int | list[int]:
    """What ``envs.reset(seed=...)`` takes to seed the envs as a job of each seed alone seeds them: the
    seed (env ``i`` gets ``seed + i``), or for several seeds, splitting the envs among them, one per env."""
    seeds = [seed] if isinstance(seed, int) else list(seed)
    if len(seeds) == 1:
        return seeds[0]
    return [s + i for s in seeds for i in range(num_envs // len(seeds))]


def _make_env(env_cfg: EnvConfig, kwargs: dict[str, Any]) -> gym.Env:
    """One env of the vector env: ``gym.make`` with ``kwargs``, wrapped by :func:`atari_wrappers` with ``env_cfg.atari``."""
    env = gym.make(env_cfg.id, **kwargs)
    return atari_wrappers(env, env_cfg) if env_cfg.atari else env


class SameStepSyncVectorEnv(gym.vector.SyncVectorEnv):
    """gymnasium's ``SyncVectorEnv`` with SAME_STEP autoreset, and a leaner ``step`` that returns the same
    (tested step by step): with cheap envs gymnasium's own loop is a large share of a step (docs/results/profiling.md).
    """

    def __init__(self, env_fns: Sequence[Callable[[], gym.Env]], copy: bool = True) -> None:
        super().__init__(env_fns, copy=copy, autoreset_mode=AutoresetMode.SAME_STEP)

    def close_extras(self, **kwargs: Any) -> None:
        super().close_extras(**kwargs)
        # let closed envs go: one reachable at exit (signals.skip_final_gc_at_exit) keeps ALE's emulator
        # alive, and ale-py then prints a screenful of "leaked" warnings
        self.envs = []

    def step(self, actions: Any) -> Any:
        env_obs, rewards, terminations, truncations = self._env_obs, self._rewards, self._terminations, self._truncations
        batch = self._observations
        rows = batch if isinstance(batch, np.ndarray) else None  # array observations: written row by row
        infos: dict[str, Any] = {}
        for i, (env, action) in enumerate(zip(self.envs, iterate(self.action_space, actions), strict=True)):
            obs, rewards[i], terminated, truncated, info = env.step(action)
            terminations[i], truncations[i] = terminated, truncated
            if terminated or truncated:
                infos = self._add_info(infos, {"final_obs": obs, "final_info": info}, i)
                obs, info = env.reset()
            env_obs[i] = obs  # also what a partial reset batches again
            if rows is not None:
                rows[i] = obs
            if info:
                infos = self._add_info(infos, info, i)
        if rows is None:
            self._observations = batch = concatenate(self.single_observation_space, env_obs, batch)
        if self.copy:
            batch = batch.copy() if rows is not None else deepcopy(batch)
        return batch, rewards.copy(), terminations.copy(), truncations.copy(), infos


class EpisodeStatistics(VectorWrapper):
    """Return and length of every episode that ends, in ``info["episode"]`` (``"r"``, ``"l"``) and
    ``info["_episode"]``, as gymnasium's ``RecordEpisodeStatistics`` gives them, for SAME_STEP
    autoreset only: a step where no episode ended costs two in-place additions.

    With ``game_key`` the episodes are whole games with raw scores, read from each env's
    ``final_info[game_key]`` (written by :class:`GameStatistics`).
    """

    def __init__(self, env: gym.vector.VectorEnv, game_key: str | None = None) -> None:
        super().__init__(env)
        self._game_key = game_key
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
        if "final_obs" in info and self._game_key is not None:
            final = info["final_info"]
            if self._game_key in final:
                mask = final[f"_{self._game_key}"]
                games = final[self._game_key]
                info["episode"] = {"r": np.where(mask, games[:, 0], 0.0), "l": np.where(mask, games[:, 1], 0).astype(np.int64)}
                info["_episode"] = mask
        elif "final_obs" in info:
            ended = terminated | truncated
            lengths = self._steps - self._started_at
            info["episode"] = {"r": np.where(ended, self._returns, 0.0), "l": np.where(ended, lengths, 0)}
            info["_episode"] = ended
            self._returns[ended] = 0.0
            self._started_at[ended] = self._steps
        return obs, rewards, terminated, truncated, info


def finished_episodes(info: dict[str, Any], by_env: bool = False) -> list[tuple[Any, ...]]:
    """(return, length) of every episode that ended in this vector step (gymnasium 1.x); with ``by_env``,
    (return, length, env index): a job that trains several seeds tells their episodes apart by it."""
    if "episode" not in info:
        return []
    ep = info["episode"]
    found = [(float(ep["r"][i]), int(ep["l"][i]), int(i)) for i in np.flatnonzero(info["_episode"])]
    return found if by_env else [f[:2] for f in found]


def evaluate(policy: Callable[[np.ndarray], np.ndarray], env_cfg: EnvConfig, episodes: int, seed: int) -> list[float]:
    """Returns of ``episodes`` episodes of the deterministic ``policy``, one per env, batched."""
    returns: list[float | None] = [None] * episodes
    with contextlib.closing(make_envs(env_cfg, episodes, seed)) as envs:
        obs, _ = envs.reset(seed=seed)
        while any(r is None for r in returns):
            obs, _, _, _, info = envs.step(policy(obs))
            for ret, _length, i in finished_episodes(info, by_env=True):
                if returns[i] is None:
                    returns[i] = ret
    return [float(r) for r in returns if r is not None]


# -- Atari -------------------------------------------------------------------------------------------

@functools.cache
def register_ale() -> None:
    """Register ale-py's environments (``ALE/Pong-v5``, ...) with gymnasium; its ROMs ship with it."""
    import ale_py

    gym.register_envs(ale_py)


def atari_errors(env_cfg: EnvConfig) -> list[str]:
    """Why ``env_cfg``'s Atari preprocessing cannot run (checked before launch); registers ALE's ids."""
    if not env_cfg.atari:
        return []
    errors = []
    try:
        register_ale()
        import cv2  # noqa: F401 - gymnasium's AtariPreprocessing resizes with it
    except ImportError as exc:
        errors.append(f"env.atari=true needs ale-py and opencv ({exc}): pip install -e '.[atari]'")
    errors += [f"env.{key} must be >= {low}, got {getattr(env_cfg, key)}"
               for key, low in (("frame_skip", 1), ("frame_stack", 1), ("noop_max", 0)) if getattr(env_cfg, key) < low]
    return errors + in_range_errors("env.repeat_action_probability", env_cfg.repeat_action_probability, 0, 1)


@functools.cache
def _observation_space(env_id: str, atari: bool, frame_stack: int) -> gym.Space:
    with contextlib.closing(make_envs(EnvConfig(id=env_id, atari=atari, frame_stack=frame_stack), 1, 0)) as envs:
        return envs.single_observation_space


def observation_space(env_cfg: EnvConfig) -> gym.Space:
    """One env's observation space under ``env_cfg`` (made once per id and preprocessing)."""
    return _observation_space(env_cfg.id, env_cfg.atari, env_cfg.frame_stack)


def atari_wrappers(env: gym.Env, env_cfg: EnvConfig) -> gym.Env:
    """The Atari preprocessing of CleanRL's ``ppo_atari.py``/``dqn_atari.py`` and SB3's ``AtariWrapper``:
    no-ops after a reset, max-pooled frame skip, 84x84 grey uint8 frames, whole games' raw scores,
    a lost life ending the training episode, FIRE after a reset, rewards clipped to their sign, frame stack.
    """
    from gymnasium.wrappers import AtariPreprocessing, FrameStackObservation, TransformReward

    env = AtariPreprocessing(env, noop_max=env_cfg.noop_max, frame_skip=env_cfg.frame_skip, screen_size=84,
                             terminal_on_life_loss=False, grayscale_obs=True, scale_obs=False)
    env = GameStatistics(env)
    if env_cfg.episodic_life:
        env = EpisodicLife(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireReset(env)
    if env_cfg.clip_rewards:
        env = TransformReward(env, np.sign)
    return FrameStackObservation(env, env_cfg.frame_stack)


class GameStatistics(gym.Wrapper):
    """``info[KEY] = (return, length)`` of a whole game when it ends: the raw score (it sits under the
    life and reward wrappers, where CleanRL's ``RecordEpisodeStatistics`` sits), agent steps."""

    KEY = "game"

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._return, self._length = 0.0, 0

    def reset(self, **kwargs: Any) -> Any:
        self._return, self._length = 0.0, 0
        return self.env.reset(**kwargs)

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._return += float(reward)
        self._length += 1
        if terminated or truncated:
            info = {**info, self.KEY: np.array([self._return, self._length], dtype=np.float64)}
        return obs, reward, terminated, truncated, info


class EpisodicLife(gym.Wrapper):
    """A lost life ends the episode (terminated) for training; a reset then continues the same game
    with a no-op step, and resets the emulator only after the game is over (SB3's EpisodicLifeEnv)."""

    def __init__(self, env: gym.Env) -> None:
        super().__init__(env)
        self._lives = 0
        self._game_over = True

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self._game_over = terminated or truncated
        lives = self.env.unwrapped.ale.lives()
        if 0 < lives < self._lives:
            terminated = True
        self._lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, **kwargs: Any) -> Any:
        if self._game_over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        self._game_over = False
        self._lives = self.env.unwrapped.ale.lives()
        return obs, info


class FireReset(gym.Wrapper):
    """Press FIRE (then action 2) after every reset, for games that wait for it (SB3's FireResetEnv)."""

    def reset(self, **kwargs: Any) -> Any:
        self.env.reset(**kwargs)
        for action in (1, 2):
            obs, _, terminated, truncated, info = self.env.step(action)
            if terminated or truncated:
                obs, info = self.env.reset(**kwargs)
        return obs, info
