"""PPO: clipped surrogate objective, GAE, discrete (categorical) or continuous (Gaussian) actions.

Where the toggles act:
- acting forward (``self._act``, compiled as "act") runs on eval-mode modules: twins or the
  originals switched with ``.eval()``/``.train()`` (``twin_modules``);
- every env step copies observations host->device (``pin_memory``/``non_blocking``) and actions
  device->host; rewards and done flags of a rollout are copied once per rollout;
- the whole update step (forward, loss, backward, clip, optimizer step) is one compiled function
  ("update");
- activations and advantage normalisation follow ``inplace``; forwards run under ``dtype`` autocast.

All randomness (action noise, minibatch permutations) is drawn eagerly from torch's seeded
generator and passed into the compiled functions, so compiled and eager runs draw the same numbers.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlsweep.algos.base import Algorithm, check_finite
from rlsweep.config import PPOConfig, TrainConfig
from rlsweep.envs import finished_episodes
from rlsweep.nets import mlp
from rlsweep.timing import PhaseTimer
from rlsweep.toggles.base import Runtime

_LOG_2PI = math.log(2 * math.pi)


class PPO(Algorithm):
    name = "ppo"
    action_spaces = (gym.spaces.Discrete, gym.spaces.Box)

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: PPOConfig = cfg.algo  # type: ignore[assignment]
        self.a = a
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        self.obs_dim = int(np.prod(obs_space.shape))
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        self.act_dim = int(act_space.n) if self.discrete else int(np.prod(act_space.shape))
        if not self.discrete:
            self.act_low, self.act_high = act_space.low, act_space.high

        dev = self.device
        self.actor = mlp(self.obs_dim, a.hidden_sizes, self.act_dim, rt, a.activation, out_gain=0.01).to(dev)
        self.critic = mlp(self.obs_dim, a.hidden_sizes, 1, rt, a.activation, out_gain=1.0).to(dev)
        self.log_std = nn.Parameter(torch.full((self.act_dim,), a.log_std_init, device=dev))
        params = [*self.actor.parameters(), *self.critic.parameters()]
        if not self.discrete:
            params.append(self.log_std)
        # lr as a tensor: annealing it changes a value, not a Python float, so no recompiles
        self.lr = torch.tensor(a.lr, device=dev)
        self.optimizer = torch.optim.Adam(params, lr=self.lr, eps=1e-5)
        self.params = params
        self.scaler = rt.grad_scaler()

        self.acting = rt.acting_modules(self.actor, self.critic)
        self.act_fn = rt.compile(self._act, "act")
        self.update_fn = rt.compile(self._update_step, "update")

        n, s = a.num_envs, a.num_steps
        self.batch_size = n * s
        self.minibatch_size = min(a.minibatch_size, self.batch_size)
        self.obs_buf = torch.zeros((s, n, self.obs_dim), device=dev)
        act_shape = (s, n) if self.discrete else (s, n, self.act_dim)
        self.act_buf = torch.zeros(act_shape, device=dev, dtype=torch.long if self.discrete else torch.float32)
        self.logp_buf = torch.zeros((s, n), device=dev)
        self.val_buf = torch.zeros((s, n), device=dev)
        self.rew_host = np.zeros((s, n), dtype=np.float32)
        self.done_host = np.zeros((s, n), dtype=np.float32)
        self.next_obs, _ = envs.reset(seed=cfg.seed)
        self.iterations_done = 0
        self.total_iterations = 1

    @property
    def iteration_env_steps(self) -> int:
        return self.a.num_envs * self.a.num_steps

    def num_iterations(self, total_env_steps: int) -> int:
        self.total_iterations = super().num_iterations(total_env_steps)
        return self.total_iterations

    # -- acting --------------------------------------------------------------------------------
    def _act(self, obs: torch.Tensor, noise: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        actor, critic = self.acting.modules
        with self.rt.autocast():
            out = actor(obs)
            value = critic(obs)
        out, value = out.float(), value.float().squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            # Gumbel-max: argmax(logits + Gumbel noise) samples the categorical distribution
            action = torch.argmax(out - torch.log(-torch.log(noise)), dim=-1)
            logp = logp_all.gather(-1, action.unsqueeze(-1)).squeeze(-1)
        else:
            std = self.log_std.exp()
            action = out + std * noise
            logp = (-0.5 * noise.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1)
        return action, logp, value

    def _noise(self, steps: int) -> torch.Tensor:
        shape = (steps, self.a.num_envs, self.act_dim)
        if self.discrete:
            return torch.rand(shape, device=self.device).clamp_(1e-12, 1.0 - 1e-7)
        return torch.randn(shape, device=self.device)

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = self.actor(torch.as_tensor(obs, dtype=torch.float32, device=self.device))
        if self.discrete:
            return out.argmax(-1).cpu().numpy()
        return np.clip(out.cpu().numpy(), self.act_low, self.act_high)

    def _value_of(self, obs: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return self.critic(torch.as_tensor(obs, dtype=torch.float32, device=self.device)).squeeze(-1)

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a, rt, timer, envs = self.a, self.rt, self.timer, self.envs
        if a.anneal_lr:
            frac = 1.0 - self.iterations_done / max(1, self.total_iterations)
            self.lr.fill_(frac * a.lr)
        noise = self._noise(a.num_steps)
        next_obs = self.next_obs
        for step in range(a.num_steps):
            t = timer.start()
            obs_t = rt.h2d(next_obs, torch.float32)
            timer.stop("h2d", t)

            t = timer.start()
            with torch.no_grad(), self.acting:
                action, logp, value = self.act_fn(obs_t, noise[step])
            timer.stop("act", t)

            t = timer.start()
            action_np = rt.d2h(action)
            timer.stop("d2h", t)
            env_action = action_np if self.discrete else np.clip(action_np, self.act_low, self.act_high)

            t = timer.start()
            next_obs, reward, terminated, truncated, info = envs.step(env_action)
            timer.stop("env_step", t)

            self.obs_buf[step] = obs_t
            self.act_buf[step] = action
            self.logp_buf[step] = logp
            self.val_buf[step] = value
            self.rew_host[step] = reward
            self.done_host[step] = terminated | truncated
            only_truncated = truncated & ~terminated
            if only_truncated.any():  # time limit: bootstrap from the true last observation
                idx = np.flatnonzero(only_truncated)
                final = np.stack([info["final_obs"][i] for i in idx])
                self.rew_host[step, idx] += a.gamma * self._value_of(final).cpu().numpy()
            self.env_steps += a.num_envs
            self._record_episodes(finished_episodes(info))
        self.next_obs = next_obs

        t = timer.start()
        rewards = rt.h2d(self.rew_host)
        dones = rt.h2d(self.done_host)
        last_obs = rt.h2d(next_obs, torch.float32)
        timer.stop("h2d", t)

        t = timer.start()
        stats = self._update(rewards, dones, last_obs)
        timer.stop("update", t)
        self.iterations_done += 1
        return stats

    def _update(self, rewards: torch.Tensor, dones: torch.Tensor, last_obs: torch.Tensor) -> dict[str, float]:
        a = self.a
        with torch.no_grad():
            last_value = self.critic(last_obs).squeeze(-1)
            advantages = torch.zeros_like(rewards)
            gae = torch.zeros_like(last_value)
            next_value = last_value
            for t in reversed(range(a.num_steps)):
                nonterminal = 1.0 - dones[t]
                delta = rewards[t] + a.gamma * next_value * nonterminal - self.val_buf[t]
                gae = delta + a.gamma * a.gae_lambda * nonterminal * gae
                advantages[t] = gae
                next_value = self.val_buf[t]
            returns = advantages + self.val_buf

        b_obs = self.obs_buf.reshape(-1, self.obs_dim)
        b_act = self.act_buf.reshape(self.batch_size, *self.act_buf.shape[2:])
        b_logp, b_adv = self.logp_buf.reshape(-1), advantages.reshape(-1)
        b_ret, b_val = returns.reshape(-1), self.val_buf.reshape(-1)
        n_mb = self.batch_size // self.minibatch_size
        losses = []
        for _ in range(a.update_epochs):
            perm = torch.randperm(self.batch_size, device=self.device)
            for k in range(n_mb):
                idx = perm[k * self.minibatch_size : (k + 1) * self.minibatch_size]
                losses.append(self.update_fn(b_obs, b_act, b_logp, b_adv, b_ret, b_val, idx))
                self.updates += 1
        stats = torch.stack(losses)  # one host sync per iteration, not per minibatch
        check_finite(stats[:, 0], self.updates)
        mean = stats.mean(0).tolist()
        return {"loss": mean[0], "policy_loss": mean[1], "value_loss": mean[2], "entropy": mean[3],
                "approx_kl": mean[4], "lr": float(self.lr), "updated": 1.0}

    def _update_step(
        self,
        b_obs: torch.Tensor,
        b_act: torch.Tensor,
        b_logp: torch.Tensor,
        b_adv: torch.Tensor,
        b_ret: torch.Tensor,
        b_val: torch.Tensor,
        idx: torch.Tensor,
    ) -> torch.Tensor:
        a, rt = self.a, self.rt
        obs, act, old_logp, adv, ret, old_val = b_obs[idx], b_act[idx], b_logp[idx], b_adv[idx], b_ret[idx], b_val[idx]
        with rt.autocast():
            out = self.actor(obs)
            value = self.critic(obs)
        out, value = out.float(), value.float().squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, act.unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            std = self.log_std.exp()
            logp = (-0.5 * ((act - out) / std).pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1)
            entropy = (0.5 + 0.5 * _LOG_2PI + self.log_std).sum().expand(obs.shape[0])
        logratio = logp - old_logp
        ratio = logratio.exp()
        if a.norm_adv:
            adv = rt.normalize(adv)
        pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - a.clip_coef, 1 + a.clip_coef)).mean()
        if a.clip_vloss:
            v_clipped = old_val + (value - old_val).clamp(-a.clip_coef, a.clip_coef)
            v_loss = 0.5 * torch.max((value - ret).pow(2), (v_clipped - ret).pow(2)).mean()
        else:
            v_loss = 0.5 * (value - ret).pow(2).mean()
        ent = entropy.mean()
        loss = pg_loss - a.ent_coef * ent + a.vf_coef * v_loss

        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.params, a.max_grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            nn.utils.clip_grad_norm_(self.params, a.max_grad_norm)
            self.optimizer.step()
        approx_kl = ((ratio - 1) - logratio).mean()
        return torch.stack([loss, pg_loss, v_loss, ent, approx_kl]).detach()

    # -- state ---------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        holder = nn.Module()
        holder.log_std = self.log_std
        return {"actor": self.actor, "critic": self.critic, "log_std": holder}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {"next_obs": self.next_obs, "iterations_done": self.iterations_done, "lr": float(self.lr)}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.next_obs = state["next_obs"]
        self.iterations_done = state["iterations_done"]
        self.lr.fill_(state["lr"])
        for group in self.optimizer.param_groups:  # loading optimizer state replaced the lr tensor
            group["lr"] = self.lr
