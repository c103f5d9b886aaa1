"""PPO: clipped surrogate objective, GAE, discrete (categorical) or continuous (Gaussian) actions.

The math is written once: GAE (``_gae``) and the loss (``_losses``, from the networks' outputs);
both update paths call it: the eager step (``_update_step``: autograd + torch.optim) and the
compiled single-graph step (``_single_graph_update_step``: torch.func, on CPU).

Where the toggles act:
- acting runs on eval-mode modules: twins or the originals switched with ``.eval()``/``.train()``
  (``twin_modules``). Per env step only the actor's forward runs on the device (``self._policy``:
  ``self._act`` compiled as "act", or eager the MLP's bare ops); the action is then drawn on the
  host from its output and the rollout's noise (Gumbel-max argmax, or mean + std * noise) in
  numpy, the same float32 operations as in torch at a fraction of the per-op cost. The critic's
  values come after the rollout, in batched eager forwards (``self._evaluate``, timed as "act"
  too): the networks do not change during a rollout, so the numbers are the same up to GEMM
  rounding, and at 8 envs every torch op per step costs several us. The log-probabilities of
  the taken actions come from the logits that acting kept (discrete) or from the noise alone
  (continuous): no second actor forward;
- every env step copies observations host->device (``pin_memory``/``non_blocking``) and the
  actor's output device->host for acting;
- the rollout is kept where its data comes from: observations, actions, rewards and done flags in
  host (numpy) arrays. They cross to the device once per rollout, before the batched evaluation and
  the update, through ``rt.h2d`` too: ``pin_memory`` and ``non_blocking`` act on that copy as well
  (on CPU it is a view, no copy). Per step, a numpy row write is cheaper than indexing a torch
  tensor, whose every op pays the dispatcher (docs/results/profiling.md);
- the whole update step (forward, loss, backward, clip, optimizer step) is one compiled function
  ("update");
- activations and advantage normalisation follow ``inplace``; forwards run under ``dtype`` autocast.

Image observations (``algo.encoder``: auto picks it for uint8 frames) get CleanRL's Atari network:
one Nature-DQN CNN (``nets.NatureCNN``) shared by the actor and critic heads, whose update
runs the encoder once per minibatch; ``hidden_sizes`` do not apply. Frames stay uint8 in the
rollout and in every host->device copy and are scaled on the device; ``backend.channels_last``
acts on the convolutions.

All randomness (action noise, minibatch permutations) is drawn eagerly from torch's seeded
generator and passed into the compiled functions, so compiled and eager runs draw the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from rlsweep.algos import functional as F
from rlsweep.algos.base import Algorithm, check_finite
from rlsweep.config import PPOConfig, TrainConfig
from rlsweep.envs import finished_episodes
from rlsweep.nets import MLP, NatureCNN, encoder_errors, mlp, uses_cnn
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
    name = "ppo"
    config_class = PPOConfig
    action_spaces = (gym.spaces.Discrete, gym.spaces.Box)

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        return encoder_errors(cfg.algo.encoder, cfg.env)

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
        self.cnn = uses_cnn(a.encoder, obs_space.shape, obs_space.dtype)
        # frames cross to the device as uint8 (a quarter of float32's bytes); the CNN scales them there
        self.obs_dtype = torch.uint8 if self.cnn else torch.float32
        self.obs_shape = tuple(obs_space.shape) if self.cnn else (self.obs_dim,)
        if self.cnn:
            encoder = NatureCNN(obs_space.shape, rt)
            self.joint: nn.Module | None = _SharedEncoder(
                encoder, mlp(encoder.features, [], self.act_dim, rt, a.activation, out_gain=0.01),
                mlp(encoder.features, [], 1, rt, a.activation, out_gain=1.0)).to(dev)
            self.actor = nn.Sequential(self.joint.encoder, self.joint.actor_head)
            self.critic = nn.Sequential(self.joint.encoder, self.joint.critic_head)
        else:
            self.joint = None
            self.actor = mlp(self.obs_dim, a.hidden_sizes, self.act_dim, rt, a.activation, out_gain=0.01).to(dev)
            self.critic = mlp(self.obs_dim, a.hidden_sizes, 1, rt, a.activation, out_gain=1.0).to(dev)
        self.log_std = nn.Parameter(torch.full((self.act_dim,), a.log_std_init, device=dev))
        # the shared encoder once: the CNN's parameters are the actor's and the critic's
        params = list(self.joint.parameters()) if self.joint is not None else [
            *self.actor.parameters(), *self.critic.parameters()]
        if not self.discrete:
            params.append(self.log_std)
        # lr as a tensor: annealing it changes a value, not a Python float, so no recompiles
        self.lr = torch.tensor(a.lr, device=dev)
        self.optimizer = rt.adam(params, lr=self.lr, eps=1e-5)
        self.params = params
        self.scaler = rt.grad_scaler()

        self.acting = rt.acting_modules(self.actor, self.critic)
        self.act_fn = rt.compile(self._act, "act")
        # Compiled, the update step is written functionally (torch.func gradients + Adam on the
        # optimizer's own state tensors) so forward, backward, clip and Adam form ONE graph:
        # ``loss.backward()`` and ``optimizer.step()`` would split it into three, and at PPO's
        # minibatch sizes the per-graph call overhead is most of the step's cost
        # (docs/results/profiling.md).
        # Eager keeps autograd + torch.optim.Adam: the baseline every toggle is compared with.
        # float16's GradScaler skips steps on overflow, a host decision: it keeps the autograd step.
        self.single_graph_update = rt.compiles("update") and self.scaler is None
        actor_names = [n for n, _ in self.actor.named_parameters()]
        critic_names = [n for n, _ in self.critic.named_parameters()]
        self._actor_fwd = F.functional_forward(self.actor, actor_names)
        self._critic_fwd = F.functional_forward(self.critic, critic_names)
        self._n_actor_critic = (len(actor_names), len(critic_names))
        if self.joint is not None:
            self._joint_fwd = F.functional_forward(self.joint, [n for n, _ in self.joint.named_parameters()])
            self._n_joint = len(list(self.joint.parameters()))
        step = self._single_graph_update_step if self.single_graph_update else self._update_step
        self.update_fn = rt.compile(step, "update")

        n, s = a.num_envs, a.num_steps
        self.batch_size = n * s
        self.minibatch_size = min(a.minibatch_size, self.batch_size)
        act_shape = (s, n) if self.discrete else (s, n, self.act_dim)
        self.obs_host = np.zeros((s, n, *self.obs_shape), dtype=np.uint8 if self.cnn else np.float32)
        self.act_host = np.zeros(act_shape, dtype=np.int64 if self.discrete else np.float32)
        self.rew_host = np.zeros((s, n), dtype=np.float32)
        self.done_host = np.zeros((s, n), dtype=np.float32)
        # the logits each step acted on (discrete): the rollout's log-probabilities come from them
        self.logits_host = np.zeros((s, n, self.act_dim), dtype=np.float32) if self.discrete else None
        # the device copies of obs_host / act_host, and the rollout's (steps, envs) log-probabilities
        # and values: made after each rollout, before the update
        self.obs_buf = self.act_buf = self.logp_buf = self.val_buf = torch.empty(0)
        self.next_obs, _ = envs.reset(seed=cfg.seed)
        self.iterations_done = 0
        self.total_iterations = 1

    @property
    def iteration_env_steps(self) -> int:
        return self.a.num_envs * self.a.num_steps

    def num_iterations(self, total_env_steps: int) -> int:
        self.total_iterations = super().num_iterations(total_env_steps)
        return self.total_iterations

    # -- the loss: written once, called by both update paths -----------------------------------------
    def _forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(actor output, value) of a minibatch: a shared encoder runs once."""
        if self.joint is not None:
            return self.joint(obs)
        return self.actor(obs), self.critic(obs)

    def _functional_forward(self, params: list[torch.Tensor], obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """:meth:`_forward` with ``params`` (``self.params``' order) in place of the networks' own."""
        if self.joint is not None:
            return self._joint_fwd(params[: self._n_joint], obs)
        n_actor, n_critic = self._n_actor_critic
        return (self._actor_fwd(params[:n_actor], obs), self._critic_fwd(params[n_actor : n_actor + n_critic], obs))

    def _losses(self, out: torch.Tensor, value: torch.Tensor, log_std: torch.Tensor, act: torch.Tensor,
                old_logp: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor, old_val: torch.Tensor
                ) -> tuple[torch.Tensor, torch.Tensor]:
        """PPO's loss from the networks' outputs (``adv`` already normalised); (loss, detached stats)."""
        a = self.a
        value = value.squeeze(-1)
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            logp = logp_all.gather(-1, act.unsqueeze(-1)).squeeze(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
        else:
            std = log_std.exp()
            logp = (-0.5 * ((act - out) / std).pow(2) - log_std - 0.5 * _LOG_2PI).sum(-1)
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

    # -- acting --------------------------------------------------------------------------------
    def _act(self, obs: torch.Tensor) -> torch.Tensor:
        """One env step's actor output (logits or means); :meth:`_sample` draws the actions.

        Values and log-probabilities come from :meth:`_evaluate` after the rollout.
        """
        with self.rt.autocast():
            return self.acting.modules[0](obs)

    def _policy(self) -> Callable[[torch.Tensor], torch.Tensor]:
        """This rollout's per-step actor forward: :meth:`_act`, or, eager, the MLP actor's bare ops
        (``nets.MLP.inference_fn``: the same numbers without per-call transposes and Module calls;
        ~20 -> ~13 us per step at 8 CartPole envs). Made per rollout: no parameter changes within one."""
        if not self.rt.compiles("act"):
            actor = self.acting.modules[0]
            with self.rt.autocast():
                forward = actor.inference_fn() if isinstance(actor, MLP) else None
            if forward is not None:
                return forward
        return self.act_fn

    def _sample(self, out: np.ndarray, noise: np.ndarray) -> np.ndarray:
        """Actions from one step's actor output and noise (host arrays).

        Discrete: Gumbel-max, argmax(logits + Gumbel noise), samples the categorical distribution.
        Continuous: ``noise`` is already ``std * standard normal`` (std is fixed within a rollout).
        """
        if self.discrete:
            return (out + noise).argmax(-1)
        return out + noise

    def _noise(self, steps: int) -> torch.Tensor:
        """The rollout's action noise: Gumbel (discrete) or standard normal (continuous), drawn at once."""
        shape = (steps, self.a.num_envs, self.act_dim)
        if self.discrete:
            u = torch.rand(shape, device=self.device).clamp_(1e-12, 1.0 - 1e-7)
            return u.log_().neg_().log_().neg_()  # -log(-log(u))
        return torch.randn(shape, device=self.device)

    def _evaluate(self, obs: torch.Tensor, act: torch.Tensor, logits: torch.Tensor | None, noise: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-probabilities of the taken actions, values) of a whole (steps, envs) rollout.

        The values are batched critic forwards; eager, not compiled as "act": their batch shape
        differs from the per-step one (a recompile), and they run once per rollout. The
        log-probabilities need no forward: the logits acting drew from (discrete), or the noise
        (continuous: the taken action is mean + std * noise).
        """
        critic = self.acting.modules[1]
        steps, envs = obs.shape[:2]
        # in chunks of steps: at 8 envs x 2048 steps the 64-wide activations of all 16k rows (4 MB)
        # leave the cache, and one forward took ~1.7x as long as 2048-row chunks
        chunk = max(1, _EVAL_CHUNK_ROWS // envs)
        with torch.no_grad(), self.rt.autocast():
            value = torch.cat([critic(part.reshape(-1, *self.obs_shape)) for part in obs.split(chunk)]).reshape(steps, envs)
        with torch.no_grad():
            if logits is not None:
                logp = torch.log_softmax(logits, dim=-1).gather(-1, act.unsqueeze(-1)).squeeze(-1)
            else:
                logp = (-0.5 * noise.pow(2) - self.log_std - 0.5 * _LOG_2PI).sum(-1)
        return logp, value

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            out = self.actor(torch.as_tensor(obs, dtype=self.obs_dtype, device=self.device))
        if self.discrete:
            return out.argmax(-1).cpu().numpy()
        return np.clip(out.cpu().numpy(), self.act_low, self.act_high)

    def _value_of(self, obs: np.ndarray) -> torch.Tensor:
        with torch.no_grad():
            return self.critic(torch.as_tensor(obs, dtype=self.obs_dtype, device=self.device)).squeeze(-1)

    # -- one iteration ----------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a, rt, timer, envs, acting = self.a, self.rt, self.timer, self.envs, self.acting
        obs_host, act_host, rew_host, logits_host = self.obs_host, self.act_host, self.rew_host, self.logits_host
        if a.anneal_lr:
            frac = 1.0 - self.iterations_done / max(1, self.total_iterations)
            self.lr.fill_(frac * a.lr)
        noise = self._noise(a.num_steps)
        # the rollout's noise on the host, in the form _sample adds it, one copy per rollout
        with torch.no_grad():
            noise_host = rt.d2h(noise if self.discrete else self.log_std.exp() * noise)
        self.done_host.fill(0.0)  # set at the steps where episodes end
        policy = self._policy()
        next_obs = self.next_obs
        # nothing made here reaches autograd: inference tensors skip its version counters and view
        # tracking, a real share of a small acting call, eager or compiled (docs/results/profiling.md)
        with torch.inference_mode():
            for step in range(a.num_steps):
                t = timer.start()
                obs_t = rt.h2d(next_obs, self.obs_dtype)
                t = timer.lap("h2d", t)
                with acting:
                    out = policy(obs_t)
                t = timer.lap("act", t)
                out_np = rt.d2h(out)
                timer.stop("d2h", t)
                action_np = self._sample(out_np, noise_host[step])
                env_action = action_np if self.discrete else np.clip(action_np, self.act_low, self.act_high)

                obs_host[step] = next_obs
                act_host[step] = action_np
                if logits_host is not None:
                    logits_host[step] = out_np

                t = timer.start()
                next_obs, reward, terminated, truncated, info = envs.step(env_action)
                timer.stop("env_step", t)

                rew_host[step] = reward
                self.env_steps += a.num_envs
                # SAME_STEP autoreset (envs.make_envs) puts "final_obs" in info exactly when an episode
                # ended: most steps skip the numpy work on the flags (several us each at 8 envs)
                if "final_obs" in info:
                    self._episodes_ended(step, terminated, truncated, info)
        self.next_obs = next_obs

        t = timer.start()
        last_obs = rt.h2d(next_obs, self.obs_dtype)
        self.obs_buf, self.act_buf = rt.h2d(obs_host), rt.h2d(act_host)  # the rollout, in one copy each
        logits = None if logits_host is None else rt.h2d(logits_host)
        timer.stop("h2d", t)

        # the rest of acting, batched: collection time, not update time
        t = timer.start()
        with acting:
            self.logp_buf, self.val_buf = self._evaluate(self.obs_buf, self.act_buf, logits, noise)
        timer.stop("act", t)

        t = timer.start()
        stats = self._update(rew_host, self.done_host, last_obs)
        timer.stop("update", t)
        self.iterations_done += 1
        return stats

    def _episodes_ended(self, step: int, terminated: np.ndarray, truncated: np.ndarray, info: dict[str, Any]) -> None:
        """Done flags, the time-limit bootstrap and episode statistics of a step where episodes ended."""
        self.done_host[step] = terminated | truncated
        only_truncated = truncated & ~terminated
        if only_truncated.any():  # time limit: bootstrap from the true last observation
            idx = np.flatnonzero(only_truncated)
            final = np.stack([info["final_obs"][i] for i in idx])
            self.rew_host[step, idx] += self.a.gamma * self._value_of(final).cpu().numpy()
        self.record_episodes(finished_episodes(info))

    def _update(self, rewards: np.ndarray, dones: np.ndarray, last_obs: torch.Tensor) -> dict[str, float]:
        """GAE over the rollout (host arrays of rewards and done flags), then every epoch's steps."""
        a = self.a
        with torch.no_grad():
            last_value = self.critic(last_obs).squeeze(-1)
            # GAE runs on the host: its 2 x num_steps sequential tiny steps are per-op overhead,
            # several times lower for numpy ops than for torch ops; the same float32 operations in
            # the same order (bit-identical advantages; docs/results/profiling.md)
            advantages = self.rt.h2d(_gae(np.asarray(rewards, dtype=np.float32), np.asarray(dones, dtype=np.float32),
                                          self.val_buf.cpu().numpy(), last_value.cpu().numpy(), a.gamma, a.gae_lambda))
            returns = advantages + self.val_buf

        b_obs = self.obs_buf.reshape(-1, *self.obs_shape)
        b_act = self.act_buf.reshape(self.batch_size, *self.act_buf.shape[2:])
        b_logp, b_adv = self.logp_buf.reshape(-1), advantages.reshape(-1)
        b_ret, b_val = returns.reshape(-1), self.val_buf.reshape(-1)
        n_mb = self.batch_size // self.minibatch_size
        extra = F.adam_state(self.optimizer, self.params).as_args() if self.single_graph_update else ()
        update_fn, mb = self.update_fn, self.minibatch_size
        losses = []
        for _ in range(a.update_epochs):
            perm = torch.randperm(self.batch_size, device=self.device)
            for k in range(n_mb):
                losses.append(update_fn(b_obs, b_act, b_logp, b_adv, b_ret, b_val, perm[k * mb : (k + 1) * mb], *extra))
            self.updates += n_mb
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
        """One minibatch step with autograd and torch.optim.Adam (eager; or compiled with a GradScaler)."""
        a, rt = self.a, self.rt
        obs, act, old_logp, adv, ret, old_val = b_obs[idx], b_act[idx], b_logp[idx], b_adv[idx], b_ret[idx], b_val[idx]
        if a.norm_adv:  # before the loss: no parameter reaches it (and in place it must not be under torch.func)
            adv = rt.normalize(adv)
        with rt.autocast():
            out, value = self._forward(obs)
        loss, stats = self._losses(out, value, self.log_std, act, old_logp, adv, ret, old_val)

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
        return stats

    def _single_graph_update_step(
        self,
        b_obs: torch.Tensor,
        b_act: torch.Tensor,
        b_logp: torch.Tensor,
        b_adv: torch.Tensor,
        b_ret: torch.Tensor,
        b_val: torch.Tensor,
        idx: torch.Tensor,
        steps: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
    ) -> torch.Tensor:
        """The same step as :meth:`_update_step` as one traceable function (compiled only).

        Gradients come from ``torch.func.grad_and_value``; the global-norm clip and Adam are
        torch's own formulas (``clip_grad_norm_``; Adam's tensor-step form) on the optimizer's
        state tensors, so checkpoints and a later eager run see an ordinary Adam state.
        """
        a, rt = self.a, self.rt
        obs, act, old_logp, adv, ret, old_val = b_obs[idx], b_act[idx], b_logp[idx], b_adv[idx], b_ret[idx], b_val[idx]
        if a.norm_adv:  # before the loss: no parameter reaches it (and in place it must not be under torch.func)
            adv = rt.normalize(adv)

        def loss_of(params: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
            log_std = params[-1] if not self.discrete else self.log_std
            with rt.autocast():
                out, value = self._functional_forward(params, obs)
            return self._losses(out, value, log_std, act, old_logp, adv, ret, old_val)

        params = [p.detach() for p in self.params]
        grads, (_, stats) = torch.func.grad_and_value(loss_of, has_aux=True)(params)
        grads = F.clip_grad_norm(grads, a.max_grad_norm)
        F.adam_step_(self.params, grads, F.AdamState(steps, exp_avgs, exp_avg_sqs), self.optimizer, self.lr)
        return stats

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


class _SharedEncoder(nn.Module):
    """CleanRL's Atari actor-critic: one encoder, an actor head and a critic head on its features."""

    def __init__(self, encoder: nn.Module, actor_head: nn.Module, critic_head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.actor_head, self.critic_head = encoder, actor_head, critic_head

    def forward(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        features = self.encoder(obs)
        return self.actor_head(features), self.critic_head(features)
