"""SAC: tanh-squashed Gaussian actor, twin Q critics with Polyak targets, learned temperature.

The math is written once, in the losses section (soft target, critic, actor and temperature
losses); both update paths call it: the eager step (``_update_step``: autograd + torch.optim) and
the compiled single-graph step (``_single_graph_update_step``: torch.func, on CPU).

Where the toggles act:
- the acting forward (``self._act``, compiled as "act") runs on an eval-mode actor: a twin or
  the original switched with ``.eval()``/``.train()`` (``twin_modules``);
- replay samples live on the host and are copied to the device per gradient step
  (``pin_memory``/``non_blocking``); actions come back device->host;
- one gradient step (critic, actor and temperature losses, backward passes, optimizer steps,
  and the target critics' Polyak update) is one compiled function ("update"), traced as ONE
  graph (torch.func gradients + Adam on the optimizers' state: ``algos/functional.py``); the
  actor's gradient is taken with respect to the actor only, where ``actor_loss.backward()`` also
  computes (and then discards) the critics' parameter gradients;
- the target critics' Polyak update and the ReLUs are in place or not (``inplace``).

Gaussian noise is drawn eagerly and passed into the compiled functions, so compiled and eager
runs use the same random numbers.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlsweep.algos import functional as F
from rlsweep.algos.base import Algorithm, check_finite
from rlsweep.buffers import ReplayBuffer
from rlsweep.config import SACConfig, TrainConfig
from rlsweep.nets import mlp
from rlsweep.runtime import Runtime
from rlsweep.timing import PhaseTimer

LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0

#: a critic as the losses see it: (obs, action) -> Q; a module, or its forward with given parameters
QFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
#: the actor as the losses see it: (obs, noise) -> (action, log-probability)
PolicyFn = Callable[[torch.Tensor, torch.Tensor], tuple[torch.Tensor, torch.Tensor]]


class Actor(nn.Module):
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

    def mean_action(self, obs: torch.Tensor) -> torch.Tensor:
        mean, _ = self.net(obs).chunk(2, dim=-1)
        return torch.tanh(mean) * self.scale + self.bias


class QNetwork(nn.Module):
    def __init__(self, obs_dim: int, act_dim: int, cfg: SACConfig, rt: Runtime) -> None:
        super().__init__()
        self.net = mlp(obs_dim + act_dim, cfg.hidden_sizes, 1, rt, cfg.activation)

    def forward(self, obs: torch.Tensor, action: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, action], dim=-1)).squeeze(-1)


class SAC(Algorithm):
    name = "sac"
    config_class = SACConfig
    action_spaces = (gym.spaces.Box,)

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: SACConfig = cfg.algo  # type: ignore[assignment]
        self.a = a
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        self.obs_dim = int(np.prod(obs_space.shape))
        self.act_dim = int(np.prod(act_space.shape))
        self.low, self.high = act_space.low.astype(np.float32), act_space.high.astype(np.float32)
        dev = self.device
        self.actor = Actor(self.obs_dim, self.act_dim, a, rt, self.low, self.high).to(dev)
        self.q1, self.q2 = (QNetwork(self.obs_dim, self.act_dim, a, rt).to(dev) for _ in range(2))
        self.q1_target, self.q2_target = (QNetwork(self.obs_dim, self.act_dim, a, rt).to(dev) for _ in range(2))
        self.q1_target.load_state_dict(self.q1.state_dict())
        self.q2_target.load_state_dict(self.q2.state_dict())
        self.q1_target.requires_grad_(False)
        self.q2_target.requires_grad_(False)
        self.critic_params = [*self.q1.parameters(), *self.q2.parameters()]
        self.target_params = [*self.q1_target.parameters(), *self.q2_target.parameters()]
        self.critic_opt = rt.adam(self.critic_params, lr=a.lr)
        self.actor_opt = rt.adam(self.actor.parameters(), lr=a.lr)
        self.target_entropy = -float(self.act_dim)
        self.log_alpha = torch.tensor(float(np.log(a.alpha)), device=dev, requires_grad=a.autotune_alpha)
        self.alpha_opt = rt.adam([self.log_alpha], lr=a.lr)

        self.acting = rt.acting_modules(self.actor)
        self.act_fn = rt.compile(self._act, "act")
        self.actor_params = list(self.actor.parameters())
        # float16 on CUDA: a GradScaler for every loss (float16 gradients underflow without it); it
        # skips steps on overflow, a host decision, so it keeps the autograd step (see algos/functional.py)
        self.scaler = rt.grad_scaler()
        self.single_graph_update = rt.compiles("update") and self.scaler is None
        self._actor_fwd = F.functional_forward(self.actor, [n for n, _ in self.actor.named_parameters()])
        self._q_fwds = tuple(F.functional_forward(q, [n for n, _ in q.named_parameters()]) for q in (self.q1, self.q2))
        self._n_q1 = len(list(self.q1.parameters()))
        step = self._single_graph_update_step if self.single_graph_update else self._update_step
        self.update_fn = rt.compile(step, "update")

        self.buffer = ReplayBuffer(a.buffer_size, a.num_envs, obs_space.shape, act_space.shape, np.float32, seed=cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.next_obs, _ = envs.reset(seed=cfg.seed)

    @property
    def iteration_env_steps(self) -> int:
        return max(1, self.a.steps_per_iteration // self.a.num_envs) * self.a.num_envs

    # -- the losses: written once, called by both update paths -------------------------------------
    # The networks come in as callables: the modules themselves (eager, autograd), or their forward
    # with the given parameters (``torch.func``, the compiled single-graph step).
    def _soft_target(self, rewards: torch.Tensor, next_obs: torch.Tensor, terminated: torch.Tensor,
                     noise: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
        """r + gamma * (1 - terminated) * (min target Q(s', a') - alpha * log pi(a'|s')), a' ~ pi(s')."""
        with torch.no_grad(), self.rt.autocast():
            next_actions, next_logp = self.actor(next_obs, noise)
            q_next = torch.min(self.q1_target(next_obs, next_actions), self.q2_target(next_obs, next_actions))
            return rewards + self.a.gamma * (1.0 - terminated) * (q_next - alpha * next_logp)

    def _critic_loss(self, q1: QFn, q2: QFn, obs: torch.Tensor, actions: torch.Tensor,
                     target: torch.Tensor) -> torch.Tensor:
        """Both critics regress onto the soft target (mean squared error)."""
        with self.rt.autocast():
            return nn.functional.mse_loss(q1(obs, actions), target) + nn.functional.mse_loss(q2(obs, actions), target)

    def _actor_loss(self, actor: PolicyFn, q1: QFn, q2: QFn, obs: torch.Tensor, noise: torch.Tensor,
                    alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """E[alpha * log pi(a|s) - min Q(s, a)], a ~ pi(s) reparameterised; (loss, detached log pi(a|s))."""
        with self.rt.autocast():
            pi_actions, logp = actor(obs, noise)
            q_pi = torch.min(q1(obs, pi_actions), q2(obs, pi_actions))
            return (alpha * logp - q_pi).mean(), logp.detach()

    def _alpha_loss(self, log_alpha: torch.Tensor, logp: torch.Tensor) -> torch.Tensor:
        """The temperature rises while the policy's entropy (-log pi) is below the target entropy."""
        return (-log_alpha.exp() * (logp + self.target_entropy)).mean()

    # -- acting --------------------------------------------------------------------------------
    def _act(self, obs: torch.Tensor, noise: torch.Tensor) -> torch.Tensor:
        (actor,) = self.acting.modules
        with self.rt.autocast():
            action, _ = actor(obs, noise)
        return action

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.actor.mean_action(torch.as_tensor(obs, dtype=torch.float32, device=self.device)).cpu().numpy()

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a, rt, timer = self.a, self.rt, self.timer
        next_obs = self.next_obs
        n_steps = self.iteration_env_steps // a.num_envs
        losses: list[torch.Tensor] = []
        for _ in range(n_steps):
            if self.env_steps < a.learning_starts:
                actions = self.rng.uniform(self.low, self.high, size=(a.num_envs, self.act_dim)).astype(np.float32)
            else:
                noise = torch.randn((a.num_envs, self.act_dim), device=self.device)
                t = timer.start()
                obs_t = rt.h2d(next_obs, torch.float32)
                timer.stop("h2d", t)
                t = timer.start()
                with torch.no_grad(), self.acting:
                    action = self.act_fn(obs_t, noise)
                timer.stop("act", t)
                t = timer.start()
                actions = rt.d2h(action)
                timer.stop("d2h", t)

            next_obs = self.step_and_store(next_obs, actions, self.buffer)

            if self.env_steps >= a.learning_starts:
                for _ in range(a.gradient_steps):
                    losses.append(self._gradient_step())
        self.next_obs = next_obs
        if not losses:
            return {"updated": 0.0}
        stats = torch.stack(losses)
        check_finite(stats[:, :2], self.updates)
        mean = stats.mean(0).tolist()
        return {"critic_loss": mean[0], "actor_loss": mean[1], "alpha": mean[2], "updated": 1.0}

    def _gradient_step(self) -> torch.Tensor:
        a, rt, timer = self.a, self.rt, self.timer
        batch = self.buffer.sample(a.batch_size)
        noise = torch.randn((2, a.batch_size, self.act_dim), device=self.device)
        t = timer.start()
        obs = rt.h2d(batch["obs"])
        actions = rt.h2d(batch["actions"])
        rewards = rt.h2d(batch["rewards"])
        next_obs = rt.h2d(batch["next_obs"])
        terminated = rt.h2d(batch["terminated"])
        timer.stop("h2d", t)
        t = timer.start()
        if self.single_graph_update:
            opt_states = (F.adam_state(self.critic_opt, self.critic_params),
                          F.adam_state(self.actor_opt, self.actor_params), F.adam_state(self.alpha_opt, [self.log_alpha]))
            stats = self.update_fn(obs, actions, rewards, next_obs, terminated, noise,
                                   *(x for st in opt_states for x in st.as_args()))
        else:
            stats = self.update_fn(obs, actions, rewards, next_obs, terminated, noise)
            rt.polyak_update(self.target_params, self.critic_params, a.tau)
        timer.stop("update", t)
        self.updates += 1
        return stats

    def _update_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        noise: torch.Tensor,
    ) -> torch.Tensor:
        """One gradient step with autograd and torch.optim.Adam (eager; or compiled with a GradScaler)."""
        alpha = self.log_alpha.detach().exp()
        target = self._soft_target(rewards, next_obs, terminated, noise[0], alpha)

        critic_loss = self._critic_loss(self.q1, self.q2, obs, actions, target)
        self._minimize(critic_loss, self.critic_opt)

        actor_loss, logp = self._actor_loss(self.actor, self.q1, self.q2, obs, noise[1], alpha)
        self._minimize(actor_loss, self.actor_opt)

        if self.a.autotune_alpha:
            self._minimize(self._alpha_loss(self.log_alpha, logp), self.alpha_opt)
        if self.scaler is not None:
            self.scaler.update()  # once per gradient step, after every optimizer it scaled
        return torch.stack([critic_loss.detach(), actor_loss.detach(), alpha])

    def _minimize(self, loss: torch.Tensor, optimizer: torch.optim.Optimizer) -> None:
        """One optimizer step on ``loss``; with float16 through the GradScaler (skipped on inf/NaN gradients)."""
        optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(optimizer)
        else:
            loss.backward()
            optimizer.step()

    def _single_graph_update_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        terminated: torch.Tensor,
        noise: torch.Tensor,
        *opt_state: list[torch.Tensor],
    ) -> torch.Tensor:
        """The same step as :meth:`_update_step` plus the Polyak update, as one traceable function.

        The same losses, taken as functions of the parameters (``torch.func``) with Adam on the
        optimizers' state. ``opt_state``: (steps, exp_avgs, exp_avg_sqs) of the critic, actor and
        temperature optimizers.
        """
        a, rt = self.a, self.rt
        critic_state, actor_state, alpha_state = (F.AdamState(*opt_state[i : i + 3]) for i in (0, 3, 6))
        q1_fwd, q2_fwd = self._q_fwds
        n_q1 = self._n_q1
        alpha = self.log_alpha.detach().exp()
        target = self._soft_target(rewards, next_obs, terminated, noise[0], alpha)

        def critic_loss_of(critic: list[torch.Tensor]) -> torch.Tensor:
            q1, q2 = partial(q1_fwd, critic[:n_q1]), partial(q2_fwd, critic[n_q1:])
            return self._critic_loss(q1, q2, obs, actions, target)

        grads, critic_loss = torch.func.grad_and_value(critic_loss_of)([p.detach() for p in self.critic_params])
        F.adam_step_(self.critic_params, grads, critic_state, self.critic_opt)

        critic = [p.detach() for p in self.critic_params]  # updated: the actor is judged by the new critics
        q1, q2 = partial(q1_fwd, critic[:n_q1]), partial(q2_fwd, critic[n_q1:])

        def actor_loss_of(actor: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            return self._actor_loss(partial(self._actor_fwd, actor), q1, q2, obs, noise[1], alpha)

        grads, (actor_loss, logp) = torch.func.grad_and_value(actor_loss_of, has_aux=True)(
            [p.detach() for p in self.actor_params])
        F.adam_step_(self.actor_params, grads, actor_state, self.actor_opt)

        if a.autotune_alpha:
            alpha_grad = torch.func.grad(self._alpha_loss)(self.log_alpha.detach(), logp)
            F.adam_step_([self.log_alpha], [alpha_grad], alpha_state, self.alpha_opt)
        rt.polyak_update(self.target_params, self.critic_params, a.tau)
        return torch.stack([critic_loss.detach(), actor_loss.detach(), alpha])

    # -- state ---------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"actor": self.actor, "q1": self.q1, "q2": self.q2, "q1_target": self.q1_target,
                "q2_target": self.q2_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"actor_opt": self.actor_opt, "critic_opt": self.critic_opt, "alpha_opt": self.alpha_opt}

    def extra_state(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict(), "rng": self.rng.bit_generator.state,
                "next_obs": self.next_obs, "log_alpha": self.log_alpha.detach().clone()}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.rng.bit_generator.state = state["rng"]
        self.next_obs = state["next_obs"]
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
