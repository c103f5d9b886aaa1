"""What the training runner needs from an algorithm."""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import torch

from rlsweep.buffers import ReplayBuffer
from rlsweep.config import ACTIVATIONS, AlgoConfig, TrainConfig, choice_errors, hyper_parameter_errors, positive_errors
from rlsweep.envs import env_seeds, finished_episodes
from rlsweep.runtime import Runtime
from rlsweep.timing import PhaseTimer


class Algorithm(ABC):
    """One RL algorithm. The runner calls :meth:`iteration` until the budget is spent.

    An iteration collects a fixed number of env steps and performs the updates that belong to
    them; its size is fixed so steady-state iterations are comparable.
    """

    #: short name for run names, tags and the report (a config's ``algo.name`` may override it)
    name: ClassVar[str]
    #: the hyper-parameters' schema: a dataclass subclassing :class:`~rlsweep.config.AlgoConfig`
    config_class: ClassVar[type[AlgoConfig]] = AlgoConfig
    #: gymnasium action-space classes the algorithm can drive
    action_spaces: ClassVar[tuple[type[gym.Space], ...]]
    #: whether it can train several seeds in one process (``seeds_per_job > 1``): it builds its networks
    #: with ``rt.per_seed``, draws its random numbers with ``rt.draw``, treats ``envs`` as every seed's
    #: envs one seed after another, and hands ``rt.update`` each seed's batch (``rt.by_seed``)
    seeds_together: ClassVar[bool] = False

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        self.cfg = cfg
        self.a = cfg.algo  # the hyper-parameters: an instance of the class's config_class
        self.envs = envs
        self.rt = rt
        self.timer = timer
        self.device = rt.device
        self.env_steps = 0  # of one seed: every seed a job trains together steps as many
        self.updates = 0  # calls of the update(s) made with rt.update: the record's `updates`
        #: (return, length, env_steps at its end, index of its seed in rt.seed_values)
        self.episodes: list[tuple[float, int, int, int]] = []

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        """Every reason ``cfg.algo`` cannot run, one message each (checked for every job before launch).

        This one checks the hyper-parameters every algorithm has (:class:`~rlsweep.config.AlgoConfig`);
        an algorithm checks its own in an override that adds to it: ``super().validate_config(cfg) +
        hyper_parameter_errors(cfg.algo, positive=("batch_size",), ...)``.
        """
        a = cfg.algo
        errors = choice_errors("algo.activation", a.activation, ACTIVATIONS)
        errors += hyper_parameter_errors(a, positive=("lr",)) + positive_errors("algo.num_envs", a.num_envs, 4096)
        errors += hyper_parameter_errors(a, factor=("gamma",))
        if not a.hidden_sizes or any(w <= 0 for w in a.hidden_sizes):
            errors.append(f"algo.hidden_sizes must be a non-empty list of positive widths, got {list(a.hidden_sizes)}")
        return errors

    @property
    @abstractmethod
    def iteration_env_steps(self) -> int:
        """Env steps (over all envs) one iteration collects."""

    def num_iterations(self, total_env_steps: int) -> int:
        """Iterations that run at least ``total_env_steps`` env steps: the budget is met, never cut short
        by a partial iteration (as Stable-Baselines3 runs it); the record says how many ran (``env_steps``)."""
        return max(1, -(-total_env_steps // self.iteration_env_steps))

    @abstractmethod
    def iteration(self) -> dict[str, float]:
        """Collect ``iteration_env_steps`` steps and update; return scalar training metrics, ``updated``
        (1.0 when the iteration made gradient steps) among them."""

    @abstractmethod
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """Greedy / mean action for evaluation."""

    @abstractmethod
    def modules(self) -> dict[str, torch.nn.Module]:
        """Named networks (for checkpoints and parameter comparisons)."""

    @abstractmethod
    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        """Named optimizers (for checkpoints)."""

    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific state beyond modules and optimizers (buffers, schedules)."""
        return {}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`extra_state` returned."""

    def replay_state(self) -> dict[str, Any]:
        """An off-policy algorithm's :meth:`extra_state`: ``self.buffer``, the exploration generators
        ``self.rngs`` (numpy, one per seed) and ``self.next_obs``."""
        return {"buffer": self.buffer.state_dict(), "rngs": [rng.bit_generator.state for rng in self.rngs],
                "next_obs": self.next_obs}

    def load_replay_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        for rng, rng_state in zip(self.rngs, state["rngs"] if "rngs" in state else [state["rng"]], strict=True):
            rng.bit_generator.state = rng_state
        self.next_obs = state["next_obs"]

    def record_episodes(self, finished: list[tuple[Any, ...]]) -> None:
        """Note episodes that ended now: ``finished_episodes(info)``'s ``(return, length)`` pairs, or with
        ``by_env=True`` (which several seeds need) ``(return, length, env index)``."""
        per_seed = self.envs.num_envs // self.rt.seeds
        for ret, length, *env in finished:
            self.episodes.append((ret, length, self.env_steps, env[0] // per_seed if env else 0))

    @property
    def reset_seed(self) -> int | list[int]:
        """What ``envs.reset(seed=...)`` takes to seed every env as a job of its seed alone seeds them."""
        return env_seeds(self.rt.seed_values, self.envs.num_envs)

    def to_device(self, batch: dict[str, np.ndarray], obs_dtype: torch.dtype | None = None) -> dict[str, torch.Tensor]:
        """A replay batch's fields copied to the device (``rt.h2d``), timed as "h2d"; ``obs_dtype`` converts
        the observation fields (those ending in ``obs``)."""
        t = self.timer.start()
        out = {k: self.rt.h2d(v, obs_dtype if k.endswith("obs") else None) for k, v in batch.items()}
        self.timer.stop("h2d", t)
        return out

    def step_and_store(self, obs: np.ndarray, actions: np.ndarray, buffer: ReplayBuffer) -> np.ndarray:
        """The off-policy collection step: step the envs with ``actions`` taken in ``obs`` (timed "env_step"),
        store each env's transition with its real next observation (``info["final_obs"]`` where an
        episode ended), count it; returns the observation to act on next."""
        t = self.timer.start()
        obs_after, reward, terminated, truncated, info = self.envs.step(actions)
        self.timer.stop("env_step", t)
        real_next = obs_after
        ended = np.flatnonzero(terminated | truncated)
        if len(ended):
            real_next = obs_after.copy()
            for i in ended:
                real_next[i] = info["final_obs"][i]
        buffer.add(obs, actions, reward, real_next, terminated)
        self.env_steps += len(actions) // self.rt.seeds
        self.record_episodes(finished_episodes(info, by_env=True))
        return obs_after


def seeds_together_refusal(cls: type[Algorithm]) -> str:
    """Why ``cls`` cannot train several seeds in one process (the pre-flight and the runner say it alike)."""
    return (f"seeds_per_job > 1: {cls.__name__} cannot train several seeds together: it does not set "
            "seeds_together = True (an algorithm written for it builds its networks with rt.per_seed and draws "
            "its random numbers with rt.draw; docs/guide/seeds.md); use seeds_per_job=1")
