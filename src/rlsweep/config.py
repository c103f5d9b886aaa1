"""Structured-config schemas: the only place where defaults live.

Every YAML file under ``conf/`` extends one of these dataclasses, so a typo in a key or a value of
the wrong type fails when Hydra composes the config, before any job starts. Choices that are
fixed lists (compile modes, dtypes, logger modes, ...) are checked in :func:`validate`, which the
Hydra callback runs for every job of a sweep before the first one is launched.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
COMPILED_FUNCTIONS = ("act", "update")  # what every algorithm hands to torch.compile
DTYPES = ("float32", "bfloat16", "float16")
LOGGER_MODES = ("offline", "online", "disabled")
MATMUL_PRECISIONS = ("highest", "high", "medium")
ACTIVATIONS = ("tanh", "relu")
MAX_TOTAL_ENV_STEPS = 10_000_000_000


@dataclass
class AlgoConfig:
    """Hyper-parameters every algorithm has."""

    name: str = MISSING  # ppo | dqn | sac
    lr: float = 3e-4  # optimizer learning rate
    gamma: float = 0.99  # discount factor
    num_envs: int = 1  # environments stepped together (gymnasium vector env)
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # MLP widths
    activation: str = "tanh"  # tanh | relu


@dataclass
class PPOConfig(AlgoConfig):
    """Proximal Policy Optimization (clipped surrogate, GAE)."""

    name: str = "ppo"
    lr: float = 1e-3
    gamma: float = 0.98
    num_envs: int = 8
    num_steps: int = 32  # rollout length per env and iteration
    gae_lambda: float = 0.8  # GAE lambda
    update_epochs: int = 20  # passes over each rollout
    minibatch_size: int = 256  # samples per gradient step
    clip_coef: float = 0.2  # PPO ratio clip
    clip_vloss: bool = False  # clip the value loss like the policy ratio
    ent_coef: float = 0.0  # entropy bonus weight
    vf_coef: float = 0.5  # value loss weight
    max_grad_norm: float = 0.5  # global gradient-norm clip
    anneal_lr: bool = True  # linear learning-rate decay to 0 over the budget
    norm_adv: bool = True  # normalise advantages per minibatch
    log_std_init: float = 0.0  # initial log std of the Gaussian policy (continuous actions)


@dataclass
class DQNConfig(AlgoConfig):
    """Deep Q-Network with a target network (optionally Polyak-averaged) and Huber loss.

    Defaults: rl-zoo's CartPole-v1 settings plus Double DQN and a decaying learning rate, which
    made the greedy policy after 50k steps reliable (500/500/500 on seeds 0-2, against
    500/128/27 with the plain rl-zoo settings).
    """

    name: str = "dqn"
    lr: float = 2.3e-3
    num_envs: int = 1
    hidden_sizes: list[int] = field(default_factory=lambda: [256, 256])
    activation: str = "relu"
    buffer_size: int = 100_000  # replay capacity in transitions
    batch_size: int = 64  # replay samples per gradient step
    learning_starts: int = 1_000  # env steps before the first update
    train_freq: int = 256  # env steps between update bursts
    gradient_steps: int = 128  # gradient steps per burst
    target_update_interval: int = 10  # gradient steps between target updates
    tau: float = 1.0  # Polyak factor of the target update (1.0 = hard copy)
    exploration_fraction: float = 0.16  # share of the budget over which epsilon decays
    start_eps: float = 1.0
    end_eps: float = 0.04
    max_grad_norm: float = 10.0
    double_q: bool = True  # Double DQN target (the online net picks the next action)
    anneal_lr: bool = True  # linear learning-rate decay to 0 over the budget


@dataclass
class SACConfig(AlgoConfig):
    """Soft Actor-Critic with twin Q networks and automatic entropy tuning."""

    name: str = "sac"
    lr: float = 1e-3
    num_envs: int = 1
    hidden_sizes: list[int] = field(default_factory=lambda: [128, 128])  # SB3 uses 256x256
    activation: str = "relu"
    buffer_size: int = 1_000_000  # replay capacity in transitions
    batch_size: int = 256  # replay samples per gradient step
    learning_starts: int = 1_000  # env steps of random actions before updates
    gradient_steps: int = 1  # gradient steps per env step
    steps_per_iteration: int = 250  # env steps per iteration (timing and logging granularity)
    tau: float = 0.005  # Polyak factor of the target critics
    autotune_alpha: bool = True  # learn the entropy temperature
    alpha: float = 0.2  # initial / fixed entropy temperature


@dataclass
class EnvConfig:
    """Which gymnasium environment, and how it is vectorised."""

    id: str = "CartPole-v1"  # any registered gymnasium id
    vectorization: str = "sync"  # sync | async
    max_episode_steps: Optional[int] = None  # None: the env's own limit


@dataclass
class CompileConfig:
    """torch.compile settings (mode "none" = eager)."""

    mode: str = "none"
    fullgraph: bool = False  # fail on graph breaks instead of splitting
    dynamic: Optional[bool] = False  # False: specialise shapes (sizes are fixed in RL loops)
    # which of the algorithm's functions to compile: the acting forward ("act", once per env step)
    # and/or the gradient step ("update"); on a CPU a compiled call can cost more than a tiny
    # eager forward, so compiling only the update is often fastest there
    functions: list[str] = field(default_factory=lambda: list(COMPILED_FUNCTIONS))
    # inductor's C++ wrapper: the compiled graph calls its kernels from C++ instead of one Python
    # call per kernel (a real share of a small network's step); compiling takes longer
    cpp_wrapper: bool = False
    # UNSAFE, opt-in: once the warm-up iterations have compiled everything, dynamo stops checking
    # its guards on each call (torch.compiler.set_stance(skip_guard_eval_unsafe=True)). Right only
    # when nothing a guard checks changes after warm-up: shapes, dtypes, modules (true of
    # rlsweep's algorithms); a change would then run the old graph instead of recompiling
    skip_guards_after_warmup: bool = False


@dataclass
class DtypeConfig:
    """Autocast compute dtype; float32 means no autocast."""

    name: str = "float32"


@dataclass
class BackendConfig:
    """Global PyTorch backend switches (set for the job, restored afterwards)."""

    matmul_precision: str = "highest"  # highest | high (TF32) | medium
    cudnn_benchmark: bool = False  # cuDNN autotuner
    num_threads: Optional[int] = None  # intra-op threads; None: the CPUs this job was given


@dataclass
class LoggerConfig:
    """Weights & Biases settings."""

    mode: str = "offline"  # offline | online | disabled
    project: str = "rlsweep"
    entity: Optional[str] = None
    group: Optional[str] = None  # None: derived from the sweep directory
    tags: list[str] = field(default_factory=list)


@dataclass
class TrainConfig:
    """One training job. Top-level keys are the toggles users sweep over."""

    algo: AlgoConfig = MISSING
    env: EnvConfig = field(default_factory=EnvConfig)
    compile: CompileConfig = field(default_factory=CompileConfig)
    dtype: DtypeConfig = field(default_factory=DtypeConfig)
    backend: BackendConfig = field(default_factory=BackendConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)

    seed: int = 0
    total_env_steps: int = 100_000  # environment steps (over all envs) the job trains for
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    pin_memory: bool = False  # host->device copies go through pinned memory
    non_blocking: bool = False  # host->device copies are asynchronous
    twin_modules: bool = False  # eval-mode twin sharing Parameters instead of .train()/.eval()
    inplace: bool = False  # in-place activations, target updates and normalisation
    warmup_iters: int = 2  # iterations excluded from steady-state timings
    eval_episodes: int = 10  # deterministic episodes for learning.final_return
    progress: bool = True  # progress bar on stderr
    checkpoint_interval_s: float = 0.0  # periodic checkpoint (0: only on preemption signal)
    deterministic: bool = False  # torch.use_deterministic_algorithms for the job
    # Re-running a sweep in the same folder (same hydra.sweep.dir / hydra.run.dir): jobs whose
    # result.json is ok for the same config are skipped, the others rerun (from their checkpoint
    # when there is one). Without it, a folder holding finished jobs is refused. See README.
    resume: bool = False


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore (idempotent)."""
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    cs.store(group="schema/algo", name="ppo", node=PPOConfig)
    cs.store(group="schema/algo", name="dqn", node=DQNConfig)
    cs.store(group="schema/algo", name="sac", node=SACConfig)
    cs.store(group="schema/env", name="env", node=EnvConfig)
    cs.store(group="schema/compile", name="compile", node=CompileConfig)
    cs.store(group="schema/dtype", name="dtype", node=DtypeConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)


ALGO_SCHEMAS: dict[str, type[AlgoConfig]] = {"ppo": PPOConfig, "dqn": DQNConfig, "sac": SACConfig}


def to_object(cfg: Any) -> TrainConfig:
    """Turn a composed DictConfig into typed dataclasses (read once, before the hot loop).

    The ``hydra`` node, present in callbacks, is ignored.
    """
    from omegaconf import OmegaConf

    body = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"])
    merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), body)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]
