"""Structured-config schemas: the only place where defaults live.

Every YAML file under ``conf/`` extends one of these dataclasses, so a typo in a key or a value of
the wrong type fails when Hydra composes the config. Each toggle adds its own field to
:class:`TrainConfig`; the ``algo`` node is typed with its ``_target_`` class's schema. Ranges are
checked before the first job by each algorithm (with the helpers below) and by :mod:`rlsweep.validate`.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from rlsweep.toggles import TOGGLES
from rlsweep.toggles.base import choice_errors  # noqa: F401 - the algorithms' and validate's

LOGGER_MODES = ("offline", "online", "disabled")
#: ``prepare``: true (one-off costs measured before are reused), full (measured again), false (not prepared)
PREPARE_MODES = ("true", "full", "false")
#: what a job returns to Hydra's sweeper (higher is better for each)
OBJECTIVE_METRICS = ("env_steps_per_s", "updates_per_s", "end_to_end_env_steps_per_s", "final_return")
ACTIVATIONS = ("tanh", "relu")
MAX_TOTAL_ENV_STEPS = 10_000_000_000


@dataclass
class AlgoConfig:
    """Hyper-parameters every algorithm has; an algorithm's own schema subclasses this one."""

    _target_: str = MISSING  # the Algorithm class, as "package.module.Class"
    name: Optional[str] = None  # short name in run names, tags and the report; None: the class's ``name``
    lr: float = 3e-4  # optimizer learning rate
    gamma: float = 0.99  # discount factor
    num_envs: int = 1  # environments stepped together (gymnasium vector env)
    hidden_sizes: list[int] = field(default_factory=lambda: [64, 64])  # MLP widths
    activation: str = "tanh"  # tanh | relu


@dataclass
class PPOConfig(AlgoConfig):
    """Proximal Policy Optimization (clipped surrogate, GAE)."""

    _target_: str = "rlsweep.algos.ppo.PPO"
    name: Optional[str] = "ppo"
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
    encoder: str = "auto"  # auto | mlp | cnn (Nature-DQN CNN); auto: the CNN for image observations


@dataclass
class DQNConfig(AlgoConfig):
    """Deep Q-Network with a target network (optionally Polyak-averaged) and Huber loss.

    Defaults: rl-zoo's CartPole-v1 settings plus Double DQN and a decaying learning rate, for a greedy
    policy reliable across seeds after a short budget (against SB3's DQN: docs/results/dqn_parity.md).
    """

    _target_: str = "rlsweep.algos.dqn.DQN"
    name: Optional[str] = "dqn"
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
    encoder: str = "auto"  # auto | mlp | cnn (Nature-DQN CNN); auto: the CNN for image observations
    init: str = "orthogonal"  # the MLP's initialisation: orthogonal | torch (nn.Linear's own, as SB3's DQN)


@dataclass
class SACConfig(AlgoConfig):
    """Soft Actor-Critic with twin Q networks and automatic entropy tuning."""

    _target_: str = "rlsweep.algos.sac.SAC"
    name: Optional[str] = "sac"
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
    # Atari (ALE) preprocessing as CleanRL and SB3 use it (docs/guide/atari.md); the fields below act only with it
    atari: bool = False
    frame_skip: int = 4  # frames per agent step (max-pooled over the last two)
    frame_stack: int = 4  # stacked 84x84 grey frames per observation
    noop_max: int = 30  # up to this many no-op actions after a reset
    repeat_action_probability: float = 0.0  # ALE sticky actions (0.0: NoFrameskip-v4 dynamics)
    episodic_life: bool = True  # a lost life ends a training episode (the game goes on)
    clip_rewards: bool = True  # sign of the reward for training; recorded returns stay raw


@dataclass
class LoggerConfig:
    """Weights & Biases settings. A None below: W&B's environment variable, else rlsweep's default
    (resolved in one place: :func:`rlsweep.tracking.resolved_logger`)."""

    mode: Optional[str] = None  # offline | online | disabled; None: WANDB_MODE, else offline
    project: Optional[str] = None  # None: WANDB_PROJECT, else rlsweep
    entity: Optional[str] = None  # None: WANDB_ENTITY, else the account's default entity
    dir: Optional[str] = None  # runs go to <dir>/wandb/; None: WANDB_DIR, else the job's folder
    group: Optional[str] = None  # None: derived from the sweep directory
    tags: list[str] = field(default_factory=list)


@dataclass
class ObjectiveConfig:
    """The number a job returns to Hydra's sweeper (``hydra/sweeper=optuna``): higher is better; None
    when the metric was not measured or the final return is below ``min_return`` (fast but not learning)."""

    # env_steps_per_s (steady state) | updates_per_s (steady state) | end_to_end_env_steps_per_s
    # (env steps / whole-job wall time: start-up, compile, evaluation included) | final_return
    metric: str = "env_steps_per_s"
    min_return: Optional[float] = None  # the learning guard; None: none


class ConfigError(ValueError):
    """A config that cannot run; the message is meant for the user, as is."""


