"""TD3: Twin Delayed DDPG (Fujimoto et al., 2018), written only against ``rlsweep.api``.

It reads like CleanRL's ``td3_continuous_action.py``; rlsweep adds the toggles and the timers.

The math. A deterministic actor ``mu(s) = bias + scale * tanh(MLP(s))`` acts inside the action
box; twin critics ``Q1``, ``Q2``; slowly moving copies of all three (``mu'``, ``Q1'``, ``Q2'``).

- acting:  ``a = clip(mu(s) + scale * exploration_noise * eps, low, high)``, ``eps ~ N(0, I)``;
  uniformly random actions for the first ``learning_starts`` env steps;
- target policy smoothing:  ``a' = clip(mu'(s') + scale * clip(policy_noise * eps', -noise_clip,
  noise_clip), low, high)``;
- clipped double Q:  ``y = r + gamma * (1 - terminated) * min(Q1'(s', a'), Q2'(s', a'))``;
- critic loss:  ``mean((Q1(s, a) - y)^2) + mean((Q2(s, a) - y)^2)``, one Adam step per env step;
- delayed policy update, every ``policy_frequency`` gradient steps:  actor loss
  ``-mean(Q1(s, mu(s)))``, one Adam step, then every target moves toward its network:
  ``theta' <- theta' + tau * (theta - theta')`` (Polyak).

rlsweep's toggles act through the runtime ``rt``, as in the built-ins: the networks are
``mlp(...)`` (``inplace``, ``dtype``); acting goes through ``rt.policy`` (copies, ``twin_modules``,
compiled as "act"); each gradient step through ``rt.update`` and ``rt.minimize`` (one graph per
step under ``compile``, float16's GradScaler); losses run under ``rt.autocast()``; the targets move
with ``rt.polyak_update`` (``inplace``). Noise is drawn eagerly from torch's seeded generator and
passed into the (possibly compiled) functions, so compiled and eager runs use the same numbers.

    python -m sweeps.train --config-dir examples/td3/conf algo=td3
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlsweep.api import (
    AlgoConfig,
    Algorithm,
    PhaseTimer,
    Runtime,
    TrainConfig,
    hyper_parameter_errors,
    mlp,
    replay_buffer,
)


@dataclass
class TD3Config(AlgoConfig):
    """CleanRL's TD3 hyper-parameters, scaled to learn Pendulum-v1 in 20k env steps."""

    _target_: str = "examples.td3.td3.TD3"  # the Algorithm class this config builds
    name: Optional[str] = "td3"  # noqa: UP045 - OmegaConf reads the annotation: Optional, not X | None
    lr: float = 1e-3  # Adam learning rate of actor and critics (CleanRL: 3e-4)
    gamma: float = 0.99  # discount factor
    num_envs: int = 1  # environments stepped together
    hidden_sizes: list[int] = field(default_factory=lambda: [128, 128])  # MLP widths (CleanRL: 256x256)
    activation: str = "relu"  # hidden activation
    buffer_size: int = 1_000_000  # replay capacity in transitions
    batch_size: int = 256  # replay samples per gradient step
    learning_starts: int = 1_000  # env steps of uniformly random actions before learning (CleanRL: 25e3)
    steps_per_iteration: int = 250  # env steps per iteration (timing and logging granularity)
    tau: float = 0.005  # Polyak factor of the target networks
    policy_noise: float = 0.2  # std of the target policy smoothing noise, in units of the action scale
    noise_clip: float = 0.5  # the smoothing noise is clipped to +-noise_clip (same units)
    exploration_noise: float = 0.1  # std of the acting noise, in units of the action scale
    policy_frequency: int = 2  # gradient steps per delayed actor + target update


class Actor(nn.Module):
    """mu(s) = bias + scale * tanh(MLP(s)): a deterministic action inside the box [low, high]."""

    def __init__(self, obs_dim: int, act_dim: int, a: TD3Config, rt: Runtime, low: np.ndarray,
                 high: np.ndarray) -> None:
        super().__init__()
        self.net = mlp(obs_dim, a.hidden_sizes, act_dim, rt, a.activation)
        self.register_buffer("scale", torch.as_tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("bias", torch.as_tensor((high + low) / 2.0, dtype=torch.float32))
        self.register_buffer("low", torch.as_tensor(low, dtype=torch.float32))
        self.register_buffer("high", torch.as_tensor(high, dtype=torch.float32))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs)) * self.scale + self.bias

    def clip(self, action: torch.Tensor) -> torch.Tensor:
        return action.clamp(self.low, self.high)


