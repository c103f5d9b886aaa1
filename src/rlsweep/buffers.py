"""A host-memory replay buffer (numpy), sampled with its own seeded generator.

Replay lives on the host on purpose: buffers outgrow device memory, and the host->device copy
of every sampled batch is exactly where ``pin_memory``/``non_blocking`` act.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class ReplayBuffer:
    def __init__(
        self,
        capacity: int,
        num_envs: int,
        obs_shape: tuple[int, ...],
        action_shape: tuple[int, ...],
        action_dtype: type | np.dtype,
        seed: int,
    ) -> None:
        self.capacity = max(1, capacity // num_envs) * num_envs
        self.obs = np.zeros((self.capacity, *obs_shape), dtype=np.float32)
        self.next_obs = np.zeros((self.capacity, *obs_shape), dtype=np.float32)
        self.actions = np.zeros((self.capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.pos = 0
        self.full = False
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.capacity if self.full else self.pos

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray) -> None:
        """Store one vector step (one transition per env)."""
        n = len(obs)
        sl = slice(self.pos, self.pos + n)
        self.obs[sl] = obs
        self.actions[sl] = actions
        self.rewards[sl] = rewards
        self.next_obs[sl] = next_obs
        self.terminated[sl] = terminated
        self.pos += n
        if self.pos >= self.capacity:
            self.full, self.pos = True, 0

    def sample(self, batch_size: int, num_batches: int | None = None) -> dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement; with ``num_batches``, that many
        independent batches stacked on a leading axis, drawn at once (one index draw and one gather
        per field instead of one per batch: ``rng.integers`` alone costs ~10 us a call)."""
        size = batch_size if num_batches is None else (num_batches, batch_size)
        idx = self.rng.integers(0, len(self), size=size)
        return {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx],
            "terminated": self.terminated[idx],
        }

    def state_dict(self) -> dict[str, Any]:
        n = len(self)
        return {
            "obs": self.obs[:n].copy(), "next_obs": self.next_obs[:n].copy(), "actions": self.actions[:n].copy(),
            "rewards": self.rewards[:n].copy(), "terminated": self.terminated[:n].copy(),
            "pos": self.pos, "full": self.full, "rng": self.rng.bit_generator.state,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = len(state["rewards"])
        for key in ("obs", "next_obs", "actions", "rewards", "terminated"):
            getattr(self, key)[:n] = state[key]
        self.pos, self.full = state["pos"], state["full"]
        self.rng.bit_generator.state = state["rng"]
