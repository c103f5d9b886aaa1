"""A host-memory replay buffer (numpy), sampled with its own seeded generator.

Replay lives on the host: buffers outgrow device memory, and each sampled batch's copy is where
``pin_memory``/``non_blocking`` act. Observations keep their dtype (Atari frames stay uint8). With
``store_next_obs=False`` each is stored once: a transition's next observation is the one stored a
vector step later for the same env, except where an episode ended (kept apart) and for the latest
step. Sampling returns what the full buffer would, at half the memory (docs/guide/atari.md).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


class ReplayBuffer:
    """One seed's replay of transitions from ``num_envs`` envs, in numpy, sampled uniformly with replacement
    from its own generator."""

    def __init__(self, capacity: int, num_envs: int, obs_shape: tuple[int, ...], action_shape: tuple[int, ...],
                 action_dtype: type | np.dtype, seed: int, obs_dtype: type | np.dtype = np.float32,
                 store_next_obs: bool = True) -> None:
        self.capacity = max(1, capacity // num_envs) * num_envs
        self.num_envs = num_envs
        self.store_next_obs = store_next_obs
        self.obs = np.zeros((self.capacity, *obs_shape), dtype=obs_dtype)
        # next_obs: a full array, or only the slots whose episode ended there (store_next_obs=False)
        self.next_obs = np.zeros((self.capacity if store_next_obs else 0, *obs_shape), dtype=obs_dtype)
        self.final_obs: dict[int, np.ndarray] = {}
        self.pending_next = np.zeros((num_envs, *obs_shape), dtype=obs_dtype)  # the latest step's next obs
        self.actions = np.zeros((self.capacity, *action_shape), dtype=action_dtype)
        self.rewards = np.zeros(self.capacity, dtype=np.float32)
        self.terminated = np.zeros(self.capacity, dtype=np.float32)
        self.pos = 0
        self.full = False
        self.rng = np.random.default_rng(seed)

    def __len__(self) -> int:
        return self.capacity if self.full else self.pos

    def nbytes(self) -> int:
        """Host memory the stored transitions take (arrays allocated up front, plus kept last observations)."""
        arrays = (self.obs, self.next_obs, self.pending_next, self.actions, self.rewards, self.terminated)
        return sum(a.nbytes for a in arrays) + sum(o.nbytes for o in self.final_obs.values())

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray) -> None:
        """Store one vector step (one transition per env)."""
        n = len(obs)
        sl = slice(self.pos, self.pos + n)
        if not self.store_next_obs:
            if len(self) > 0:
                # the previous step's next obs is this step's obs, unless that env's episode ended
                prev = (self.pos - n) % self.capacity
                ended = np.flatnonzero((self.pending_next != obs).reshape(n, -1).any(axis=1))
                for i in ended:
                    self.final_obs[prev + i] = self.pending_next[i].copy()
            for slot in range(self.pos, self.pos + n):  # overwritten transitions drop their last obs
                self.final_obs.pop(slot, None)
            self.pending_next[:] = next_obs
        else:
            self.next_obs[sl] = next_obs
        self.obs[sl] = obs
        self.actions[sl] = actions
        self.rewards[sl] = rewards
        self.terminated[sl] = terminated
        self.pos += n
        if self.pos >= self.capacity:
            self.full, self.pos = True, 0

    def sample(self, batch_size: int, num_batches: int | None = None) -> dict[str, np.ndarray]:
        """``batch_size`` transitions drawn uniformly with replacement; with ``num_batches``, that many
        batches stacked on a leading axis, drawn at once (one index draw and one gather per field)."""
        size = batch_size if num_batches is None else (num_batches, batch_size)
        idx = self.rng.integers(0, len(self), size=size)
        return {
            "obs": self.obs[idx],
            "actions": self.actions[idx],
            "rewards": self.rewards[idx],
            "next_obs": self.next_obs[idx] if self.store_next_obs else self._next_of(idx),
            "terminated": self.terminated[idx],
        }

    def _next_of(self, idx: np.ndarray) -> np.ndarray:
        """Next observations of slots ``idx`` when each observation is stored once."""
        n = self.num_envs
        out = self.obs[(idx + n) % self.capacity]
        latest = (self.pos - n) % self.capacity
        flat_idx, flat_out = idx.reshape(-1), out.reshape(-1, *self.obs.shape[1:])
        for k in np.flatnonzero((flat_idx >= latest) & (flat_idx < latest + n)):
            flat_out[k] = self.pending_next[flat_idx[k] - latest]
        if self.final_obs:
            for k, slot in enumerate(flat_idx.tolist()):
                final = self.final_obs.get(slot)
                if final is not None:
                    flat_out[k] = final
        return out

    def _stored_arrays(self) -> tuple[str, ...]:
        """The per-transition arrays a checkpoint keeps (their filled rows)."""
        return ("obs", "actions", "rewards", "terminated", *(("next_obs",) if self.store_next_obs else ()))

    def state_dict(self) -> dict[str, Any]:
        n = len(self)
        state = {k: getattr(self, k)[:n].copy() for k in self._stored_arrays()}
        state.update(pos=self.pos, full=self.full, rng=self.rng.bit_generator.state)
        if not self.store_next_obs:
            state["final_obs"] = {k: v.copy() for k, v in self.final_obs.items()}
            state["pending_next"] = self.pending_next.copy()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        n = len(state["rewards"])
        for key in self._stored_arrays():
            getattr(self, key)[:n] = state[key]
        if not self.store_next_obs:
            self.final_obs = {int(k): v.copy() for k, v in state["final_obs"].items()}
            self.pending_next[:] = state["pending_next"]
        self.pos, self.full = state["pos"], state["full"]
        self.rng.bit_generator.state = state["rng"]


class SeedBuffers:
    """One :class:`ReplayBuffer` per seed of a job that trains several (``seeds_per_job``): ``add`` splits
    the envs seed by seed, ``sample`` stacks each seed's batches on a new leading axis."""

    def __init__(self, buffers: Sequence[ReplayBuffer]) -> None:
        self.buffers = list(buffers)

    def __len__(self) -> int:
        return len(self.buffers[0])  # every seed stores one vector step at a time

    def add(self, obs: np.ndarray, actions: np.ndarray, rewards: np.ndarray, next_obs: np.ndarray,
            terminated: np.ndarray) -> None:
        parts = [np.split(x, len(self.buffers)) for x in (obs, actions, rewards, next_obs, terminated)]
        for buffer, seed_parts in zip(self.buffers, zip(*parts, strict=True), strict=True):
            buffer.add(*seed_parts)

    def sample(self, batch_size: int, num_batches: int | None = None) -> dict[str, np.ndarray]:
        samples = [b.sample(batch_size, num_batches) for b in self.buffers]
        return {k: np.stack([s[k] for s in samples]) for k in samples[0]}

    def state_dict(self) -> dict[str, Any]:
        return {"seeds": [b.state_dict() for b in self.buffers]}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for buffer, seed_state in zip(self.buffers, state["seeds"], strict=True):
            buffer.load_state_dict(seed_state)


def replay_buffer(seeds: Sequence[int], capacity: int, num_envs: int, *args: Any, **kwargs: Any
                  ) -> ReplayBuffer | SeedBuffers:
    """A replay buffer of ``num_envs`` envs per seed, sampled with each seed's own generator: a
    :class:`ReplayBuffer` for one seed, :class:`SeedBuffers` for several (``rt.seed_values``)."""
    buffers = [ReplayBuffer(capacity, num_envs, *args, seed=seed, **kwargs) for seed in seeds]
    return buffers[0] if len(buffers) == 1 else SeedBuffers(buffers)
