"""A2C: synchronous advantage actor-critic (Mnih et al., 2016), written only against ``rlsweep.api``.

The on-policy example of a plugin that trains several seeds in one process (``seeds_per_job``).
It reads like Stable-Baselines3's A2C with its defaults; rlsweep adds the toggles and the timers.

The math. A categorical policy ``pi(a|s)`` (logits from an MLP) and a value function ``V(s)``.
Per iteration:

- rollout: ``num_steps`` steps of ``num_envs`` envs with the current policy; a time-limit
  truncation adds ``gamma * V(s_final)`` to the last reward (bootstrap);
- n-step returns: ``R_t = r_t + gamma * (1 - done_t) * R_{t+1}``, ``R_T = V(s_T)``;
- one gradient step on ``L = -mean(A_t log pi(a_t|s_t)) - ent_coef * entropy
  + vf_coef * mean((V(s_t) - R_t)^2)``, ``A_t = R_t - V(s_t)`` (not differentiated), RMSprop,
  gradients' global norm clipped to ``max_grad_norm``.

Seeds trained together. ``rt.per_seed`` builds each seed's networks (stacked), ``rt.draw`` gives
each seed's envs their own noise, and the envs are every seed's, seed by seed. The rollout reaches
the update as ``rt.by_seed(x, env_dim)``: the seeds first, then each seed's rows in time-major order
(row ``t * num_envs + e``), so that inside the step, which runs once per seed (vmapped), ``view(num_steps,
num_envs)`` gives back the time axis the returns need.

    python -m sweeps.train --config-dir examples/a2c/conf algo=a2c
    python -m sweeps.train -m --config-dir examples/a2c/conf algo=a2c seeds_per_job=1,4 seed=0,1,2,3
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
    finished_episodes,
    hyper_parameter_errors,
    mlp,
)


@dataclass
class A2CConfig(AlgoConfig):
    """Stable-Baselines3's A2C hyper-parameters (its defaults, and its zoo's for CartPole-v1)."""

    _target_: str = "examples.a2c.a2c.A2C"  # the Algorithm class this config builds
    name: Optional[str] = "a2c"  # noqa: UP045 - OmegaConf reads the annotation: Optional, not X | None
    lr: float = 7e-4  # RMSprop learning rate
    gamma: float = 0.99  # discount factor
    num_envs: int = 8  # environments stepped together (of each seed)
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # MLP widths of actor and critic
    activation: str = "tanh"  # hidden activation
    num_steps: int = 5  # env steps of each env per gradient step (SB3: n_steps)
    ent_coef: float = 0.0  # weight of the entropy bonus
    vf_coef: float = 0.5  # weight of the value loss
    max_grad_norm: float = 0.5  # the gradients' global L2 norm is clipped to this


class A2C(Algorithm):
    """A2C for discrete actions, several seeds in one process: see the module's docstring."""

    name = "a2c"
    config_class = A2CConfig
    action_spaces = (gym.spaces.Discrete,)
    seeds_together = True  # networks from rt.per_seed, noise from rt.draw, every seed's envs seed by seed

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        """A2C's range checks, before any job runs (the base class checks lr, gamma, hidden_sizes, ...)."""
        return super().validate_config(cfg) + hyper_parameter_errors(
            cfg.algo, positive=("num_steps", "max_grad_norm"), non_negative=("ent_coef", "vf_coef"))

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: A2CConfig = cfg.algo  # type: ignore[assignment]
        self.obs_dim = int(np.prod(envs.single_observation_space.shape))
        self.n_actions = int(envs.single_action_space.n)

        self.actor, self.critic = rt.per_seed(self._networks)
        self.optimizer = torch.optim.RMSprop([*self.actor.parameters(), *self.critic.parameters()], lr=a.lr,
                                             alpha=0.99, eps=1e-5)  # SB3's RMSprop
        self.policy = rt.policy(timer, self.actor)  # numpy observations in, numpy logits out
        self.update = rt.update(self._update_step, self.modules(), self.optimizers())

        # the rollout, on the host, over every seed's envs (envs.num_envs = seeds x num_envs)
        steps, n = a.num_steps, envs.num_envs
        self.obs_host = np.zeros((steps, n, self.obs_dim), dtype=np.float32)
        self.act_host = np.zeros((steps, n), dtype=np.int64)
        self.rew_host = np.zeros((steps, n), dtype=np.float32)
        self.done_host = np.zeros((steps, n), dtype=np.float32)
        self.next_obs, _ = envs.reset(seed=self.reset_seed)

    def _networks(self) -> tuple[nn.Module, nn.Module]:
        """One seed's actor (logits) and critic (``rt.per_seed`` builds them for each seed)."""
        a, rt = self.a, self.rt
        return (mlp(self.obs_dim, a.hidden_sizes, self.n_actions, rt, a.activation, out_gain=0.01).to(self.device),
                mlp(self.obs_dim, a.hidden_sizes, 1, rt, a.activation, out_gain=1.0).to(self.device))

    @property
    def iteration_env_steps(self) -> int:
        return self.a.num_envs * self.a.num_steps

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.rt.d2h(self.actor(self.rt.h2d(obs)).argmax(-1))

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a, rt, timer = self.a, self.rt, self.timer
        # Gumbel noise for the whole rollout, each seed's envs from the seed's own stream:
        # argmax(logits + Gumbel noise) samples the categorical
        shape = (a.num_steps, a.num_envs, self.n_actions)
        u = rt.draw(lambda g: torch.rand(shape, device=self.device, generator=g), dim=1)
        gumbel = rt.d2h(-torch.log(-torch.log(u.clamp(1e-12, 1.0 - 1e-7))))
        self.done_host.fill(0.0)
        obs = self.next_obs
        for step in range(a.num_steps):
            actions = (self.policy(obs) + gumbel[step]).argmax(-1)
            self.obs_host[step], self.act_host[step] = obs, actions
            t = timer.start()
            obs, reward, terminated, truncated, info = self.envs.step(actions)
            timer.stop("env_step", t)
            self.rew_host[step] = reward
            self.env_steps += a.num_envs  # each seed's
            if "final_obs" in info:  # SAME_STEP autoreset: only where an episode ended
                self._episodes_ended(step, terminated, truncated, info)
        self.next_obs = obs

        b = self.to_device({"obs": self.obs_host, "actions": self.act_host, "rewards": self.rew_host,
                            "dones": self.done_host, "last_obs": obs})  # timed h2d
        # each seed's rollout as rows, time-major (seeds first when several: the step runs once per seed)
        batch = [rt.by_seed(b[k], 1) for k in ("obs", "actions", "rewards", "dones")] + [rt.by_seed(b["last_obs"], 0)]
        t = timer.start()
        stats = self.update(*batch)
        timer.stop("update", t)
        self.updates += 1
        rt.check_finite(stats[..., 0], self.updates)  # the iteration's one host sync (+ the means below)
        loss, policy_loss, value_loss, entropy = stats.movedim(-1, 0).tolist()  # each a value, or one per seed
        return {"loss": loss, "policy_loss": policy_loss, "value_loss": value_loss, "entropy": entropy,
                "updated": 1.0}

    def _episodes_ended(self, step: int, terminated: np.ndarray, truncated: np.ndarray, info: dict[str, Any]) -> None:
        """Done flags, the time-limit bootstrap and the episodes of a step where episodes ended."""
        self.done_host[step] = terminated | truncated
        only_truncated = truncated & ~terminated
        if only_truncated.any():  # a time limit, not a terminal state: bootstrap from the true last observation
            idx = np.flatnonzero(only_truncated)
            final = np.array(self.obs_host[step])  # every env's row: each seed's critic sees its own envs
            final[idx] = np.stack([info["final_obs"][i] for i in idx])
            with torch.no_grad():
                value = self.rt.d2h(self.critic(self.rt.h2d(final)).squeeze(-1))
            self.rew_host[step, idx] += self.a.gamma * value[idx]
        self.record_episodes(finished_episodes(info, by_env=True))

    # -- the gradient step (one seed's rollout) -----------------------------------------------------
    def _update_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, dones: torch.Tensor,
                     last_obs: torch.Tensor) -> torch.Tensor:
        returns = self._returns(rewards, dones, last_obs)
        _, stats = self.rt.minimize(lambda: self._loss(obs, actions, returns), self.optimizer,
                                    max_grad_norm=self.a.max_grad_norm, has_aux=True)
        return stats

    @torch.no_grad()
    def _returns(self, rewards: torch.Tensor, dones: torch.Tensor, last_obs: torch.Tensor) -> torch.Tensor:
        """n-step returns of the rollout's rows, bootstrapped from the value of the observation after it."""
        steps, envs = self.a.num_steps, self.a.num_envs
        with self.rt.autocast():
            ret = self.critic(last_obs).squeeze(-1)
        rewards, dones = rewards.view(steps, envs), dones.view(steps, envs)
        out = []
        for t in reversed(range(steps)):
            ret = rewards[t] + self.a.gamma * (1.0 - dones[t]) * ret
            out.append(ret)
        return torch.stack(out[::-1]).flatten()

    def _loss(self, obs: torch.Tensor, actions: torch.Tensor, returns: torch.Tensor
              ) -> tuple[torch.Tensor, torch.Tensor]:
        """A2C's loss on the rollout; (loss, detached statistics)."""
        a = self.a
        with self.rt.autocast():
            logits, value = self.actor(obs), self.critic(obs).squeeze(-1)
        logp_all = torch.log_softmax(logits, dim=-1)
        logp = logp_all.gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        entropy = -(logp_all.exp() * logp_all).sum(-1).mean()
        advantage = (returns - value).detach()
        policy_loss = -(advantage * logp).mean()
        value_loss = (value - returns).pow(2).mean()
        loss = policy_loss - a.ent_coef * entropy + a.vf_coef * value_loss
        return loss, torch.stack([loss.detach(), policy_loss.detach(), value_loss.detach(), entropy.detach()])

    # -- state ---------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "critic": self.critic}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {"next_obs": self.next_obs}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.next_obs = state["next_obs"]