@dataclass
class JobConfig:
    """One training job, without the toggles: what trains where, for how long, logged how."""

    algo: Any = MISSING  # the algorithm's hyper-parameters, algo._target_ names its class (see rlsweep.algos.to_object)
    env: EnvConfig = field(default_factory=EnvConfig)
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    objective: ObjectiveConfig = field(default_factory=ObjectiveConfig)  # returned to a Hydra sweeper

    seed: int = 0
    # A cell's seeds trained N at a time in one process, networks stacked, calls vectorised (docs/guide/seeds.md);
    # each seed keeps its own record, W&B run and evaluation. 1: one seed per job
    seeds_per_job: int = 1
    total_env_steps: int = 100_000  # environment steps (over all envs) the job trains for
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    warmup_iters: int = 2  # iterations excluded from steady-state timings
    eval_episodes: int = 10  # deterministic episodes for learning.final_return
    progress: Optional[bool] = None  # progress bar on stderr; None: only when stderr is a terminal
    checkpoint_interval_s: float = 0.0  # periodic checkpoint (0: only on preemption signal)
    deterministic: bool = False  # torch.use_deterministic_algorithms for the job
    # Re-running in the same folder: jobs ok for the same config are kept, the others rerun (from their
    # checkpoint if any). Without it, a folder holding finished jobs is refused (docs/guide/resume.md)
    resume: bool = False
    # A sweep (-m) first pays each cell's one-off costs untimed, so every timed job starts from the same
    # process and cache state (docs/guide/measuring.md). true: a cold compile measured before on this
    # machine, torch and code is reused; full: measured again; false: not prepared (the report flags
    # comparisons across states). Read through rlsweep.prepare.mode (the command line's false is "False")
    prepare: str = "true"


#: A toggle whose field is dotted (``backend.channels_last``) is a key in another toggle's group schema.
TrainConfig = dataclasses.make_dataclass("TrainConfig", [t.config_field() for t in TOGGLES if "." not in t.field],
                                         bases=(JobConfig,))
TrainConfig.__module__ = __name__
TrainConfig.__doc__ = "One training job: JobConfig's fields plus one field per toggle (rlsweep.toggles.TOGGLES)."


def config_values(cfg: JobConfig) -> dict[str, Any]:
    """A job's typed config as plain values: the one form of it that its record stores and its W&B run shows,
    and from which its identities are made (:func:`rlsweep.records.config_identity`: the resume check's, the
    checkpoint's, the preparation's). Key for key and in order, it is Hydra's resolved config of the job."""
    return dataclasses.asdict(cfg)


#: the built-in algorithms' schemas, by their option in the ``algo`` config group
ALGO_SCHEMAS: dict[str, type[AlgoConfig]] = {str(c.name): c for c in (PPOConfig, DQNConfig, SACConfig)}


def register_configs() -> None:
    """Register the schemas with Hydra's ConfigStore, and the resolver of the --help page (idempotent)."""
    from rlsweep.help import register_resolver

    register_resolver()
    cs = ConfigStore.instance()
    cs.store(name="train_schema", node=TrainConfig)
    for name, schema in ALGO_SCHEMAS.items():
        cs.store(group="schema/algo", name=name, node=schema)
    cs.store(group="schema/env", name="env", node=EnvConfig)
    cs.store(group="schema/logger", name="logger", node=LoggerConfig)
    for toggle in TOGGLES:  # a toggle with a config group: conf/<field>/*.yaml extend its schema
        if dataclasses.is_dataclass(toggle.schema):
            cs.store(group=f"schema/{toggle.field}", name=toggle.field, node=toggle.schema)


def algo_owner(target: Any, schema: type | None) -> str:
    """How :func:`unknown_key_message` names an algorithm's schema (None: not known)."""
    return f"{target} (not in its schema, {schema.__name__})" if schema is not None else str(target)


def unknown_key_message(full_key: str, keys: Iterable[str], owner: str) -> str:
    """One line for a key that ``owner`` does not have: the closest of its ``keys``, else all of them (no
    ``+`` suggested: a key missing from a schema cannot be added to it)."""
    prefix, _, name = full_key.rpartition(".")
    names = sorted({str(k) for k in keys if not str(k).startswith("_") and k != "hydra"})
    what = "a hyper-parameter" if prefix == "algo" else "a key"
    close = difflib.get_close_matches(name, names, n=3)
    if close:
        return f"{full_key} is not {what} of {owner}; did you mean " + " or ".join(
            f"{prefix}.{k}" if prefix else k for k in close) + "?"
    return f"{full_key} is not {what} of {owner}; its keys: {', '.join(names)}"


def positive_errors(key: str, value: float, upper: float | None = None) -> list[str]:
    """The message for ``key=value`` unless ``0 < value <= upper`` (finite; no upper bound when None)."""
    if not value > 0:
        return [f"{key} must be > 0, got {value}"]
    if math.isinf(value):
        return [f"{key} must be finite, got {value}"]
    return [f"{key}={value} is too large (at most {upper:,})"] if upper is not None and value > upper else []


def in_range_errors(key: str, value: float, low: float, high: float) -> list[str]:
    """The message for ``key=value`` unless ``low <= value <= high`` (NaN is outside)."""
    return [] if low <= value <= high else [f"{key} must be in [{low}, {high}], got {value}"]


def hyper_parameter_errors(a: AlgoConfig, *, positive: Iterable[str] = (), factor: Iterable[str] = (),
                           probability: Iterable[str] = (), non_negative: Iterable[str] = ()) -> list[str]:
    """The range checks of fields of the ``algo`` node ``a``, by kind: ``positive`` (> 0 and finite: sizes,
    counts), ``factor`` in (0, 1] (a discount, a Polyak factor), ``probability`` in [0, 1] (a lambda, an
    epsilon, a share of the budget), ``non_negative`` (>= 0: a weight that may be off, a number of steps)."""
    errors = [e for key in positive for e in positive_errors(f"algo.{key}", getattr(a, key))]
    errors += [f"algo.{key} must be in (0, 1], got {getattr(a, key)}" for key in factor if not 0 < getattr(a, key) <= 1]
    errors += [e for key in probability for e in in_range_errors(f"algo.{key}", getattr(a, key), 0.0, 1.0)]
    return errors + [f"algo.{key} must be >= 0, got {getattr(a, key)}" for key in non_negative
                     if not getattr(a, key) >= 0]
