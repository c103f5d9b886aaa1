"""TorchRL peers: PPO, DQN and SAC built from TorchRL's own components.

The hyper-parameters are SB3's (:data:`benchmarks.peers.SB3_SETTINGS`, with the same quick-mode
overrides), so TorchRL, SB3 and rlsweep train the same algorithm with the same numbers. Each job
uses TorchRL's parts as its users would: a ``Collector`` over a ``GymEnv`` (for PPO's 8 envs,
gymnasium's ``SyncVectorEnv`` in a ``GymWrapper``: envs stepped in turn, like SB3's
``DummyVecEnv``), ``ClipPPOLoss`` + ``GAE``, ``DQNLoss`` + ``HardUpdate``, ``SACLoss`` +
``SoftUpdate``, and its replay buffers.

Where SB3 differs from TorchRL's defaults, SB3's choice is written out here:
- PPO: separate 64x64 tanh actor and critic with SB3's orthogonal init (gains sqrt(2), 0.01 for
  the policy head, 1 for the value head), Adam eps 1e-5, advantages computed once per rollout and
  normalised per minibatch, mean-squared value loss, grad-norm clip 0.5, whole rollouts.
- DQN: 256x256 ReLU Q-network, Huber loss, grad-norm clip 10, epsilon annealed linearly from 1.0
  to 0.04 over 16% of the run, uniform random actions before ``learning_starts``, the target
  copied between gradient bursts (SB3 copies it every 10 env steps, all of which fall between
  bursts when ``train_freq`` is 256).
- SAC: SB3's squashed Gaussian (log-std clamped to [-20, 2]), two 256x256 ReLU Q-networks,
  temperature learned from 1.0 with target entropy -|A|, Polyak tau 0.005, 3 Adam optimisers.
  TorchRL's critic loss is the sum of the two Q-networks' mean-squared errors; SB3's is half of
  it: Adam is invariant to that scale up to its eps.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from benchmarks.peers import SB3_SETTINGS, SteadyClock, peer_record


def run_torchrl(algo: str, total_env_steps: int, seed: int, steady_from_env_steps: int,
                eval_episodes: int = 10, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
    """Train TorchRL's ``algo`` for ``total_env_steps`` on 1 intra-op thread and measure it (like run_sb3)."""
    import torch

    torch.set_num_threads(1)
    import torchrl

    s = SB3_SETTINGS[algo]
    hp = {**s["kwargs"], **(overrides or {})}
    torch.manual_seed(seed)
    t_start = time.perf_counter()
    env = _env(s["env_id"], s["n_envs"], seed)
    clock = SteadyClock(steady_from_env_steps)
    train = {"ppo": _ppo, "dqn": _dqn, "sac": _sac}[algo]
    t0 = time.perf_counter()
    policy, steps = train(env, hp, total_env_steps, clock)
    t_end = time.perf_counter()
    torch.set_num_threads(1)  # TorchRL's collector sets the thread count back when it shuts down
    returns = _evaluate(policy, s["env_id"], eval_episodes, seed + 10_000) if eval_episodes > 0 else []
    return peer_record(clock, steps, t_start, t0, t_end, returns, torchrl.__version__)


def _evaluate(policy: Callable[[Any], Any], env_id: str, episodes: int, seed: int) -> list[float]:
    """Deterministic returns with the very evaluation rlsweep's jobs use."""
    import torch

    from rlsweep.config import EnvConfig
    from rlsweep.envs import evaluate

    @torch.no_grad()
    def act(obs: np.ndarray) -> np.ndarray:
        return policy(torch.as_tensor(obs, dtype=torch.float32)).numpy()

    return evaluate(act, EnvConfig(id=env_id), episodes, seed)


#: the policies here are not recurrent: no InitTracker transform (silences TorchRL 0.14's FutureWarning)
_COLLECTOR: dict[str, Any] = {"auto_register_policy_transforms": False}


