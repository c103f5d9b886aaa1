"""Pre-flight checks of a composed config: what its types (:mod:`rlsweep.config`) cannot check --
ranges, choices set through a key, gymnasium ids, algorithm/env compatibility, the device, W&B
credentials -- named before any work, every problem at once (:func:`validate`).
"""

from __future__ import annotations

import difflib
import importlib
import math
import re
from typing import Any

from rlsweep.algos import algorithm_class
from rlsweep.config import (
    LOGGER_MODES,
    MAX_TOTAL_ENV_STEPS,
    OBJECTIVE_METRICS,
    PREPARE_MODES,
    ConfigError,
    TrainConfig,
    choice_errors,
    in_range_errors,
    positive_errors,
)
from rlsweep.toggles import TOGGLES

__all__ = ["ConfigError", "seed_errors", "validate"]

_DEVICE_RE = re.compile(r"^(auto|cpu|cuda(:\d+)?)$")
#: evaluation runs all its episodes side by side, one env each
MAX_EVAL_EPISODES = 1000
#: seeds one process trains together (each holds num_envs envs and its networks in memory)
MAX_SEEDS_PER_JOB = 1024


def seed_errors(seed: Any) -> list[str]:
    """Why ``seed`` cannot be a job's seed (empty: it can). The only check of :func:`validate` that
    reads the seed (a sweep's pre-flight checks a cell's further seeds with this alone): keep it so."""
    return in_range_errors("seed", seed, 0, 2**32 - 1)  # what np.random.seed takes


def _env_action_space(env_id: str, errors: list[str]) -> Any:
    import gymnasium as gym

    # gymnasium's "module:EnvId-v0" form imports a module that registers the env
    module, _, name = env_id.rpartition(":")
    if module:
        try:
            importlib.import_module(module)
        except Exception as exc:  # noqa: BLE001 - any import failure is a config problem here
            errors.append(f"env.id={env_id!r}: module {module!r} cannot be imported ({type(exc).__name__}: {exc})")
            return None
        env_id = name
    try:
        gym.spec(env_id)
    except gym.error.Error:
        ids = list(gym.envs.registry.keys())
        close = difflib.get_close_matches(env_id, ids, n=3, cutoff=0.6)
        hint = f" Did you mean: {', '.join(close)}?" if close else " See gymnasium.envs.registry for ids."
        errors.append(f"env.id={env_id!r} is not a registered gymnasium environment.{hint}")
        return None
    try:
        env = gym.make(env_id)
    except gym.error.DependencyNotInstalled as exc:
        errors.append(f"env.id={env_id!r} needs packages that are not installed ({exc}); "
                      "for MuJoCo envs: pip install -e '.[mujoco]'")
        return None
    except Exception as exc:  # noqa: BLE001 - any construction failure is a config problem here
        errors.append(f"env.id={env_id!r} cannot be created: {type(exc).__name__}: {exc}")
        return None
    try:
        return env.action_space
    finally:
        env.close()


def validate(cfg: TrainConfig, *, check_device: bool = True) -> list[str]:
    """Every reason ``cfg`` cannot run; an empty list means it can: the config's own
    (:func:`config_errors`) and this machine's (:func:`machine_errors`).

    Args:
        cfg: the composed, typed config.
        check_device: check that the device exists here (off when the job runs elsewhere,
            e.g. a Slurm GPU node launched from a CPU login node).
    """
    return config_errors(cfg) + machine_errors(cfg, check_device=check_device)


