"""DQN: epsilon-greedy Q-learning from a replay buffer, with a target network and Huber loss.

The math is written once, in the loss section (TD target, Huber TD loss); both update paths call
it: the eager step (``_update_step``: autograd + torch.optim) and the compiled single-graph step
(``_single_graph_update_step``: torch.func, on CPU).

Where the toggles act:
- the greedy forward (``self._act``, compiled as "act") runs on an eval-mode Q-network: a twin
  or the original switched with ``.eval()``/``.train()`` (``twin_modules``); its Q-values come to
  the host, where numpy's argmax picks the action (a torch op per env step costs several us);
- replay samples live on the host; each training burst draws all its batches at once and copies
  them to the device in one copy per field (``pin_memory``/``non_blocking``); actions come back
  device->host;
- the target network does not change during a burst (it is updated between env steps), so the
  targets' forward runs once per burst, batched over all its gradient steps, not once per step;
- the whole gradient step (target, loss, backward, clip, optimizer step) is compiled ("update"),
  as ONE graph (torch.func gradients + Adam on the optimizer's state: ``algos/functional.py``);
- the target-network update is a Polyak/lerp update, in place or out of place (``inplace``),
  as are the ReLUs.

Image observations (``algo.encoder``: auto picks it for uint8 frames) get the Nature-DQN CNN
(``nets.NatureCNN``; ``hidden_sizes`` do not apply, its 512 features are the hidden layer):
frames stay uint8 in the replay buffer, stored once (no separate next-observation copy), and in
every host->device copy, and are scaled on the device; ``backend.channels_last`` acts on its
convolutions.

Semantics follow Stable-Baselines3 so its hyper-parameters mean the same here: every
``train_freq`` env steps, ``gradient_steps`` gradient steps; the target network is updated
every ``target_update_interval`` env steps; epsilon decays linearly over
``exploration_fraction`` of the budget. A hard target update (``tau`` = 1) when no gradient step
has happened since the last one copies equal values, and is skipped.
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
from rlsweep.config import DQNConfig, TrainConfig
from rlsweep.nets import INITS, NatureCNN, encoder_errors, mlp, uses_cnn
from rlsweep.runtime import Runtime
from rlsweep.timing import PhaseTimer

_TARGET_CHUNK_ROWS = 512

#: the Q-network as the loss sees it: obs -> Q-values of every action; a module, or its forward with given parameters
QFn = Callable[[torch.Tensor], torch.Tensor]


class DQN(Algorithm):
    name = "dqn"
    config_class = DQNConfig
    action_spaces = (gym.spaces.Discrete,)

    @classmethod
    def validate_config(cls, cfg: TrainConfig) -> list[str]:
        errors = encoder_errors(cfg.algo.encoder, cfg.env)
        if cfg.algo.init not in INITS:
            errors.append(f"algo.init={cfg.algo.init!r} is not valid; choose one of: {', '.join(INITS)}")
        return errors

    def __init__(self, cfg: TrainConfig, envs: gym.vector.VectorEnv, rt: Runtime, timer: PhaseTimer) -> None:
        super().__init__(cfg, envs, rt, timer)
        a: DQNConfig = cfg.algo  # type: ignore[assignment]
        self.a = a
        obs_space = envs.single_observation_space
        self.obs_dim = int(np.prod(obs_space.shape))
        self.n_actions = int(envs.single_action_space.n)
        dev = self.device
        self.cnn = uses_cnn(a.encoder, obs_space.shape, obs_space.dtype)
        # frames cross to the device as uint8 (a quarter of float32's bytes); the CNN scales them there
        self.obs_dtype = torch.uint8 if self.cnn else torch.float32
        self.q = self._q_network(obs_space.shape).to(dev)
        self.q_target = self._q_network(obs_space.shape).to(dev)
        self.q_target.load_state_dict(self.q.state_dict())
        self.q_target.requires_grad_(False)
        # lr as a tensor: annealing changes a value, not a Python float (no recompiles)
        self.lr = torch.tensor(a.lr, device=dev)
        self.optimizer = rt.adam(self.q.parameters(), lr=self.lr)
        self.scaler = rt.grad_scaler()

        self.acting = rt.acting_modules(self.q)
        self.act_fn = rt.compile(self._act, "act")
        self.params = list(self.q.parameters())
        # see algos/functional.py; float16's GradScaler keeps the autograd step (it skips steps on overflow)
        self.single_graph_update = rt.compiles("update") and self.scaler is None
        self._q_forward = F.functional_forward(self.q, [n for n, _ in self.q.named_parameters()])
        step = self._single_graph_update_step if self.single_graph_update else self._update_step
        self.update_fn = rt.compile(step, "update")

        if self.cnn:  # uint8 frames, each stored once: half the memory of obs + next_obs arrays
            self.buffer = ReplayBuffer(a.buffer_size, a.num_envs, obs_space.shape, (), np.int64, seed=cfg.seed,
                                       obs_dtype=np.uint8, store_next_obs=False)
        else:
            self.buffer = ReplayBuffer(a.buffer_size, a.num_envs, obs_space.shape, (), np.int64, seed=cfg.seed)
        self.rng = np.random.default_rng(cfg.seed)
        self.next_obs, _ = envs.reset(seed=cfg.seed)
        self.total_env_steps = cfg.total_env_steps
        self._target_every = max(1, a.target_update_interval // a.num_envs)
        self._vector_steps = 0
        self._target_synced_at_update = 0  # self.updates when the target last became a copy of q

    def _q_network(self, obs_shape: tuple[int, ...]) -> nn.Module:
        a, rt = self.a, self.rt
        if self.cnn:
            cnn = NatureCNN(obs_shape, rt)
            return nn.Sequential(cnn, mlp(cnn.features, [], self.n_actions, rt, a.activation))
        return mlp(self.obs_dim, a.hidden_sizes, self.n_actions, rt, a.activation, init=a.init)

    @property
    def iteration_env_steps(self) -> int:
        return max(1, self.a.train_freq // self.a.num_envs) * self.a.num_envs

    def epsilon(self) -> float:
        a = self.a
        span = max(1.0, a.exploration_fraction * self.total_env_steps)
        frac = min(1.0, self.env_steps / span)
        return a.start_eps + frac * (a.end_eps - a.start_eps)

    # -- the loss: written once, called by both update paths -----------------------------------------
    # The Q-network comes in as a callable: the module itself (eager, autograd), or its forward
    # with the given parameters (``torch.func``, the compiled single-graph step).
    def _td_target(self, rewards: torch.Tensor, next_obs: torch.Tensor, next_q_target: torch.Tensor,
                   terminated: torch.Tensor) -> torch.Tensor:
        """r + gamma * (1 - terminated) * Q_target(s', a'): a' the online net's argmax (double Q) or the target's."""
        a = self.a
        with torch.no_grad(), self.rt.autocast():
            if a.double_q:
                best = self.q(next_obs).argmax(-1, keepdim=True)
                next_q = next_q_target.gather(-1, best).squeeze(-1)
            else:
                next_q = next_q_target.max(-1).values
            return rewards + a.gamma * (1.0 - terminated) * next_q

    def _td_loss(self, q: QFn, obs: torch.Tensor, actions: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Huber loss between Q(s, a) of the taken actions and the TD target."""
        with self.rt.autocast():
            q_taken = q(obs).gather(-1, actions.unsqueeze(-1)).squeeze(-1)
        return nn.functional.smooth_l1_loss(q_taken, target)

    # -- acting --------------------------------------------------------------------------------
    def _act(self, obs: torch.Tensor) -> torch.Tensor:
        """Q-values of ``obs`` (the greedy action is their argmax, taken on the host)."""
        (q,) = self.acting.modules
        with self.rt.autocast():
            return q(obs)

    def act_deterministic(self, obs: np.ndarray) -> np.ndarray:
        with torch.no_grad():
            return self.q(torch.as_tensor(obs, dtype=self.obs_dtype, device=self.device)).argmax(-1).cpu().numpy()

    # -- one iteration -------------------------------------------------------------------------------
    def iteration(self) -> dict[str, float]:
        a, rt, timer = self.a, self.rt, self.timer
        next_obs = self.next_obs
        for _ in range(self.iteration_env_steps // a.num_envs):
            eps = self.epsilon()
            explore = self.rng.random(a.num_envs) < eps
            if explore.all():  # no forward needed: every env takes a random action
                actions = self.rng.integers(0, self.n_actions, size=a.num_envs)
            else:
                t = timer.start()
                obs_t = rt.h2d(next_obs, self.obs_dtype)
                t = timer.lap("h2d", t)
                with torch.inference_mode(), self.acting:
                    q_values = self.act_fn(obs_t)
                t = timer.lap("act", t)
                q_np = rt.d2h(q_values)
                timer.stop("d2h", t)
                greedy_np = q_np.argmax(-1)
                random_actions = self.rng.integers(0, self.n_actions, size=a.num_envs)
                actions = np.where(explore, random_actions, greedy_np)

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
        extra = F.adam_state(self.optimizer, self.params).as_args() if self.single_graph_update else ()
        batches = self.buffer.sample(a.batch_size, a.gradient_steps)
        t = timer.start()
        dev = {k: rt.h2d(v, self.obs_dtype if k.endswith("obs") else None) for k, v in batches.items()}
        timer.stop("h2d", t)
        t = timer.start()
        next_q_target = self._next_q_target(dev["next_obs"])
        timer.stop("update", t)
        steps = zip(*(x.unbind(0) for x in (dev["obs"], dev["actions"], dev["rewards"], dev["next_obs"],
                                              next_q_target, dev["terminated"])), strict=True)
        for obs, actions, rewards, next_obs_b, next_q, terminated in steps:
            t = timer.start()
            losses.append(self.update_fn(obs, actions, rewards, next_obs_b, next_q, terminated, *extra))
            timer.stop("update", t)
            self.updates += 1
        loss = torch.stack(losses)
        check_finite(loss, self.updates)
        return {"loss": float(loss.mean()), "epsilon": self.epsilon(), "lr": float(self.lr), "updated": 1.0}

    def _update_target(self) -> None:
        if self.a.tau < 1.0 or self._target_synced_at_update != self.updates:
            self.rt.polyak_update(self.q_target.parameters(), self.q.parameters(), self.a.tau)
            self._target_synced_at_update = self.updates

    @torch.no_grad()
    def _next_q_target(self, next_obs: torch.Tensor) -> torch.Tensor:
        """The target network's Q-values of a whole burst's next observations, in 512-row chunks.

        Chunks, because a layer's activations then stay in cache: faster than one forward over the
        whole burst, and than one per gradient step's batch (docs/results/profiling.md).
        """
        rows = next_obs.reshape(-1, *next_obs.shape[2:])
        with self.rt.autocast():
            q = torch.cat([self.q_target(chunk) for chunk in rows.split(_TARGET_CHUNK_ROWS)])
        return q.reshape(*next_obs.shape[:2], -1)

    def _update_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        next_q_target: torch.Tensor,
        terminated: torch.Tensor,
    ) -> torch.Tensor:
        """One gradient step with autograd and torch.optim.Adam (eager; or compiled with a GradScaler)."""
        a = self.a
        target = self._td_target(rewards, next_obs, next_q_target, terminated)
        loss = self._td_loss(self.q, obs, actions, target)
        self.optimizer.zero_grad(set_to_none=True)
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.q.parameters(), a.max_grad_norm)
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            nn.utils.clip_grad_norm_(self.q.parameters(), a.max_grad_norm)
            self.optimizer.step()
        return loss.detach()

    def _single_graph_update_step(
        self,
        obs: torch.Tensor,
        actions: torch.Tensor,
        rewards: torch.Tensor,
        next_obs: torch.Tensor,
        next_q_target: torch.Tensor,
        terminated: torch.Tensor,
        steps: list[torch.Tensor],
        exp_avgs: list[torch.Tensor],
        exp_avg_sqs: list[torch.Tensor],
    ) -> torch.Tensor:
        """The same step as :meth:`_update_step` as one traceable function (compiled only).

        The same loss, taken as a function of the parameters (``torch.func``), with the global-norm
        clip and Adam on the optimizer's state.
        """
        target = self._td_target(rewards, next_obs, next_q_target, terminated)

        def loss_of(params: list[torch.Tensor]) -> torch.Tensor:
            return self._td_loss(partial(self._q_forward, params), obs, actions, target)

        grads, loss = torch.func.grad_and_value(loss_of)([p.detach() for p in self.params])
        grads = F.clip_grad_norm(grads, self.a.max_grad_norm)
        F.adam_step_(self.params, grads, F.AdamState(steps, exp_avgs, exp_avg_sqs), self.optimizer, self.lr)
        return loss.detach()

    # -- state -----------------------------------------------------------------------------------------
    def modules(self) -> dict[str, nn.Module]:
        return {"q": self.q, "q_target": self.q_target}

    def optimizers(self) -> dict[str, torch.optim.Optimizer]:
        return {"optimizer": self.optimizer}

    def extra_state(self) -> dict[str, Any]:
        return {"buffer": self.buffer.state_dict(), "rng": self.rng.bit_generator.state,
                "next_obs": self.next_obs, "vector_steps": self._vector_steps, "lr": float(self.lr)}

    def load_extra_state(self, state: dict[str, Any]) -> None:
        self.buffer.load_state_dict(state["buffer"])
        self.rng.bit_generator.state = state["rng"]
        self.next_obs = state["next_obs"]
        self._vector_steps = state["vector_steps"]
        self._target_synced_at_update = -1  # unknown: the next target update copies
        self.lr.fill_(state["lr"])
        for group in self.optimizer.param_groups:  # loading optimizer state replaced the lr tensor
            group["lr"] = self.lr