def _env(env_id: str, n_envs: int, seed: int) -> Any:
    """One ``GymEnv``, or gymnasium's SyncVectorEnv of ``n_envs`` in TorchRL's ``GymWrapper``.

    The wrapped SyncVectorEnv (auto-reset in the same step, which TorchRL requires; it reads the
    terminal observation back from ``info``) collected PPO's rollouts ~35% faster than a
    ``SerialEnv`` of ``GymEnv``s here, and it is the env the limit steps: the peer gets its faster path.
    """
    import gymnasium as gym
    from torchrl.envs import GymEnv, GymWrapper

    if n_envs == 1:
        env = GymEnv(env_id)
    else:
        env = GymWrapper(gym.make_vec(env_id, num_envs=n_envs, vectorization_mode="sync",
                                      vector_kwargs={"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}))
    env.set_seed(seed)
    return env


def _mlp(n_in: int, n_out: int, hidden: list[int], activation: type) -> Any:
    from torchrl.modules import MLP

    return MLP(in_features=n_in, out_features=n_out, num_cells=list(hidden), activation_class=activation)


def _orthogonal_init(net: Any, out_gain: float) -> None:
    """SB3's ActorCriticPolicy init: orthogonal weights (gain sqrt(2), last layer ``out_gain``), zero biases."""
    import torch

    linears = [m for m in net.modules() if isinstance(m, torch.nn.Linear)]
    for i, m in enumerate(linears):
        torch.nn.init.orthogonal_(m.weight, gain=out_gain if i == len(linears) - 1 else math.sqrt(2))
        torch.nn.init.zeros_(m.bias)


# -- PPO -----------------------------------------------------------------------------------------
def _ppo(env: Any, hp: dict[str, Any], total_env_steps: int, clock: SteadyClock) -> tuple[Callable[[Any], Any], int]:
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.modules import OneHotCategorical, ProbabilisticActor, ValueOperator
    from torchrl.objectives import ClipPPOLoss
    from torchrl.objectives.value import GAE

    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    actor_net = _mlp(n_obs, n_act, [64, 64], torch.nn.Tanh)
    critic_net = _mlp(n_obs, 1, [64, 64], torch.nn.Tanh)
    _orthogonal_init(actor_net, 0.01)
    _orthogonal_init(critic_net, 1.0)
    actor = ProbabilisticActor(TensorDictModule(actor_net, in_keys=["observation"], out_keys=["logits"]),
                               in_keys=["logits"], spec=env.action_spec, distribution_class=OneHotCategorical,
                               return_log_prob=True)
    critic = ValueOperator(critic_net, in_keys=["observation"])
    frames_per_batch = env.batch_size.numel() * hp["n_steps"]
    total = math.ceil(total_env_steps / frames_per_batch) * frames_per_batch  # SB3 runs whole rollouts too
    collector = Collector(env, actor, frames_per_batch=frames_per_batch, total_frames=total, **_COLLECTOR)
    gae = GAE(gamma=hp["gamma"], lmbda=hp["gae_lambda"], value_network=critic, average_gae=False)
    loss_fn = ClipPPOLoss(actor, critic, clip_epsilon=hp["clip_range"], entropy_bonus=hp["ent_coef"] > 0,
                          entropy_coeff=hp["ent_coef"], critic_coeff=hp["vf_coef"], loss_critic_type="l2",
                          normalize_advantage=True)
    params = list(loss_fn.parameters())
    optim = torch.optim.Adam(params, lr=hp["learning_rate"], eps=1e-5)
    steps = 0
    clock.collection_starts(steps)
    for data in collector:
        steps += data.numel()
        with torch.no_grad():
            data = gae(data)
        flat = data.reshape(-1)
        for _ in range(hp["n_epochs"]):
            perm = torch.randperm(flat.numel())
            for i in range(0, flat.numel(), hp["batch_size"]):
                out = loss_fn(flat[perm[i:i + hp["batch_size"]]])
                loss = out["loss_objective"] + out["loss_critic"] + out.get("loss_entropy", 0.0)
                optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, hp["max_grad_norm"])
                optim.step()
        clock.collection_starts(steps)
    collector.shutdown()
    return lambda obs: actor_net(obs).argmax(-1), steps


# -- DQN -----------------------------------------------------------------------------------------
def _dqn(env: Any, hp: dict[str, Any], total_env_steps: int, clock: SteadyClock) -> tuple[Callable[[Any], Any], int]:
    import torch
    from tensordict.nn import TensorDictSequential
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.modules import EGreedyModule, QValueActor
    from torchrl.objectives import DQNLoss, HardUpdate

    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    q_net = _mlp(n_obs, n_act, hp["policy_kwargs"]["net_arch"], torch.nn.ReLU)
    qvalue = QValueActor(q_net, in_keys=["observation"], spec=env.action_spec)
    egreedy = EGreedyModule(env.action_spec, eps_init=1.0, eps_end=hp["exploration_final_eps"],
                            annealing_num_steps=int(hp["exploration_fraction"] * total_env_steps))
    collector = Collector(env, TensorDictSequential(qvalue, egreedy), frames_per_batch=hp["train_freq"],
                          total_frames=total_env_steps, init_random_frames=hp["learning_starts"], **_COLLECTOR)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(hp["buffer_size"]), batch_size=hp["batch_size"])
    loss_fn = DQNLoss(qvalue, loss_function="smooth_l1", delay_value=True, action_space=env.action_spec)
    loss_fn.make_value_estimator(gamma=hp["gamma"])
    target = HardUpdate(loss_fn, value_network_update_interval=1)
    params = list(loss_fn.value_network_params.flatten_keys().values())
    optim = torch.optim.Adam(params, lr=hp["learning_rate"])
    steps = 0
    clock.collection_starts(steps)
    for data in collector:
        steps += data.numel()
        buffer.extend(data.reshape(-1))
        egreedy.step(data.numel())
        if steps > hp["learning_starts"]:
            for _ in range(hp["gradient_steps"]):
                loss = loss_fn(buffer.sample())["loss"]
                optim.zero_grad()
                loss.backward()
                torch.nn.utils.clip_grad_norm_(params, 10.0)  # SB3 DQN's max_grad_norm
                optim.step()
            target.step()
        clock.collection_starts(steps)
    collector.shutdown()
    return lambda obs: q_net(obs).argmax(-1), steps


# -- SAC -----------------------------------------------------------------------------------------
def _gaussian_head() -> Any:
    """A module splitting a net's output into (loc, scale), with SB3's log-std clamp."""
    import torch

    class GaussianHead(torch.nn.Module):
        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            loc, log_std = x.chunk(2, dim=-1)
            return loc, log_std.clamp(-20.0, 2.0).exp()

    return GaussianHead()


def _sac(env: Any, hp: dict[str, Any], total_env_steps: int, clock: SteadyClock) -> tuple[Callable[[Any], Any], int]:
    import torch
    from tensordict.nn import TensorDictModule
    from torchrl.collectors import Collector
    from torchrl.data import LazyTensorStorage, TensorDictReplayBuffer
    from torchrl.modules import ProbabilisticActor, TanhNormal, ValueOperator
    from torchrl.objectives import SACLoss, SoftUpdate

    n_obs = env.observation_spec["observation"].shape[-1]
    n_act = env.action_spec.shape[-1]
    hidden = hp["policy_kwargs"]["net_arch"]
    actor_net = torch.nn.Sequential(_mlp(n_obs, 2 * n_act, hidden, torch.nn.ReLU), _gaussian_head())
    low, high = env.action_spec.space.low, env.action_spec.space.high
    actor = ProbabilisticActor(TensorDictModule(actor_net, in_keys=["observation"], out_keys=["loc", "scale"]),
                               in_keys=["loc", "scale"], spec=env.action_spec, distribution_class=TanhNormal,
                               distribution_kwargs={"low": low, "high": high, "tanh_loc": False})
    qvalue = ValueOperator(_mlp(n_obs + n_act, 1, hidden, torch.nn.ReLU), in_keys=["observation", "action"],
                           out_keys=["state_action_value"])
    loss_fn = SACLoss(actor, qvalue, num_qvalue_nets=2, loss_function="l2", alpha_init=1.0,
                      target_entropy="auto", delay_qvalue=True, action_spec=env.action_spec)
    loss_fn.make_value_estimator(gamma=hp["gamma"])
    target = SoftUpdate(loss_fn, tau=hp["tau"])
    lr = hp["learning_rate"]
    optims = [torch.optim.Adam(list(loss_fn.actor_network_params.flatten_keys().values()), lr=lr),
              torch.optim.Adam(list(loss_fn.qvalue_network_params.flatten_keys().values()), lr=lr),
              torch.optim.Adam([loss_fn.log_alpha], lr=lr)]
    collector = Collector(env, actor, frames_per_batch=hp["train_freq"], total_frames=total_env_steps,
                          init_random_frames=hp["learning_starts"], **_COLLECTOR)
    buffer = TensorDictReplayBuffer(storage=LazyTensorStorage(hp["buffer_size"]), batch_size=hp["batch_size"])
    steps = 0
    clock.collection_starts(steps)
    for data in collector:
        steps += data.numel()
        buffer.extend(data.reshape(-1))
        if steps > hp["learning_starts"]:
            for _ in range(hp["gradient_steps"]):
                out = loss_fn(buffer.sample())
                loss = out["loss_actor"] + out["loss_qvalue"] + out["loss_alpha"]
                for o in optims:
                    o.zero_grad()
                loss.backward()
                for o in optims:
                    o.step()
                target.step()
        clock.collection_starts(steps)
    collector.shutdown()
    scale, mid = (high - low) / 2, (high + low) / 2
    return lambda obs: torch.tanh(actor_net(obs)[0]) * scale + mid, steps