def config_errors(cfg: TrainConfig) -> list[str]:
    """What is wrong with the config itself, wherever it would run: checked once, before any job starts."""
    errors: list[str] = []
    for toggle in TOGGLES:
        errors += toggle().validate(cfg)
    if cfg.logger.mode is not None:  # None: WANDB_MODE, checked with the machine
        errors += choice_errors("logger.mode", cfg.logger.mode, LOGGER_MODES)
    errors += choice_errors("prepare", str(cfg.prepare).lower(), PREPARE_MODES)
    errors += choice_errors("objective.metric", cfg.objective.metric, OBJECTIVE_METRICS)
    if cfg.objective.min_return is not None and not math.isfinite(cfg.objective.min_return):
        errors.append(f"objective.min_return must be a finite number or null, got {cfg.objective.min_return}")
    errors += choice_errors("env.vectorization", cfg.env.vectorization, ("sync", "async"))
    errors += positive_errors("total_env_steps", cfg.total_env_steps, MAX_TOTAL_ENV_STEPS)
    if cfg.env.max_episode_steps is not None:
        errors += positive_errors("env.max_episode_steps", cfg.env.max_episode_steps)
    errors += seed_errors(cfg.seed)
    if cfg.warmup_iters < 0:
        errors.append(f"warmup_iters must be >= 0, got {cfg.warmup_iters}")
    errors += in_range_errors("eval_episodes", cfg.eval_episodes, 0, MAX_EVAL_EPISODES)
    if not _DEVICE_RE.match(cfg.device):
        errors.append(f"device={cfg.device!r} is not valid; use auto, cpu, cuda or cuda:N")
    algo_cls = algorithm_class(cfg.algo._target_)
    errors += algo_cls.validate_config(cfg)  # the algorithm's hyper-parameters, by the algorithm itself
    errors += positive_errors("seeds_per_job", cfg.seeds_per_job, MAX_SEEDS_PER_JOB)
    if cfg.seeds_per_job > 1 and not algo_cls.seeds_together:
        from rlsweep.algos.base import seeds_together_refusal

        errors.append(seeds_together_refusal(algo_cls))
    return errors


def machine_errors(cfg: TrainConfig, *, check_device: bool = True) -> list[str]:
    """What this machine lacks to run ``cfg``: the CUDA device (``check_device``), W&B's mode and credentials
    from its environment, the env's packages (Atari's ROMs), an env whose action space the algorithm drives.
    A job checks these again where it runs: a Slurm node may differ from the machine that launched it."""
    from rlsweep.tracking import resolved_logger, wandb_credentials_problem

    errors: list[str] = []
    if check_device and _DEVICE_RE.match(cfg.device) and cfg.device.startswith("cuda"):
        import torch

        if not torch.cuda.is_available():
            errors.append(f"device={cfg.device} but no CUDA device is available here (torch {torch.__version__}, "
                          f"CUDA build: {torch.version.cuda}); use device=cpu or device=auto")
        elif ":" in cfg.device and int(cfg.device.split(":")[1]) >= torch.cuda.device_count():
            errors.append(f"device={cfg.device} but only {torch.cuda.device_count()} CUDA device(s) exist")
    try:
        wandb_settings = resolved_logger(cfg.logger)  # the config, else W&B's environment variables
    except ValueError as exc:
        errors.append(str(exc))
    else:
        if wandb_settings.mode == "online" and (problem := wandb_credentials_problem()):
            source = " (from WANDB_MODE)" if wandb_settings.mode_source == "WANDB_MODE" else ""
            errors.append(f"logger.mode=online{source} but {problem}: run `wandb login` or set WANDB_API_KEY, "
                          "or use logger.mode=offline (sync later with `wandb sync`)")

    from rlsweep.envs import atari_errors

    errors += atari_errors(cfg.env)  # also registers ale-py's ids (ALE/Pong-v5) for the checks below
    algo_cls = algorithm_class(cfg.algo._target_)
    space = _env_action_space(cfg.env.id, errors)
    if space is not None and not isinstance(space, algo_cls.action_spaces):
        import gymnasium as gym

        kinds = " or ".join(s.__name__ for s in algo_cls.action_spaces)
        example = "env=cartpole" if issubclass(gym.spaces.Discrete, algo_cls.action_spaces) else "env=pendulum"
        errors.append(f"algo={cfg.algo.name} needs a {kinds} action space, but {cfg.env.id} has {space}; "
                      f"pick another env (e.g. {example}) or another algo")
    return errors
