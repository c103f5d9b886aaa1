"""SAC: tanh-squashed Gaussian actor, twin Q critics with Polyak targets, learned temperature.

The math (Haarnoja et al., 2018; CleanRL's ``sac_continuous_action.py``). A policy
``pi(a|s)``: ``a = bias + scale * tanh(mu(s) + sigma(s) * eps)``, ``eps ~ N(0, I)``; twin critics
``Q1``, ``Q2`` and their Polyak copies ``Q1'``, ``Q2'``; a temperature ``alpha = exp(log_alpha)``.
Per gradient step, on a replay batch:

- soft target: ``y = r + gamma * (1 - terminated) * (min Q'(s', a') - alpha * log pi(a'|s'))``,
  ``a' ~ pi(s')``;
- critics: ``mean((Q1(s, a) - y)^2) + mean((Q2(s, a) - y)^2)``, one Adam step;
- actor, judged by the updated critics: ``mean(alpha * log pi(a~|s) - min Q(s, a~))``, ``a~ ~ pi(s)``
  reparameterised, one Adam step;
- temperature (``autotune_alpha``): ``mean(-log_alpha.exp() * (log pi(a~|s) + target_entropy))``,
  target entropy ``-dim(A)``;
- targets: ``Q' <- Q' + tau (Q - Q')``.

Uniformly random actions for the first ``learning_starts`` env steps. Gaussian noise is drawn
eagerly and passed into the (possibly compiled) functions, so compiled and eager runs draw the
same numbers.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlsweep.algos.base import Algorithm
from rlsweep.buffers import replay_buffer
from rlsweep.config import SACConfig, TrainConfig, hyper_parameter_errors
from rlsweep.nets import mlp
from rlsweep.runtime import Runtime
from rlsweep.timing import PhaseTimer

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


class Actor(nn.Module):
    """The squashed Gaussian policy: a tanh-bounded sample inside the action box, and its log-probability."""

    def __init__(self, obs_dim: int, act_dim: int, cfg: SACConfig, rt: Runtime, low: np.ndarray, high: np.ndarray) -> None:
        super().__init__()
        self.net = mlp(obs_dim, cfg.hidden_sizes, 2 * act_dim, rt, cfg.activation)
        self.register_buffer("scale", torch.as_tensor((high - low) / 2.0, dtype=torch.float32))
        self.register_buffer("bias", torch.as_tensor((high + low) / 2.0, dtype=torch.float32))

    def forward(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Reparameterised sample with the given standard-normal ``noise``; (action, log_prob)."""
        mean, log_std = self.net(obs).chunk(2, dim=-1)
        log_std = LOG_STD_MIN + 0.5 * (LOG_STD_MAX - LOG_STD_MIN) * (torch.tanh(log_std) + 1)
        std = log_std.exp()
        x = mean + std * noise
        y = torch.tanh(x)
        log_prob = -0.5 * noise.pow(2) - log_std - 0.5 * np.log(2 * np.pi)
        log_prob = log_prob - torch.log(self.scale * (1 - y.pow(2)) + 1e-6)
        return y * self.scale + self.bias, log_prob.sum(-1)


class QNetwork(nn.Module):
    """Q(s, a) from the concatenated observation and action."""

    def __init__(self, obs_dim: int, act_dim: int, cfg: SACConfig, rt: Runtime) -> None:
        super().__init__()
        self.net = mlp(obs_dim + act_dim, cfg.hidden_sizes, 1, rt, cfg.activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1)


class Temperature(nn.Module):
    """log(alpha), learned when ``autotune_alpha``: a module's parameter, as the runtime's update needs."""

    def __init__(self, alpha: float, learned: bool) -> None:
        super().__init__()
        self.log_alpha = nn.Parameter(torch.tensor(float(np.log(alpha))), requires_grad=learned)


