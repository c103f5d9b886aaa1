"""DQN: epsilon-greedy Q-learning from a replay buffer, with a target network and Huber loss.

The math. A Q-network ``Q(s, .)`` and its slowly updated copy ``Q'``:

- acting: uniformly random actions for the first ``learning_starts`` env steps, then the greedy action
  ``argmax_a Q(s, a)``, or with probability epsilon (decaying linearly over ``exploration_fraction`` of
  the budget) a uniformly random one;
- TD target: ``y = r + gamma * (1 - terminated) * Q'(s', a')``, with ``a' = argmax Q(s', .)``
  (Double DQN) or ``argmax Q'(s', .)``;
- loss: Huber(``Q(s, a) - y``); every ``train_freq`` env steps, ``gradient_steps`` Adam steps
  with the gradients' global norm clipped to ``max_grad_norm``;
- every ``target_update_interval`` env steps ``Q' <- Q' + tau (Q - Q')`` (tau = 1: a copy).

Semantics follow Stable-Baselines3, so its hyper-parameters mean the same here. Image observations
get the Nature-DQN CNN (``algo.encoder``), as uint8 frames up to the device. A training burst
samples and copies its batches at once, and runs the (unchanging) target network once for them all.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlsweep.algos.base import Algorithm
from rlsweep.buffers import replay_buffer
from rlsweep.config import DQNConfig, TrainConfig, choice_errors, hyper_parameter_errors
from rlsweep.nets import INITS, NatureCNN, encoder_errors, mlp, uses_cnn
from rlsweep.runtime import Runtime
from rlsweep.timing import PhaseTimer

_TARGET_CHUNK_ROWS = 512


class DQN(Algorithm):
    """DQN (Mnih et al., 2015) with optional double Q (van Hasselt et al., 2016): see the module's docstring."""

    name = "dqn"
    config_class = DQNConfig
    action_spaces = (gym.spaces.Discrete,)
    seeds_together = True

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        return super().validate_config(cfg) + hyper_parameter_errors(
            cfg.algo, positive=("batch_size", "buffer_size", "train_freq", "gradient_steps", "max_grad_norm",
                                "target_update_interval"), factor=("tau",),
            probability=("exploration_fraction", "start_eps", "end_eps"), non_negative=("learning_starts",),
        ) + encoder_errors(cfg.algo.encoder, cfg.env) + choice_errors("algo.init", cfg.algo.init, INITS)

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: DQNConfig = cfg.algo  # type: ignore[assignment]
        obs_space = envs.single_observation_space
        self.obs_dim = int(np.prod(obs_space.shape))
        self.n_actions = int(envs.single_action_space.n)
        self.cnn = uses_cnn(a.encoder, obs_space.shape, obs_space.dtype)
        # frames cross to the device as uint8 (a quarter of float32's bytes); the CNN scales them there
        self.obs_dtype = torch.uint8 if self.cnn else torch.float32
        self.obs_shape = tuple(obs_space.shape)
        self.q, self.q_target = rt.per_seed(self._q_networks)
        self.q_target.requires_grad_(False)
        self.lr = torch.tensor(a.lr, device=self.device)  # a tensor: annealing changes a value, not the compiled graph
        self.optimizer = torch.optim.Adam(self.q.parameters(), lr=self.lr)
        self.policy = rt.policy(timer, self.q, obs_dtype=self.obs_dtype)  # Q-values; the argmax is taken on the host
        self.update = rt.update(self._update_step, self.modules(), self.optimizers())

        # one per seed (seeds_per_job), each sampled with its seed's own generator
        stored_once = {"obs_dtype": np.uint8, "store_next_obs": False} if self.cnn else {}  # uint8 frames, once
        self.buffer = replay_buffer(rt.seed_values, a.buffer_size, a.num_envs, obs_space.shape, (), np.int64,
                                    **stored_once)
        self.rngs = [np.random.default_rng(seed) for seed in rt.seed_values]  # exploration, per seed
        self.next_obs, _ = envs.reset(seed=self.reset_seed)
        self.total_env_steps = cfg.total_env_steps
        self._target_every = max(1, a.target_update_interval // a.num_envs)
        self._vector_steps = 0
        self._target_synced_at_update = 0  # self.updates when the target last became a copy of q

    def _q_networks(self) -> tuple[nn.Module, nn.Module]:
        """The Q-network and its target, a copy (one seed's: ``rt.per_seed`` builds them per seed)."""
        q, target = self._q_network(), self._q_network()
        target.load_state_dict(q.state_dict())
        return q, target

    def _q_network(self) -> nn.Module:
        a, rt = self.a, self.rt
        if self.cnn:
            cnn = NatureCNN(self.obs_shape, rt)
            return nn.Sequential(cnn, mlp(cnn.features, [], self.n_actions, rt, a.activation)).to(self.device)
        return mlp(self.obs_dim, a.hidden_sizes, self.n_actions, rt, a.activation, init=a.init).to(self.device)

    @property
    def iteration_env_steps(self) -> int:
        return max(1, self.a.train_freq // self.a.num_envs) * self.a.num_envs

    def epsilon(self) -> float:
        a = self.a
        span = max(1.0, a.exploration_fraction * self.total_env_steps)
        frac = min(1.0, self.env_steps / span)
        return a.start_eps + frac * (a.end_eps - a.start_eps)

    # -- the loss -------------------------------------------------------------------------------------
    @torch.no_grad()
    def _td_target(self, rewards: torch.Tensor, next_obs: torch.Tensor, next_q_target: torch.Tensor,
                   terminated: torch.Tensor) -> torch.Tensor:
        """r + gamma * (1 - terminated) * Q_target(s', a'): a' the online net's argmax (double Q) or the target's."""
        a = self.a
        with self.rt.autocast():
            if a.double_q:
                best = self.q(next_obs).argmax(-1, keepdim=True)
                next_q = next_q_target.gather(-1, best).squeeze(-1)
            else:
                next_q = next_q_target.max(-1).values
            return rewards + a.gamma * (1.0 - terminated) * next_q

    def _td_loss(self, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with self.rt.autocast():
            q_taken = self.q(obs).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return nn.functional.smooth_l1_loss(q_taken, target)

    def _update_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
                       next_q_target: torch.Tensor, terminated: torch.Tensor) -> torch.Tensor:
        target = self._td_target(rewards, next_obs, next_q_target, terminated)
        return self.rt.minimize(lambda: self._td_loss(obs, actions, target), self.optimizer,
                                max_grad_norm=self.a.max_grad_norm)

    # -- acting ----------------------------------------------------------------------------------------
    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.rt.d2h(self.q(self.rt.h2d(obs, self.obs_dtype)).argmax(-1))

    # -- one iteration -------------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a, timer = self.a, self.timer
        next_obs = self.next_obs
        for _ in range(self.iteration_env_steps // a.num_envs):
            # until learning starts, uniformly random actions (SB3's warm-up), then epsilon-greedy
            eps = self.epsilon() if self.env_steps >= a.learning_starts else 1.0
            # each seed's envs in turn, from the seed's own generator
            explore = np.concatenate([rng.random(a.num_envs) < eps for rng in self.rngs])
            random_actions = np.concatenate([rng.integers(0, self.n_actions, size=a.num_envs) for rng in self.rngs])
            if explore.all():  # no forward needed: every env takes a random action
                actions = random_actions
            else:
                actions = np.where(explore, random_actions, self.policy(next_obs).argmax(-1))

            next_obs = self.step_and_store(next_obs, actions, self.buffer)
            self._vector_steps += 1
            if self._vector_steps % self._target_every == 0:
                self._update_target()
        self.next_obs = next_obs

        if self.env_steps < a.learning_starts or len(self.buffer) < a.batch_size:
            return {"epsilon": self.epsilon(), "updated": 0.0}
        if a.anneal_lr:
            # decay by the steps before this iteration, so the last burst still has lr > 0: Adam
            # with a tensor lr divides by it when compiled, and lr == 0 turns its step into NaN
            done_before = self.env_steps - self.iteration_env_steps
            self.lr.fill_(a.lr * max(1e-3, 1.0 - done_before / self.total_env_steps))
        losses = []
        # (gradient steps, batch, ...), with the seeds first when several: each step's batches are
        # then one (seeds, batch, ...) argument of the step, vmapped over the seeds
        batches = self.buffer.sample(a.batch_size, a.gradient_steps)
        dev = self.to_device(batches, self.obs_dtype)
        step_dim = 0 if self.rt.seeds == 1 else 1
        t = timer.start()
        next_q_target = self._next_q_target(dev["next_obs"], step_dim)
        timer.stop("update", t)
        steps = zip(*(x.unbind(step_dim) for x in (dev["obs"], dev["actions"], dev["rewards"], dev["next_obs"],
                                                     next_q_target, dev["terminated"])), strict=True)
        for obs, actions, rewards, next_obs_b, next_q, terminated in steps:
            t = timer.start()
            losses.append(self.update(obs, actions, rewards, next_obs_b, next_q, terminated))
            timer.stop("update", t)
            self.updates += 1
        loss = torch.stack(losses)
        self.rt.check_finite(loss, self.updates)
        return {"loss": loss.mean(0).tolist(), "epsilon": self.epsilon(), "lr": float(self.lr), "updated": 1.0}

    def _update_target(self) -> None:
        if self.a.tau < 1.0 or self._target_synced_at_update != self.updates:
            self.rt.polyak_update(self.q_target.parameters(), self.q.parameters(), self.a.tau)
            self._target_synced_at_update = self.updates

    @torch.no_grad()
    def _next_q_target(self, next_obs: torch.Tensor, step_dim: int) -> torch.Tensor:
        """The target network's Q-values of a whole burst's next observations, in chunks of whole steps'
        batches of ~512 rows per seed: activations stay in cache (docs/results/profiling.md)."""
        batch = next_obs.shape[step_dim + 1]
        parts = next_obs.split(max(1, _TARGET_CHUNK_ROWS // batch), dim=step_dim)
        with self.rt.autocast():
            q = [self.q_target(p.reshape(-1, *self.obs_shape)).unflatten(0, p.shape[:step_dim + 2]) for p in parts]
        return torch.cat(q, dim=step_dim)

    # -- state -----------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"q": self.q, "q_target": self.q_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {**self.replay_state(), "vector_steps": self._vector_steps}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.load_replay_state(state)
        self._vector_steps = state["vector_steps"]
        self._target_synced_at_update = -1  # unknown: the next target update copies

