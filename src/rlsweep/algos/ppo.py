"""PPO: clipped surrogate objective, GAE, discrete (categorical) or continuous (Gaussian) actions.

The math (Schulman et al., 2017; CleanRL's ``ppo.py``). A policy ``pi(a|s)`` (categorical logits,
or a Gaussian with a state-independent log std) and a value function ``V(s)``. Per iteration:

- rollout: ``num_steps`` steps of ``num_envs`` envs with the current policy; a time-limit
  truncation adds ``gamma * V(s_final)`` to the last reward (bootstrap);
- advantages: GAE, ``A_t = delta_t + gamma * lambda * (1 - done_t) * A_{t+1}``,
  ``delta_t = r_t + gamma * (1 - done_t) * V(s_{t+1}) - V(s_t)``; returns ``A + V``;
- ``update_epochs`` passes over the rollout in minibatches; per minibatch, with the ratio
  ``rho = pi(a|s) / pi_old(a|s)`` and advantages normalised (``norm_adv``):
  ``L = mean(max(-A rho, -A clip(rho, 1 - eps, 1 + eps))) - ent_coef * entropy
  + vf_coef * 0.5 * mean((V(s) - R)^2)`` (the value error clipped like the ratio with
  ``clip_vloss``); one Adam step, gradients' global norm clipped to ``max_grad_norm``, the
  learning rate annealed linearly to 0 (``anneal_lr``).

Acting runs only the actor; the action is drawn on the host with noise drawn for the whole rollout
(Gumbel-max for logits, mean + std * noise for a Gaussian), and the rollout's values and
log-probabilities come after it, batched. Image observations get CleanRL's Atari network (one
Nature-DQN CNN under both heads), uint8 up to the device. Why: docs/results/profiling.md.
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlsweep.algos.base import Algorithm
from rlsweep.config import PPOConfig, TrainConfig, hyper_parameter_errors
from rlsweep.envs import finished_episodes
from rlsweep.nets import GaussianLogStd, Head, NatureCNN, SharedEncoder, encoder_errors, mlp, uses_cnn
from rlsweep.runtime import Runtime
from rlsweep.timing import PhaseTimer

_LOG_2PI = math.log(2 * math.pi)
#: rows per critic forward in the rollout's batched evaluation (:meth:`PPO._evaluate`)
_EVAL_CHUNK_ROWS = 2048


def _gae(rewards: np.ndarray, dones: np.ndarray, values: np.ndarray, last_value: np.ndarray, gamma: float,
         gae_lambda: float) -> np.ndarray:
    """Generalised advantage estimates of a (steps, envs) rollout; ``dones`` end an episode at a step."""
    advantages = np.zeros_like(rewards)
    nonterminal = 1.0 - dones
    gae = np.zeros_like(last_value)
    next_value = last_value
    for t in range(len(rewards) - 1, -1, -1):
        delta = rewards[t] + gamma * next_value * nonterminal[t] - values[t]
        gae = delta + gamma * gae_lambda * nonterminal[t] * gae
        advantages[t] = gae
        next_value = values[t]
    return advantages


class PPO(Algorithm):
    """PPO with a clipped objective and GAE, discrete or continuous actions: see the module's docstring."""

    name = "ppo"
    config_class = PPOConfig
    action_spaces = (gym.spaces.Discrete, gym.spaces.Box)
    seeds_together = True

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        return super().validate_config(cfg) + hyper_parameter_errors(
            cfg.algo, positive=("num_steps", "update_epochs", "minibatch_size", "max_grad_norm", "clip_coef"),
            probability=("gae_lambda",), non_negative=("ent_coef", "vf_coef")) + encoder_errors(cfg.algo.encoder, cfg.env)

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: PPOConfig = cfg.algo  # type: ignore[assignment]
        obs_space, act_space = envs.single_observation_space, envs.single_action_space
        self.discrete = isinstance(act_space, gym.spaces.Discrete)
        self.act_dim = int(act_space.n) if self.discrete else int(np.prod(act_space.shape))
        if not self.discrete:
            self.act_low, self.act_high = act_space.low, act_space.high
        self.cnn = uses_cnn(a.encoder, obs_space.shape, obs_space.dtype)
        self.obs_dtype = torch.uint8 if self.cnn else torch.float32  # frames are scaled on the device
        self.obs_shape = tuple(obs_space.shape) if self.cnn else (int(np.prod(obs_space.shape)),)
        if self.cnn:  # CleanRL's Atari network: the actor and the critic share one encoder
            self.joint: nn.Module | None = rt.per_seed(lambda: self._cnn(obs_space.shape))
            self.actor, self.critic = Head(self.joint, 0), Head(self.joint, 1)
        else:
            self.joint = None
            self.actor, self.critic = rt.per_seed(self._mlps)
        self.std = rt.per_seed(lambda: GaussianLogStd(self.act_dim, a.log_std_init).to(self.device))  # unused if discrete
        params = [*(self.joint or nn.ModuleList([self.actor, self.critic])).parameters()]
        if not self.discrete:
            params.append(self.std.log_std)
        self.lr = torch.tensor(a.lr, device=self.device)  # a tensor: annealing changes a value, not the compiled graph
        self.optimizer = torch.optim.Adam(params, lr=self.lr, eps=1e-5)
        self.policy = rt.policy(timer, self.actor, self.critic, obs_dtype=self.obs_dtype)
        self.update = rt.update(self._update_step, self.modules(), self.optimizers())

        n, s = envs.num_envs, a.num_steps  # every seed's envs (seeds_per_job), seed by seed
        self.batch_size = a.num_envs * s  # one seed's
        self.minibatch_size = min(a.minibatch_size, self.batch_size)
        # the rollout, on the host: a numpy row write per step is cheaper than indexing a torch tensor
        self.obs_host = np.zeros((s, n, *self.obs_shape), dtype=np.uint8 if self.cnn else np.float32)
        self.act_host = np.zeros((s, n) if self.discrete else (s, n, self.act_dim),
                                 dtype=np.int64 if self.discrete else np.float32)
        self.rew_host = np.zeros((s, n), dtype=np.float32)
        self.done_host = np.zeros((s, n), dtype=np.float32)
        # the logits each step acted on (discrete): the rollout's log-probabilities come from them
        self.logits_host = np.zeros((s, n, self.act_dim), dtype=np.float32) if self.discrete else None
        # the rollout on the device and its log-probabilities and values, made before each update
        self.obs_buf = self.act_buf = self.logp_buf = self.val_buf = torch.empty(0)
        self.next_obs, _ = envs.reset(seed=self.reset_seed)
        self.iterations_done = 0
        self.total_iterations = self.num_iterations(cfg.total_env_steps)  # the runner's: it anneals the lr over them

    def _mlps(self) -> tuple[nn.Module, nn.Module]:
        """The actor and the critic of vector observations (one seed's: ``rt.per_seed`` builds them per seed)."""
        a, dim = self.a, self.obs_shape[0]
        return (mlp(dim, a.hidden_sizes, self.act_dim, self.rt, a.activation, out_gain=0.01).to(self.device),
                mlp(dim, a.hidden_sizes, 1, self.rt, a.activation, out_gain=1.0).to(self.device))

    def _cnn(self, obs_shape: tuple[int, ...]) -> nn.Module:
        """The Nature CNN with an actor and a critic head (one seed's)."""
        encoder = NatureCNN(obs_shape, self.rt)
        return SharedEncoder(encoder, mlp(encoder.features, [], self.act_dim, self.rt, self.a.activation, out_gain=0.01),
                             mlp(encoder.features, [], 1, self.rt, self.a.activation, out_gain=1.0)).to(self.device)

    @property
    def iteration_env_steps(self) -> int:
        return self.a.num_envs * self.a.num_steps

    # -- the loss ------------------------------------------------------------------------------------
    def _loss(self, obs: torch.Tensor, act: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
              ret: torch.Tensor, old_val: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """PPO's loss on a minibatch (``adv`` already normalised); (loss, detached statistics)."""
        a = self.a
        with self.rt.autocast():
            out, value = self.joint(obs) if self.joint is not None else (self.actor(obs), self.critic(obs))
        value = value.squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, act.unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            log_std = self.std.log_std
            logp = (-0.5 * ((act - out) / log_std.exp()).pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
            entropy = (0.5 + 0.5 * _LOG_2PI + log_std).sum().expand(out.shape[0])
        logratio = logp - old_logp
        ratio = logratio.exp()
        pg_loss = torch.max(-adv * ratio, -adv * ratio.clamp(1 - a.clip_coef, 1 + a.clip_coef)).mean()
        if a.clip_vloss:
            v_clipped = old_val + (value - old_val).clamp(-a.clip_coef, a.clip_coef)
            v_loss = 0.5 * torch.max((value - ret).pow(2), (v_clipped - ret).pow(2)).mean()
        else:
            v_loss = 0.5 * (value - ret).pow(2).mean()
        ent = entropy.mean()
        loss = pg_loss - a.ent_coef * ent + a.vf_coef * v_loss
        approx_kl = ((ratio.detach() - 1) - logratio.detach()).mean()
        return loss, torch.stack([loss.detach(), pg_loss.detach(), v_loss.detach(), ent.detach(), approx_kl])

    def _update_step(self, b_obs: torch.Tensor, b_act: torch.Tensor, b_logp: torch.Tensor, b_adv: torch.Tensor,
                     b_ret: torch.Tensor, b_val: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        obs, act, old_logp, adv, ret, old_val = b_obs[idx], b_act[idx], b_logp[idx], b_adv[idx], b_ret[idx], b_val[idx]
        if self.a.norm_adv:  # outside the loss: no parameter reaches it
            adv = self.rt.normalize(adv)
        _, stats = self.rt.minimize(lambda: self._loss(obs, act, old_logp, adv, ret, old_val), self.optimizer,
                                    max_grad_norm=self.a.max_grad_norm, has_aux=True)
        return stats

    # -- acting --------------------------------------------------------------------------------
    def _noise(self, steps: int) -> torch.Tensor:
        """The rollout's action noise: Gumbel (discrete) or standard normal (continuous), drawn at once,
        each seed's from its own stream."""
        shape = (steps, self.a.num_envs, self.act_dim)
        if self.discrete:
            u = self.rt.draw(lambda g: torch.rand(shape, device=self.device, generator=g), dim=1).clamp_(1e-12, 1.0 - 1e-7)
            return u.log_().neg_().log_().neg_()  # -log(-log(u))
        return self.rt.draw(lambda g: torch.randn(shape, device=self.device, generator=g), dim=1)

    def _std(self) -> torch.Tensor:
        """The Gaussian's standard deviation for each env's action (each seed's own)."""
        return self.rt.per_env(self.std.log_std.exp(), self.a.num_envs)

    def _evaluate(self, obs: torch.Tensor, act: torch.Tensor, logits: torch.Tensor | None, noise: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probabilities of the taken actions, values) of a (steps, envs) rollout: batched critic
        forwards, and no actor forward (the logits acting kept, or the noise: action = mean + std * noise)."""
        critic, rt = self.policy.modules[1], self.rt
        chunk = max(1, _EVAL_CHUNK_ROWS // obs.shape[1])
        with torch.no_grad(), self.policy.views, rt.autocast():
            value = torch.cat([rt.unrows(critic(rt.rows(part, 1)), part.shape[:2]) for part in obs.split(chunk)]).squeeze(-1)
        with torch.no_grad():
            if logits is not None:
                logp = torch.log_softmax(logits, dim=-1).gather(-1, act.unsqueeze(-1)).squeeze(-1)
            else:
                logp = (-0.5 * noise.pow(2) - self._std().log() - 0.5 * _LOG_2PI).sum(-1)
        return logp, value

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = self.actor(self.rt.h2d(obs, self.obs_dtype))
        if self.discrete:
            return self.rt.d2h(out.argmax(-1))
        return np.clip(self.rt.d2h(out), self.act_low, self.act_high)

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a, rt, timer = self.a, self.rt, self.timer
        if a.anneal_lr:
            self.lr.fill_((1.0 - self.iterations_done / max(1, self.total_iterations)) * a.lr)
        noise = self._noise(a.num_steps)
        with torch.no_grad():  # the rollout's noise on the host, as the sampling below adds it
            noise_host = rt.d2h(noise if self.discrete else self._std() * noise)
        self.done_host.fill(0.0)
        next_obs = self.next_obs
        for step in range(a.num_steps):
            out = self.policy(next_obs)
            if self.discrete:  # Gumbel-max: argmax(logits + Gumbel noise) samples the categorical
                action = (out + noise_host[step]).argmax(-1)
                self.logits_host[step] = out
                env_action = action
            else:
                action = out + noise_host[step]
                env_action = np.clip(action, self.act_low, self.act_high)
            self.obs_host[step] = next_obs
            self.act_host[step] = action

            t = timer.start()
            next_obs, reward, terminated, truncated, info = self.envs.step(env_action)
            timer.stop("env_step", t)
            self.rew_host[step] = reward
            self.env_steps += a.num_envs  # each seed's
            if "final_obs" in info:  # SAME_STEP autoreset: only where an episode ended
                self._episodes_ended(step, terminated, truncated, info)
        self.next_obs = next_obs

        t = timer.start()
        last_obs = rt.h2d(next_obs, self.obs_dtype)
        self.obs_buf, self.act_buf = rt.h2d(self.obs_host), rt.h2d(self.act_host)  # the rollout, one copy each
        logits = None if self.logits_host is None else rt.h2d(self.logits_host)
        timer.stop("h2d", t)
        t = timer.start()  # the rest of acting, batched: collection time, not update time
        self.logp_buf, self.val_buf = self._evaluate(self.obs_buf, self.act_buf, logits, noise)
        timer.stop("act", t)
        t = timer.start()
        stats = self._learn(self.rew_host, self.done_host, last_obs)
        timer.stop("update", t)
        self.iterations_done += 1
        return stats

    def _episodes_ended(self, step: int, terminated: np.ndarray, truncated: np.ndarray, info: dict[str, Any]) -> None:
        """Done flags, the time-limit bootstrap and episode statistics of a step where episodes ended."""
        self.done_host[step] = terminated | truncated
        only_truncated = truncated & ~terminated
        if only_truncated.any():  # time limit: bootstrap from the true last observation
            idx = np.flatnonzero(only_truncated)
            if self.rt.seeds == 1:
                final = np.stack([info["final_obs"][i] for i in idx])
            else:  # every env's row, so that each seed's critic sees its own envs
                final = np.array(self.obs_host[step])
                final[idx] = np.stack([info["final_obs"][i] for i in idx])
            with torch.no_grad():
                value = self.rt.d2h(self.critic(self.rt.h2d(final, self.obs_dtype)).squeeze(-1))
            self.rew_host[step, idx] += self.a.gamma * (value if self.rt.seeds == 1 else value[idx])
        self.record_episodes(finished_episodes(info, by_env=True))

    def _learn(self, rewards: np.ndarray, dones: np.ndarray, last_obs: torch.Tensor) -> dict[str, float]:
        """GAE over the rollout (on the host: its sequential tiny steps cost less in numpy), then every epoch."""
        a = self.a
        with torch.no_grad():
            last_value = self.critic(last_obs).squeeze(-1)
            advantages = self.rt.h2d(_gae(rewards, dones, self.val_buf.cpu().numpy(), last_value.cpu().numpy(),
                                          a.gamma, a.gae_lambda))
            returns = advantages + self.val_buf
        # each seed's rollout as one batch (seeds first when several: the step is vmapped over them)
        batch = tuple(self.rt.by_seed(x, 1) for x in (self.obs_buf, self.act_buf, self.logp_buf, advantages, returns,
                                                     self.val_buf))
        mb, size = self.minibatch_size, self.batch_size
        losses = []
        for _ in range(a.update_epochs):
            perm = self.rt.draw_per_seed(lambda g: torch.randperm(size, device=self.device, generator=g))
            for k in range(size // mb):
                losses.append(self.update(*batch, perm[..., k * mb : (k + 1) * mb]))
                self.updates += 1
        stats = torch.stack(losses)  # one host sync per iteration, not per minibatch
        self.rt.check_finite(stats[..., 0], self.updates)
        mean = stats.mean(0).movedim(-1, 0).tolist()  # per statistic: a value, or one per seed
        return {"loss": mean[0], "policy_loss": mean[1], "value_loss": mean[2], "entropy": mean[3],
                "approx_kl": mean[4], "lr": float(self.lr), "updated": 1.0}

    # -- state ---------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        if self.joint is not None:  # the actor and the critic are its heads
            return {"network": self.joint, "log_std": self.std}
        return {"actor": self.actor, "critic": self.critic, "log_std": self.std}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {"next_obs": self.next_obs, "iterations_done": self.iterations_done}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.next_obs = state["next_obs"]
        self.iterations_done = state["iterations_done"]
