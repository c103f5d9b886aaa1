"""Checkpoints: everything a job needs to continue exactly where it stopped.

Networks, optimizers, algorithm state, the (synchronous) envs pickled whole, RNG states, timers and
the runner's counters, in one file written atomically: a magic line, a JSON header line (the
payload's length and sha256, checked before torch unpickles anything; the config's digest; the code
``history`` of the job's attempts), then the torch.save payload.
"""

from __future__ import annotations

import errno
import functools
import hashlib
import io
import logging
import pickle
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from rlsweep import records
from rlsweep.config import TrainConfig, config_values
from rlsweep.records import CHECKPOINT_MAGIC, CHECKPOINT_VOLATILE, checkpoint_head, split_checkpoint, write_bytes_atomic
from rlsweep.results import provenance, utc_now

log = logging.getLogger(__name__)


class CheckpointWriteError(OSError):
    """The checkpoint could not be written (the disk is full, say); the previous one is untouched."""


def config_digest(cfg: TrainConfig) -> str:
    """Which config a checkpoint was written for: ``cfg`` but the keys that change no checkpoint
    (:data:`rlsweep.records.CHECKPOINT_VOLATILE`: a run resumed with prepare=false keeps its checkpoints,
    as it keeps its finished records)."""
    return records.config_digest(config_values(cfg), CHECKPOINT_VOLATILE)


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


@functools.lru_cache(maxsize=16)
def code_state(algo_class: type) -> dict[str, Any]:
    """The git commit and dirty flag of rlsweep (and of the algorithm, when in another repository);
    cached, as the code of a running process does not change."""
    return code_of(provenance(algo_class))


def code_of(prov: dict[str, Any]) -> dict[str, Any]:
    """The commit/dirty fields of a record's ``provenance`` that a checkpoint's history keeps."""
    code = prov["code"]
    out: dict[str, Any] = {"commit": None, "dirty": None}
    if code.get("rlsweep"):
        out.update(commit=code["rlsweep"]["commit"], dirty=code["rlsweep"]["dirty"])
    if code.get("algorithm"):
        out.update(algorithm_commit=code["algorithm"]["commit"], algorithm_dirty=code["algorithm"]["dirty"])
    return out


def code_history(header: dict[str, Any] | None, code: dict[str, Any]) -> list[dict[str, Any]]:
    """The attempts of a job that resumes from ``header`` (None: starts afresh) and runs on ``code``, each
    as a checkpoint's (and a record's) ``history`` lists it: from where, on which code."""
    attempt, start = (0, 0) if header is None else (header["attempt"] + 1, header["env_steps"])
    return [*(header or {}).get("history", []), {"attempt": attempt, "from_env_steps": start, **code}]


def save(path: Path, cfg: TrainConfig, algo: Any, runner_state: dict[str, Any],
         resumed: dict[str, Any] | None = None) -> None:
    """Write the checkpoint of ``algo`` and the runner's counters to ``path``, atomically; ``resumed``:
    the header of the checkpoint this attempt of the job resumed from (None: it started afresh).

    Raises:
        CheckpointWriteError: the file could not be written (no space left, say); ``path`` still
            holds the previous checkpoint, whole.
    """
    path = Path(path)
    digest = config_digest(cfg)
    payload = {
        "config_digest": digest,
        "modules": {k: m.state_dict() for k, m in algo.modules().items()},
        "optimizers": {k: o.state_dict() for k, o in algo.optimizers().items()},
        "algo_extra": algo.extra_state(),
        # float16's loss scale, one per rt.update (None where it has no GradScaler)
        "grad_scalers": [u.scaler.state_dict() if u.scaler is not None else None for u in algo.rt._updates],
        "algo_counters": {"env_steps": algo.env_steps, "updates": algo.updates, "episodes": algo.episodes},
        "envs": pickle_envs(algo.envs),
        "rng": {"torch": torch.get_rng_state(), "numpy": np.random.get_state(), "python": random.getstate(),
                **({"cuda": torch.cuda.get_rng_state_all()} if torch.cuda.is_available() else {})},
        # each seed's own stream (rt.draw) and the seeds that stopped (seeds_per_job)
        "seed_rngs": [g.get_state() for g in algo.rt.rngs],
        "failed_seeds": dict(algo.rt.failed),
        "timer": algo.timer.state_dict(),
        "runner": runner_state,
    }
    buf = io.BytesIO()
    torch.save(payload, buf)
    body = buf.getvalue()
    # this attempt's place among the job's attempts: after those of the checkpoint it resumed from
    history = code_history(resumed, code_state(type(algo)))
    header = {
        "sha256": hashlib.sha256(body).hexdigest(),
        "bytes": len(body),
        "config_digest": digest,
        "env_steps": int(algo.env_steps),
        "attempt": history[-1]["attempt"],
        "written_at": utc_now("seconds"),
        "code": history[-1],
        "history": history,
    }
    head = checkpoint_head(header)
    try:
        write_bytes_atomic(path, head + body)
    except OSError as exc:
        if exc.errno in (errno.ENOSPC, errno.EDQUOT):
            raise CheckpointWriteError(
                exc.errno, f"checkpoint not written: no space left on device in {path.parent} "
                f"({len(head) + len(body):,} bytes needed); the previous checkpoint there is kept") from exc
        raise