class QNetwork(nn.Module):
    """Q(s, a) from the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, a: TD3Config, rt: Runtime) -> None:
        super().__init__()
        self.net = mlp(obs_dim + act_dim, a.hidden_sizes, 1, rt, a.activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1)


class TD3(Algorithm):
    """TD3 for continuous actions, written only against ``rlsweep.api``: see the module's docstring."""

    name = "td3"
    config_class = TD3Config
    action_spaces = (gym.spaces.Box,)
    # several seeds in one process (seeds_per_job): networks from rt.per_seed, random numbers from
    # rt.draw and each seed's own generators, the envs of every seed one seed after another
    seeds_together = True

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        """TD3's range checks, before any job runs (the base class checks lr, gamma, hidden_sizes, ...)."""
        errors = super().validate_config(cfg) + hyper_parameter_errors(
            cfg.algo, positive=("batch_size", "buffer_size", "steps_per_iteration"), factor=("tau",),
            non_negative=("learning_starts", "policy_noise", "noise_clip", "exploration_noise"))
        if cfg.algo.policy_frequency < 1:
            errors.append(f"algo.policy_frequency must be >= 1, got {cfg.algo.policy_frequency}")
        return errors

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: TD3Config = cfg.algo  # type: ignore[assignment]
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        self.obs_dim, self.act_dim = int(np.prod(obs_space.shape)), int(np.prod(act_space.shape))
        self.low, self.high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)

        # networks and their targets, built once per seed; optimizers
        self.actor, self.q1, self.q2, self.actor_target, self.q1_target, self.q2_target = rt.per_seed(self._networks)
        for target in (self.actor_target, self.q1_target, self.q2_target):
            target.requires_grad_(False)
        self.params = [*self.actor.parameters(), *self.q1.parameters(), *self.q2.parameters()]
        self.target_params = [*self.actor_target.parameters(), *self.q1_target.parameters(),
                              *self.q2_target.parameters()]
        self.critic_opt = torch.optim.Adam([*self.q1.parameters(), *self.q2.parameters()], lr=a.lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=a.lr)

        # acting and the two gradient steps, taken by the runtime as the toggles say
        self.policy = rt.policy(timer, self.actor, forward=self._act)
        self.critic_update = rt.update(self._critic_step, self.modules(), self.optimizers())
        self.actor_update = rt.update(self._actor_step, self.modules(), self.optimizers())

        self.buffer = replay_buffer(rt.seed_values, a.buffer_size, a.num_envs, obs_space.shape, act_space.shape,
                                    np.float32)
        self.rngs = [np.random.default_rng(seed) for seed in rt.seed_values]  # random actions before learning_starts
        self.next_obs, _ = envs.reset(seed=self.reset_seed)

    def _networks(self) -> tuple[nn.Module, ...]:
        """Actor, critics and their targets (copies), for one seed."""
        a, rt, dev = self.a, self.rt, self.device
        actor = Actor(self.obs_dim, self.act_dim, a, rt, self.low, self.high).to(dev)
        q1, q2 = (QNetwork(self.obs_dim, self.act_dim, a, rt).to(dev) for _ in range(2))
        targets = (Actor(self.obs_dim, self.act_dim, a, rt, self.low, self.high).to(dev),
                   *(QNetwork(self.obs_dim, self.act_dim, a, rt).to(dev) for _ in range(2)))
        for target, net in zip(targets, (actor, q1, q2), strict=True):
            target.load_state_dict(net.state_dict())
        return actor, q1, q2, *targets

    @property
    def iteration_env_steps(self) -> int:
        return max(1, self.a.steps_per_iteration // self.a.num_envs) * self.a.num_envs

    # -- acting --------------------------------------------------------------------------------
    def _act(self, actor: Actor, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Exploration action for ``obs``, with the given standard-normal ``noise``."""
        return actor.clip(actor(obs) + noise * (self.a.exploration_noise * actor.scale))

    def _acting_noise(self, generator: torch.Generator) -> torch.Tensor:
        """One seed's standard-normal acting noise, a row per env, from the seed's own stream."""
        return torch.randn((self.a.num_envs, self.act_dim), device=self.device, generator=generator)

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.actor(torch.as_tensor(obs, dtype=torch.float32, device=self.device)).cpu().numpy()

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a = self.a
        next_obs = self.next_obs
        critic_losses: list[torch.Tensor] = []
        actor_losses: list[torch.Tensor] = []
        for _ in range(self.iteration_env_steps // a.num_envs):
            if self.env_steps < a.learning_starts:
                actions = np.concatenate([rng.uniform(self.low, self.high, size=(a.num_envs, self.act_dim))
                                          for rng in self.rngs]).astype(np.float32)
            else:
                actions = self.policy(next_obs, self.rt.draw(self._acting_noise))

            next_obs = self.step_and_store(next_obs, actions, self.buffer)  # timed as env_step

            if self.env_steps >= a.learning_starts:
                critic_loss, actor_loss = self._gradient_step()
                critic_losses.append(critic_loss)
                if actor_loss is not None:
                    actor_losses.append(actor_loss)
        self.next_obs = next_obs

        if not critic_losses:
            return {"updated": 0.0}
        stats = [torch.stack(critic_losses)] + ([torch.stack(actor_losses)] if actor_losses else [])
        self.rt.check_finite(torch.cat(stats), self.updates)  # the iteration's one host sync (+ the means below)
        means = torch.stack([s.mean(0) for s in stats]).tolist()  # a value per loss, or one per seed
        metrics = {"critic_loss": means[0], "updated": 1.0}
        if actor_losses:
            metrics["actor_loss"] = means[1]
        return metrics

    def _gradient_step(self) -> tuple[torch.Tensor, torch.Tensor | None]:
        a, timer = self.a, self.timer
        batch = self.buffer.sample(a.batch_size)
        shape = (a.batch_size, self.act_dim)  # target policy smoothing noise, each seed's own
        noise = self.rt.draw_per_seed(lambda g: torch.randn(shape, generator=g, device=self.device))
        policy_step = self.updates % a.policy_frequency == 0  # delayed policy updates
        b = self.to_device(batch)
        t = timer.start()
        critic_loss = self.critic_update(b["obs"], b["actions"], b["rewards"], b["next_obs"], b["terminated"], noise)
        actor_loss = self.actor_update(b["obs"]) if policy_step else None
        timer.stop("update", t)
        self.updates += 1
        return critic_loss, actor_loss

    @torch.no_grad()
    def _target(self, rewards: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                noise: torch.Tensor) -> torch.Tensor:
        """y = r + gamma * (1 - terminated) * min(Q1'(s', a'), Q2'(s', a')), a' the smoothed target action."""
        a = self.a
        with self.rt.autocast():
            smoothing = (noise * a.policy_noise).clamp(-a.noise_clip, a.noise_clip) * self.actor_target.scale
            next_actions = self.actor_target.clip(self.actor_target(next_obs) + smoothing)
            q_next = torch.min(self.q1_target(next_obs, next_actions), self.q2_target(next_obs, next_actions))
            return rewards + a.gamma * (1.0 - terminated) * q_next

    def _critic_loss(self, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with self.rt.autocast():
            q1, q2 = self.q1(obs, actions), self.q2(obs, actions)
            return nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)

    def _actor_loss(self, obs: torch.Tensor) -> torch.Tensor:
        with self.rt.autocast():
            return -self.q1(obs, self.actor(obs)).mean()

    def _critic_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
                     terminated: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        target = self._target(rewards, next_obs, terminated, noise)
        return self.rt.minimize(lambda: self._critic_loss(obs, actions, target), self.critic_opt)

    def _actor_step(self, obs: torch.Tensor) -> torch.Tensor:
        """The delayed policy step, then every target moves toward its network."""
        actor_loss = self.rt.minimize(lambda: self._actor_loss(obs), self.actor_opt)
        self.rt.polyak_update(self.target_params, self.params, self.a.tau)
        return actor_loss

    # -- state ---------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "q1": self.q1, "q2": self.q2, "actor_target": self.actor_target,
                "q1_target": self.q1_target, "q2_target": self.q2_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt}

    def extra_state(self) -> dict[str, Any]:
        # self.updates, the gradient-step counter that times the delayed policy updates, is
        # checkpointed by rlsweep itself (with env_steps and the episodes), as are torch's RNGs
        return {"buffer": self.buffer.state_dict(), "rngs": [rng.bit_generator.state for rng in self.rngs],
                "next_obs": self.next_obs}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        for rng, rng_state in zip(self.rngs, state["rngs"], strict=True):
            rng.bit_generator.state = rng_state
        self.next_obs = state["next_obs"]
