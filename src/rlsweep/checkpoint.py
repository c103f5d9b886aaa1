"""Checkpoints: everything a job needs to continue exactly where it stopped.

Networks, optimizers, algorithm state (replay buffer, rollout position, RNGs), the environments
themselves (synchronous vector envs are pickled whole, so a resumed job sees the same episodes),
torch/numpy/python RNG states, the timers and the runner's counters. Written atomically; a
checkpoint is only used by a job whose config matches the one that wrote it.
"""

from __future__ import annotations

import hashlib
import io
import json
import pickle
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlsweep.config import TrainConfig
from rlsweep.results import write_bytes_atomic

CHECKPOINT_FILE = "checkpoint.pt"
#: config keys that do not change what a job computes
_VOLATILE = ("progress", "logger", "checkpoint_interval_s", "eval_episodes", "resume")


def config_digest(cfg: TrainConfig) -> str:
    d = asdict(cfg)
    for key in _VOLATILE:
        d.pop(key, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pickle_envs(envs: gym.vector.VectorEnv) -> bytes | None:
    """The vector env with its sub-envs' state, or None when it cannot be pickled (async)."""
    base = envs.unwrapped
    if not isinstance(base, gym.vector.SyncVectorEnv):
        return None
    fns, base.env_fns = base.env_fns, None  # closures: not picklable, and not needed after creation
    try:
        return pickle.dumps(envs)
    except (pickle.PicklingError, TypeError, AttributeError):
        return None
    finally:
        base.env_fns = fns


def rng_state() -> dict[str, Any]:
    state = {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    torch.set_rng_state(state["torch"])
    np.random.set_state(state["numpy"])
    random.setstate(state["python"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def save(path: Path, cfg: TrainConfig, algo: Any, runner_state: dict[str, Any]) -> None:
    payload = {
        "config_digest": config_digest(cfg),
        "modules": {k: m.state_dict() for k, m in algo.modules().items()},
        "optimizers": {k: o.state_dict() for k, o in algo.optimizers().items()},
        "algo_extra": algo.extra_state(),
        "algo_counters": {"env_steps": algo.env_steps, "updates": algo.updates, "episodes": algo.episodes},
        "envs": pickle_envs(algo.envs),
        "rng": rng_state(),
        "timer": algo.timer.state_dict(),
        "runner": runner_state,
    }
    buf = io.BytesIO()
    torch.save(payload, buf)
    write_bytes_atomic(Path(path), buf.getvalue())


def load(path: Path, cfg: TrainConfig) -> dict[str, Any] | None:
    """The checkpoint at ``path`` if it exists and was written for this config, else None."""
    path = Path(path)
    if not path.is_file():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=False)
    if payload.get("config_digest") != config_digest(cfg):
        return None
    return payload


def restore(payload: dict[str, Any], algo: Any) -> gym.vector.VectorEnv | None:
    """Put ``payload`` into ``algo``; returns the restored envs (None: keep the fresh ones)."""
    for k, m in algo.modules().items():
        m.load_state_dict(payload["modules"][k])
    for k, o in algo.optimizers().items():
        o.load_state_dict(payload["optimizers"][k])
    algo.load_extra_state(payload["algo_extra"])
    counters = payload["algo_counters"]
    algo.env_steps, algo.updates, algo.episodes = counters["env_steps"], counters["updates"], list(counters["episodes"])
    algo.timer.load_state_dict(payload["timer"])
    set_rng_state(payload["rng"])
    if payload["envs"] is None:
        return None
    return pickle.loads(payload["envs"])