class SAC(Algorithm):
    """SAC (Haarnoja et al., 2018) with twin critics and a learned temperature: see the module's docstring."""

    name = "sac"
    config_class = SACConfig
    action_spaces = (gym.spaces.Box,)
    seeds_together = True

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        return super().validate_config(cfg) + hyper_parameter_errors(
            cfg.algo, positive=("batch_size", "buffer_size", "gradient_steps", "steps_per_iteration", "alpha"),
            factor=("tau",), non_negative=("learning_starts",))

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: SACConfig = cfg.algo  # type: ignore[assignment]
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        self.obs_dim = int(np.prod(obs_space.shape))
        self.act_dim = int(np.prod(act_space.shape))
        self.low, self.high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
        self.actor, self.q1, self.q2, self.q1_target, self.q2_target, self.temperature = rt.per_seed(self._networks)
        self.q1_target.requires_grad_(False)
        self.q2_target.requires_grad_(False)
        self.target_entropy = -float(self.act_dim)
        self.critic_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.target_params = [*self.q1_target.parameters(), *self.q2_target.parameters()]
        self.critic_opt = torch.optim.Adam(self.critic_params, lr=a.lr)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=a.lr)
        self.alpha_opt = torch.optim.Adam(self.temperature.parameters(), lr=a.lr)

        self.policy = rt.policy(timer, self.actor, forward=self._act)
        self.update = rt.update(self._update_step, self.modules(), self.optimizers())

        # one per seed (seeds_per_job), each with its seed's own generators
        self.buffer = replay_buffer(rt.seed_values, a.buffer_size, a.num_envs, obs_space.shape, act_space.shape,
                                    np.float32)
        self.rngs = [np.random.default_rng(seed) for seed in rt.seed_values]
        self.next_obs, _ = envs.reset(seed=self.reset_seed)

    def _networks(self) -> tuple[nn.Module, ...]:
        """Actor, critics, their targets (copies) and the temperature (one seed's: ``rt.per_seed`` builds them per seed)."""
        a, rt, dev = self.a, self.rt, self.device
        actor = Actor(self.obs_dim, self.act_dim, a, rt, self.low, self.high).to(dev)
        q1, q2, q1_target, q2_target = (QNetwork(self.obs_dim, self.act_dim, a, rt).to(dev) for _ in range(4))
        q1_target.load_state_dict(q1.state_dict())
        q2_target.load_state_dict(q2.state_dict())
        return actor, q1, q2, q1_target, q2_target, Temperature(a.alpha, a.autotune_alpha).to(dev)

    @property
    def iteration_env_steps(self) -> int:
        return max(1, self.a.steps_per_iteration // self.a.num_envs) * self.a.num_envs

    # -- the losses ------------------------------------------------------------------------------------
    @torch.no_grad()
    def _soft_target(self, rewards: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                     noise: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """r + gamma * (1 - terminated) * (min target Q(s', a') - alpha * log pi(a'|s')), a' ~ pi(s')."""
        with self.rt.autocast():
            next_actions, next_logp = self.actor(next_obs, noise)
            q_next = torch.min(self.q1_target(next_obs, next_actions), self.q2_target(next_obs, next_actions))
            return rewards + self.a.gamma * (1.0 - terminated) * (q_next - alpha * next_logp)

    def _critic_loss(self, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        with self.rt.autocast():
            q1, q2 = self.q1(obs, actions), self.q2(obs, actions)
            return nn.functional.mse_loss(q1, target) + nn.functional.mse_loss(q2, target)

    def _actor_loss(self, obs: torch.Tensor, noise: torch.Tensor, alpha: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha * log pi(a|s) - min Q(s, a)], a ~ pi(s) reparameterised; (loss, detached log pi(a|s))."""
        with self.rt.autocast():
            pi_actions, logp = self.actor(obs, noise)
            q_pi = torch.min(self.q1(obs, pi_actions), self.q2(obs, pi_actions))
            return (alpha * logp - q_pi).mean(), logp.detach()

    def _alpha_loss(self, logp: torch.Tensor) -> torch.Tensor:
        """The temperature rises while the policy's entropy (-log pi) is below the target entropy."""
        return (-self.temperature.log_alpha.exp() * (logp + self.target_entropy)).mean()

    def _update_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
                       terminated: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        """Critics, then actor, then temperature, then the targets; (critic loss, actor loss, alpha)."""
        rt, a = self.rt, self.a
        alpha = self.temperature.log_alpha.detach().exp()
        target = self._soft_target(rewards, next_obs, terminated, noise[0], alpha)
        critic_loss = rt.minimize(lambda: self._critic_loss(obs, actions, target), self.critic_opt)
        actor_loss, logp = rt.minimize(lambda: self._actor_loss(obs, noise[1], alpha), self.actor_opt, has_aux=True)
        if a.autotune_alpha:
            rt.minimize(lambda: self._alpha_loss(logp), self.alpha_opt)
        rt.polyak_update(self.target_params, self.critic_params, a.tau)
        return torch.stack([critic_loss, actor_loss, alpha])

    # -- acting --------------------------------------------------------------------------------
    def _act(self, actor: Actor, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        return actor(obs, noise)[0]  # the action, without its log-probability

    def _acting_noise(self, generator: torch.Generator) -> torch.Tensor:
        """One seed's standard-normal acting noise, a row per env, from the seed's own stream."""
        return torch.randn((self.a.num_envs, self.act_dim), device=self.device, generator=generator)

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        """The mean action: the actor's sample with zero noise (``tanh(mean) * scale + bias``)."""
        obs_t = self.rt.h2d(obs, torch.float32)
        with torch.no_grad():
            return self.rt.d2h(self.actor(obs_t, torch.zeros(len(obs), self.act_dim, device=self.device))[0])

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a = self.a
        next_obs = self.next_obs
        n_steps = self.iteration_env_steps // a.num_envs
        losses: list[torch.Tensor] = []
        for _ in range(n_steps):
            if self.env_steps < a.learning_starts:  # each seed's envs from the seed's own generator
                actions = np.concatenate([rng.uniform(self.low, self.high, size=(a.num_envs, self.act_dim))
                                          for rng in self.rngs]).astype(np.float32)
            else:
                actions = self.policy(next_obs, self.rt.draw(self._acting_noise))

            next_obs = self.step_and_store(next_obs, actions, self.buffer)

            if self.env_steps >= a.learning_starts:
                for _ in range(a.gradient_steps):
                    losses.append(self._gradient_step())
        self.next_obs = next_obs
        if not losses:
            return {"updated": 0.0}
        stats = torch.stack(losses)  # (steps, [seeds,] 3)
        self.rt.check_finite(stats[..., :2].movedim(-1, 0), self.updates)
        mean = stats.mean(0).movedim(-1, 0).tolist()  # per statistic: a value, or one per seed
        return {"critic_loss": mean[0], "actor_loss": mean[1], "alpha": mean[2], "updated": 1.0}

    def _gradient_step(self) -> torch.Tensor:
        a, timer = self.a, self.timer
        batch = self.buffer.sample(a.batch_size)
        shape = (2, a.batch_size, self.act_dim)
        noise = self.rt.draw_per_seed(lambda g: torch.randn(shape, device=self.device, generator=g))
        b = self.to_device(batch)
        t = timer.start()
        stats = self.update(b["obs"], b["actions"], b["rewards"], b["next_obs"], b["terminated"], noise)
        timer.stop("update", t)
        self.updates += 1
        return stats

    # -- state ---------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "q1": self.q1, "q2": self.q2, "q1_target": self.q1_target,
                "q2_target": self.q2_target, "temperature": self.temperature}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}

    extra_state = Algorithm.replay_state  # the buffer, the exploration generators and the next observation
    load_extra_state = Algorithm.load_replay_state
