"""Run one training job: toggles on, algorithm iterations under the phase timers, evaluation.

This module knows nothing about Hydra: :func:`train` takes a typed :class:`TrainConfig` and
returns the measured record (and the trained algorithm, for in-process callers such as tests).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np
import torch

from rlsweep.algos import ALGORITHMS
from rlsweep.algos.base import Algorithm
from rlsweep.compile_stats import CompileStats
from rlsweep.config import TrainConfig
from rlsweep.envs import evaluate, make_envs
from rlsweep.timing import PhaseTimer
from rlsweep.toggles import applied_toggles

log = logging.getLogger(__name__)

#: called after every iteration with (metrics, env_steps); the job wires W&B here
IterationHook = Callable[[dict[str, Any], int], None]


def resolve_device(spec: str) -> torch.device:
    """``auto`` -> cuda when available, else cpu; anything else as given."""
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(spec)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)


@dataclass
class TrainOutcome:
    """What :func:`train` measured; ``record()`` is the result-record part."""

    toggles: dict[str, Any]
    timings: dict[str, Any]
    throughput: dict[str, Any]
    compile: dict[str, Any]
    learning: dict[str, Any]
    env_steps: int
    updates: int
    iterations: int
    device: str
    algo: Algorithm | None = field(default=None, repr=False)

    def record(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("algo")
        return d


def train(cfg: TrainConfig, on_iteration: IterationHook | None = None) -> TrainOutcome:
    """Train ``cfg.algo`` on ``cfg.env`` for ``cfg.total_env_steps`` and measure every phase."""
    device = resolve_device(cfg.device)
    with applied_toggles(cfg, device) as (rt, states):
        seed_everything(cfg.seed)
        compile_stats = CompileStats()
        rt.compile_stats = compile_stats
        torch.use_deterministic_algorithms(cfg.deterministic)
        envs = make_envs(cfg.env, cfg.algo.num_envs, cfg.seed)
        try:
            timer = PhaseTimer(device)
            algo = ALGORITHMS[cfg.algo.name](cfg, envs, rt, timer)
            outcome = _loop(cfg, algo, timer, on_iteration)
            outcome.toggles = {k: v.as_dict() for k, v in states.items()}
            outcome.compile = compile_stats.summary(cfg.compile.mode)
            outcome.device = str(device)
            outcome.learning.update(_final_evaluation(cfg, algo))
            return outcome
        finally:
            compile_stats.uninstall()
            torch.use_deterministic_algorithms(False)
            envs.close()


def _loop(cfg: TrainConfig, algo: Algorithm, timer: PhaseTimer, on_iteration: IterationHook | None) -> TrainOutcome:
    from tqdm import tqdm

    iterations = algo.num_iterations(cfg.total_env_steps)
    steps_per_iter = algo.iteration_env_steps
    warmup = cfg.warmup_iters
    updating_iters = 0  # iterations that made gradient steps (compile happens in the first ones)
    steady_s = 0.0
    steady_steps = 0
    steady_updates = 0
    per_iter_rate: list[float] = []
    curve_steps: list[int] = []
    curve_wall: list[float] = []
    curve_return: list[float] = []
    start = time.perf_counter()
    bar = tqdm(total=iterations * steps_per_iter, unit="step", disable=not cfg.progress, leave=False,
               desc=f"{cfg.algo.name} {cfg.env.id}", mininterval=1.0)
    n_episodes = 0
    try:
        for it in range(iterations):
            # steady state: past the warm-up iterations that updated (and so compiled)
            timer.recording = updating_iters >= warmup
            recording = timer.recording
            updates_before = algo.updates
            t0 = time.perf_counter()
            metrics = algo.iteration()
            dt = time.perf_counter() - t0
            if metrics.get("updated"):
                updating_iters += 1
            if recording:
                steady_s += dt
                steady_steps += steps_per_iter
                steady_updates += algo.updates - updates_before
                per_iter_rate.append(steps_per_iter / dt)
            wall = time.perf_counter() - start
            for ret, _length, at_step in algo.episodes[n_episodes:]:
                curve_steps.append(at_step)
                curve_wall.append(round(wall, 4))
                curve_return.append(ret)
            new_eps = algo.episodes[n_episodes:]
            n_episodes = len(algo.episodes)
            bar.update(steps_per_iter)
            if on_iteration is not None:
                row: dict[str, Any] = {f"train/{k}": v for k, v in metrics.items()}
                row["perf/iteration_env_steps_per_s"] = steps_per_iter / dt
                row["perf/steady_state"] = int(recording)
                row["time/wall_s"] = wall
                row["train/env_steps"] = algo.env_steps
                if new_eps:
                    row["train/episode_return"] = float(np.mean([e[0] for e in new_eps]))
                    row["train/episode_length"] = float(np.mean([e[1] for e in new_eps]))
                on_iteration(row, algo.env_steps)
            if new_eps:
                bar.set_postfix(ret=f"{np.mean([e[0] for e in new_eps]):.1f}", refresh=False)
    finally:
        bar.close()

    rate = steady_steps / steady_s if steady_s > 0 else None
    throughput = {
        "env_steps_per_s": rate,
        "updates_per_s": steady_updates / steady_s if steady_s > 0 else None,
        "median_iteration_env_steps_per_s": float(np.median(per_iter_rate)) if per_iter_rate else None,
        "per_iteration_env_steps_per_s": [round(r, 3) for r in per_iter_rate],
        "steady_iterations": len(per_iter_rate),
        "steady_s": steady_s,
    }
    if rate is None:
        log.warning("no steady-state iterations: the budget is spent within the %d warm-up iterations", warmup)
    return TrainOutcome(
        toggles={},
        timings=timer.summary(),
        throughput=throughput,
        compile={},
        learning={"curve": {"env_steps": curve_steps, "wall_s": curve_wall, "episode_return": curve_return}},
        env_steps=algo.env_steps,
        updates=algo.updates,
        iterations=iterations,
        device="",
        algo=algo,
    )


def _final_evaluation(cfg: TrainConfig, algo: Algorithm) -> dict[str, Any]:
    if cfg.eval_episodes <= 0:
        return {"final_return": None, "final_return_std": None, "eval_episodes": 0}
    returns = evaluate(algo.act_deterministic, cfg.env, cfg.eval_episodes, seed=cfg.seed + 10_000)
    return {
        "final_return": float(np.mean(returns)),
        "final_return_std": float(np.std(returns)),
        "eval_episodes": len(returns),
        "eval_returns": returns,
    }