@dataclass
class Found:
    """A job's checkpoint file as :func:`read` found it: its header and payload when whole and of the job's
    config, else why it must not be used (``rejected``: truncated, corrupted, of another config; all three
    None when there is no file)."""

    header: dict[str, Any] | None = None
    body: bytes | None = field(default=None, repr=False)
    rejected: str | None = None


def read(path: Path, cfg: TrainConfig) -> Found:
    """The checkpoint at ``path``, read and verified once (its header, then the payload's length and
    sha256, then the config's digest) before anything is unpickled; a rejected one is logged."""
    found = _verified(Path(path), cfg)
    if found.rejected:
        log.warning("%s not used: %s; the job starts afresh", path, found.rejected)
    return found


def _verified(path: Path, cfg: TrainConfig) -> Found:
    if not path.is_file():
        return Found()
    try:
        data = path.read_bytes()
    except OSError as exc:
        return Found(rejected=f"unreadable: {exc.strerror or exc}")
    if not data.startswith(CHECKPOINT_MAGIC):
        return Found(rejected="empty file" if not data else
                     "no rlsweep checkpoint header (damaged, or written by another program or version)")
    header, body = split_checkpoint(data)
    if header is None or not isinstance(header.get("bytes"), int) or "sha256" not in header:
        return Found(rejected="truncated or corrupted header")
    if len(body) != header["bytes"]:
        return Found(rejected=f"truncated: {len(body):,} of {header['bytes']:,} payload bytes")
    if hashlib.sha256(body).hexdigest() != header["sha256"]:
        return Found(rejected="corrupted: the payload's sha256 does not match the header's")
    if header.get("config_digest") != config_digest(cfg):
        return Found(rejected="written for another config")
    return Found(header, body)


def load(path: Path, cfg: TrainConfig, found: Found | None = None) -> dict[str, Any] | None:
    """The checkpoint at ``path`` (``found``: as :func:`read` found it already) if it exists, is whole
    and was written for this config, else None."""
    found = found or read(path, cfg)
    body, found.body = found.body, None  # unpickled once: the bytes are not held through the training
    return None if body is None else torch.load(io.BytesIO(body), map_location="cpu", weights_only=False)


def restore(payload: dict[str, Any], algo: Any) -> None:
    """Put ``payload`` into ``algo``, its pickled envs (where there are some) in place of the fresh ones."""
    for k, m in algo.modules().items():
        m.load_state_dict(payload["modules"][k])
    for k, o in algo.optimizers().items():
        held = [g["lr"] for g in o.param_groups]
        o.load_state_dict(payload["optimizers"][k])
        for group, lr in zip(o.param_groups, held, strict=True):
            if isinstance(lr, torch.Tensor):  # a schedule's tensor (PPO's, DQN's): loading replaced it
                group["lr"] = lr.fill_(group["lr"])
    algo.load_extra_state(payload["algo_extra"])
    for update, scaler in zip(algo.rt._updates, payload["grad_scalers"], strict=False):  # a plugin may build an update later
        if update.scaler is not None and scaler is not None:
            update.scaler.load_state_dict(scaler)
    counters = payload["algo_counters"]
    algo.env_steps, algo.updates = counters["env_steps"], counters["updates"]
    algo.episodes = counters["episodes"]
    algo.timer.load_state_dict(payload["timer"])
    rng = payload["rng"]
    torch.set_rng_state(rng["torch"])
    np.random.set_state(rng["numpy"])
    random.setstate(rng["python"])
    if "cuda" in rng and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    for generator, state in zip(algo.rt.rngs, payload["seed_rngs"], strict=True):
        generator.set_state(state)
    algo.rt.failed = payload["failed_seeds"]
    if payload["envs"] is not None:
        restored = pickle.loads(payload["envs"])
        algo.envs.close()
        algo.envs = restored
