"""Run one training job: toggles on, algorithm iterations under the phase timers, evaluation.

This module knows nothing about Hydra: :func:`train` takes a typed :class:`TrainConfig` and
returns the measured record (and the trained algorithm, for in-process callers such as tests).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import logging
import random
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch

from rlsweep import checkpoint
from rlsweep.algos import algorithm_class
from rlsweep.algos.base import Algorithm, seeds_together_refusal
from rlsweep.compile_stats import CompileStats
from rlsweep.config import ConfigError, TrainConfig
from rlsweep.envs import evaluate, make_envs
from rlsweep.seeds import run_as_seed
from rlsweep.signals import StopSignals, resume_collection
from rlsweep.timing import PhaseTimer
from rlsweep.toggles import applied_toggles

log = logging.getLogger(__name__)

#: training runs started in this process so far (jobs and preparation runs alike)
_RUNS_IN_PROCESS = [0]

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


@dataclass(kw_only=True)
class TrainOutcome:
    """What :func:`train` measured; ``record()`` is the result-record part (its keys in this order)."""

    toggles: dict[str, Any] = field(default_factory=dict)  # toggles, compile, device: train_seeds fills them in
    timings: dict[str, Any]
    throughput: dict[str, Any]
    compile: dict[str, Any] = field(default_factory=dict)
    learning: dict[str, Any]
    env_steps: int
    updates: int
    iterations: int
    device: str = ""
    requeues: int = 0
    resumed_at_env_steps: list[int] = field(default_factory=list)
    # "process": "fresh" for its process's first training run (which pays the warm-up), else "warm"
    measurement: dict[str, Any] = field(default_factory=dict)
    # seeds_per_job: the seeds trained in this process with this one (None: it trained alone)
    group: dict[str, Any] | None = None
    # why this seed stopped early while the seeds beside it trained on (a non-finite loss); None: it did not
    failed: str | None = None
    # the job's one-off seconds outside steady state: envs, setup (algorithm, checkpoint), warm-up iterations
    # (their compile included), evaluation (the job adds W&B's and its process's; docs/reference/record.md)
    fixed_cost: dict[str, float] = field(default_factory=dict)
    algo: Algorithm | None = field(default=None, repr=False)

    def record(self) -> dict[str, Any]:
        # not asdict(self): it would deep-copy the algorithm too, whose async envs cannot be copied
        return {f.name: copy.deepcopy(getattr(self, f.name)) for f in fields(self) if f.name != "algo"}


@dataclass
class LoopState:
    """The runner's counters; checkpointed with the algorithm so a resumed job continues them."""

    iteration: int = 0
    updating_iters: int = 0  # iterations that made gradient steps (compile happens in the first)
    steady_s: float = 0.0
    steady_steps: int = 0
    steady_updates: int = 0
    per_iter_rate: list[float] = field(default_factory=list)
    curve_steps: list[int] = field(default_factory=list)
    curve_wall: list[float] = field(default_factory=list)
    curve_return: list[float] = field(default_factory=list)
    wall_offset_s: float = 0.0  # training seconds before the last resume
    requeues: int = 0
    resumed_at_env_steps: list[int] = field(default_factory=list)
    compile_s_before: float = 0.0
    warmup_s: float = 0.0  # the iterations before steady state (their compile included)
    failed: str | None = None  # why this seed stopped while others trained on (seeds_per_job)


def train(cfg: TrainConfig, on_iteration: IterationHook | None = None,
          checkpoint_path: Path | None = None, on_stop: Callable[[], None] | None = None,
          until_warm: bool = False) -> TrainOutcome:
    """Train ``cfg.algo`` on ``cfg.env`` for ``cfg.total_env_steps`` and measure every phase.

    ``until_warm``: stop once the warm-up iterations have passed and everything has compiled, then
    evaluate one episode: a sweep's preparation (:mod:`rlsweep.prepare`) pays a cell's one-off costs.

    With ``checkpoint_path``, a matching checkpoint there is resumed from, and a stop signal or
    ``cfg.checkpoint_interval_s`` writes one at an iteration boundary. ``on_stop`` runs after that
    checkpoint, before the job is requeued or interrupted (the job flushes W&B there).
    """
    hooks = None if on_iteration is None else [on_iteration]
    return train_seeds(cfg, (cfg.seed,), hooks, checkpoint_path, on_stop, until_warm)[0]


def train_seeds(cfg: TrainConfig, seeds: Sequence[int], on_iteration: Sequence[IterationHook] | None = None,
                checkpoint_path: Path | None = None, on_stop: Callable[[], None] | None = None,
                until_warm: bool = False, found: checkpoint.Found | None = None,
                before_loop: Callable[[], None] | None = None) -> list[TrainOutcome]:
    """:func:`train` for each of ``seeds``, all of them together in this process (``seeds_per_job``).

    ``on_iteration`` has one hook per seed. One outcome per seed, in order: its episodes, evaluation
    and failure are its own; the timings, compile and throughput are the group's. ``found``: the
    checkpoint at ``checkpoint_path`` as the job read it already (:func:`rlsweep.checkpoint.read`).
    ``before_loop``: called once everything is set up, before the first iteration (the job waits there
    for what it started beside the set-up: its W&B runs).
    """
    t_start = time.perf_counter()
    device = resolve_device(cfg.device)
    runs_before = _RUNS_IN_PROCESS[0]
    _RUNS_IN_PROCESS[0] += 1
    stop = StopSignals()
    cls = algorithm_class(cfg.algo._target_)
    if len(seeds) > 1 and not cls.seeds_together:
        raise ConfigError(seeds_together_refusal(cls))
    with applied_toggles(cfg, device) as (rt, toggle_states):
        rt.seed_values = tuple(seeds)
        seed_everything(seeds[0])
        compile_stats = CompileStats()
        rt.compile_stats = compile_stats
        torch.use_deterministic_algorithms(cfg.deterministic)
        t0 = time.perf_counter()
        envs = make_envs(cfg.env, cfg.algo.num_envs * len(seeds), seeds[0] if len(seeds) == 1 else list(seeds))
        fixed = {"envs_s": time.perf_counter() - t0}
        try:
            timer = PhaseTimer(device)
            algo = cls(cfg, envs, rt, timer)
            found = (found or checkpoint.read(checkpoint_path, cfg)) if checkpoint_path else checkpoint.Found()
            states = _resume(checkpoint_path, cfg, found, algo) if checkpoint_path else None
            if states is not None:
                envs = algo.envs  # the restored ones
            states = states or [LoopState() for _ in seeds]
            # the toggles, torch's lazy first use (the first optimizer imports dynamo), the algorithm, a checkpoint
            fixed["setup_s"] = time.perf_counter() - t_start - fixed["envs_s"]
            if before_loop is not None:
                before_loop()
            resume_collection()
            stop.install()
            log.info("training %s on %s: %d env steps%s, device %s", cfg.algo.name, cfg.env.id, cfg.total_env_steps,
                     f" for each of {len(seeds)} seeds together" if len(seeds) > 1 else "", device)
            save = functools.partial(_save_checkpoint, checkpoint_path, cfg, algo, states, compile_stats,
                                     found.header) if checkpoint_path else None
            outcomes = _loop(cfg, algo, timer, states, compile_stats, on_iteration, stop, save, on_stop, until_warm)
            compile_summary = compile_stats.summary(cfg.compile.mode)
            compile_summary["compile_s"] = round(compile_summary["compile_s"] + states[0].compile_s_before, 6)
            for k, outcome in enumerate(outcomes):
                outcome.toggles = {name: asdict(v) for name, v in toggle_states.items()}
                outcome.compile = copy.deepcopy(compile_summary)
                outcome.device = str(device)
                outcome.measurement = {"process": "warm" if runs_before else "fresh",
                                       "runs_before_in_process": runs_before}
                if len(seeds) > 1:
                    outcome.group = {"seeds": list(seeds), "index": k}
                t0 = time.perf_counter()
                if outcome.failed is None:
                    evaluation = functools.partial(_final_evaluation, cfg, algo, seeds[k], until_warm)
                    outcome.learning.update(evaluation() if len(seeds) == 1 else
                                            run_as_seed(algo.modules(), k, evaluation))
                costs = {**fixed, "warmup_s": states[k].warmup_s, "eval_s": time.perf_counter() - t0}
                outcome.fixed_cost = {name: round(v, 4) for name, v in costs.items()}
            return outcomes
        finally:
            stop.uninstall()
            compile_stats.uninstall()
            torch.use_deterministic_algorithms(False)
            envs.close()


def _resume(path: Path, cfg: TrainConfig, found: checkpoint.Found, algo: Algorithm) -> list[LoopState] | None:
    """Restore ``algo`` from the checkpoint at ``path`` when it is whole and of ``cfg``; the loop states it carried,
    each counting this requeue (None: nothing to resume). Its payload is not held through the training: the
    algorithm was restored by copy (a replay buffer's arrays)."""
    payload = checkpoint.load(path, cfg, found)
    if payload is None:
        return None
    checkpoint.restore(payload, algo)
    runner = payload["runner"]
    states = [LoopState(**st) for st in runner.get("per_seed", [runner])]
    for st in states:
        st.requeues += 1
        st.resumed_at_env_steps.append(algo.env_steps)
    log.info("resumed from %s at %d env steps", path, algo.env_steps)
    return states


def _loop(cfg: TrainConfig, algo: Algorithm, timer: PhaseTimer, states: list[LoopState], compile_stats: CompileStats,
          on_iteration: Sequence[IterationHook] | None, stop: StopSignals, save: Callable[[float], None] | None,
          on_stop: Callable[[], None] | None = None, until_warm: bool = False) -> list[TrainOutcome]:
    from tqdm import tqdm

    iterations = algo.num_iterations(cfg.total_env_steps)
    steps_per_iter = algo.iteration_env_steps
    warmup = cfg.warmup_iters
    s = states[0]  # what every seed shares: the loop's counters are the same in each seed's state
    start = time.perf_counter() - s.wall_offset_s
    last_checkpoint = time.perf_counter()
    bar = tqdm(total=iterations * steps_per_iter, initial=s.iteration * steps_per_iter, unit="step",
               # progress=None: tqdm shows the bar only when stderr is a terminal (not in Slurm/submitit logs)
               disable=None if cfg.progress is None else not cfg.progress, leave=False,
               desc=f"{cfg.algo.name} {cfg.env.id}", mininterval=1.0)
    n_episodes = len(algo.episodes)

    skip_guards = cfg.compile.skip_guards_after_warmup and cfg.compile.mode != "none"
    stance = contextlib.ExitStack()  # the compiler stance of the steady iterations, left with the loop
    try:
        while s.iteration < iterations:
            if until_warm and stop.signum is not None:  # nothing to checkpoint: stop the sweep now
                raise KeyboardInterrupt(signal.Signals(stop.signum).name)
            if until_warm and _warm(s, warmup, compile_stats):
                break
            # steady state: past the warm-up iterations that updated (and so compiled)
            timer.recording = recording = s.updating_iters >= warmup
            # under that stance dynamo refuses to compile at all, so only once every compiled
            # function has compiled (SAC, say, acts first after learning starts)
            if recording and skip_guards and compile_stats.all_compiled():
                skip_guards = False  # once
                stance.enter_context(torch.compiler.set_stance("default", skip_guard_eval_unsafe=True))
                stance.enter_context(compile_stats.calling_directly())
            updates_before = algo.updates
            t0 = time.perf_counter()
            metrics = algo.iteration()
            timer.end_iteration()  # CUDA: the iteration's one sync, so dt includes its device work
            dt = time.perf_counter() - t0
            wall = time.perf_counter() - start
            new_eps = algo.episodes[n_episodes:]
            n_episodes = len(algo.episodes)
            for k, st in enumerate(states):
                # the process's throughput: a seed trained beside others is credited the group's steps
                # (its share of the process is its share of the wall time; see job.train_job)
                _count_iteration(st, metrics, dt, steps_per_iter * len(states),
                                 (algo.updates - updates_before) * len(states), recording)
                if st.failed is not None:
                    continue
                st.failed = algo.rt.failed.get(k)  # this iteration's loss was not finite: its last record
                mine = [e for e in new_eps if e[3] == k]
                _record_episodes(st, mine, wall)
                if on_iteration is not None:
                    row = _iteration_row(algo, metrics, k, dt, steps_per_iter, recording, wall, mine)
                    on_iteration[k](row, algo.env_steps)
            bar.update(steps_per_iter)
            if new_eps:
                bar.set_postfix(ret=f"{np.mean([e[0] for e in new_eps]):.1f}", refresh=False)
            if save is not None and s.iteration < iterations:
                if stop.signum is not None:
                    save(time.perf_counter() - start)
                    if on_stop is not None:
                        on_stop()
                    stop.act()  # requeues (submitit) or raises Interrupted
                if cfg.checkpoint_interval_s > 0 and time.perf_counter() - last_checkpoint >= cfg.checkpoint_interval_s:
                    save(time.perf_counter() - start)
                    last_checkpoint = time.perf_counter()
    finally:
        stance.close()
        bar.close()
    return [_outcome(st, timer, algo, iterations, warmup, until_warm) for st in states]


def _save_checkpoint(path: Path, cfg: TrainConfig, algo: Algorithm, states: list[LoopState],
                     compile_stats: CompileStats, resumed: dict[str, Any] | None, wall_s: float) -> None:
    """Checkpoint the job with each seed's loop state, ``wall_s`` into this attempt; ``resumed``: the header
    of the checkpoint the attempt resumed from (:func:`rlsweep.checkpoint.save`)."""
    for st in states:
        st.wall_offset_s = wall_s
    runner_state = asdict(states[0])
    runner_state["compile_s_before"] = states[0].compile_s_before + compile_stats.total_compile_s()
    if len(states) > 1:
        runner_state["per_seed"] = [{**asdict(st), "compile_s_before": runner_state["compile_s_before"]}
                                    for st in states]
    checkpoint.save(path, cfg, algo, runner_state, resumed)


def _count_iteration(s: LoopState, metrics: dict[str, Any], dt: float, steps_per_iter: int, updates: int,
                     recording: bool) -> None:
    s.iteration += 1
    if metrics.get("updated"):
        s.updating_iters += 1
    if recording:
        s.steady_s += dt
        s.steady_steps += steps_per_iter
        s.steady_updates += updates
        s.per_iter_rate.append(round(steps_per_iter / dt, 3))
    else:
        s.warmup_s += dt


def _record_episodes(s: LoopState, new_eps: list[tuple[float, int, int, int]], wall: float) -> None:
    for ret, _length, at_step, _seed in new_eps:
        s.curve_steps.append(at_step)
        s.curve_wall.append(round(wall, 4))
        s.curve_return.append(ret)


def _iteration_row(algo: Algorithm, metrics: dict[str, Any], k: int, dt: float, steps_per_iter: int, recording: bool,
                   wall: float, new_eps: list[tuple[float, int, int, int]]) -> dict[str, Any]:
    """Seed ``k``'s metrics of one iteration for the tracker (W&B), namespaced; a list holds one value per seed."""
    row: dict[str, Any] = {f"train/{name}": v[k] if isinstance(v, list) else v for name, v in metrics.items()}
    row["perf/iteration_env_steps_per_s"] = steps_per_iter / dt
    row["perf/steady_state"] = int(recording)
    row["time/wall_s"] = wall
    row["train/env_steps"] = algo.env_steps
    if new_eps:
        row["train/episode_return"] = float(np.mean([e[0] for e in new_eps]))
        row["train/episode_length"] = float(np.mean([e[1] for e in new_eps]))
    return row


def _outcome(s: LoopState, timer: PhaseTimer, algo: Algorithm, iterations: int, warmup: int,
             until_warm: bool) -> TrainOutcome:
    """The loop's result: steady-state throughput, the timings and the learning curve."""
    rate = s.steady_steps / s.steady_s if s.steady_s > 0 else None
    throughput = {
        "env_steps_per_s": rate,
        "updates_per_s": s.steady_updates / s.steady_s if s.steady_s > 0 else None,
        "median_iteration_env_steps_per_s": float(np.median(s.per_iter_rate)) if s.per_iter_rate else None,
        "per_iteration_env_steps_per_s": s.per_iter_rate,
        "steady_iterations": len(s.per_iter_rate),
        "steady_s": s.steady_s,
    }
    if rate is None and not until_warm:
        log.warning("no steady-state iterations: the budget is spent within the %d warm-up iterations", warmup)
    return TrainOutcome(
        timings=timer.summary(),
        throughput=throughput,
        learning={"curve": {"env_steps": s.curve_steps, "wall_s": s.curve_wall, "episode_return": s.curve_return}},
        env_steps=algo.env_steps,
        updates=algo.updates,
        iterations=iterations,
        requeues=s.requeues,
        resumed_at_env_steps=s.resumed_at_env_steps,
        failed=s.failed,
        algo=algo,
    )


#: iterations past the warm-up after which a preparation run stops even if a compiled function
#: never ran (one an algorithm wraps but calls only in rare iterations)
_MAX_EXTRA_WARM_ITERS = 3


def _warm(s: LoopState, warmup: int, compile_stats: CompileStats) -> bool:
    """Whether a job has paid its one-off costs: the warm-up iterations updated, everything compiled."""
    if s.updating_iters < max(1, warmup):
        return False
    return (not compile_stats.functions or compile_stats.all_compiled()
            or s.updating_iters >= max(1, warmup) + _MAX_EXTRA_WARM_ITERS)


def _final_evaluation(cfg: TrainConfig, algo: Algorithm, seed: int, until_warm: bool) -> dict[str, Any]:
    episodes = min(cfg.eval_episodes, 1) if until_warm else cfg.eval_episodes
    if episodes <= 0:
        return {"final_return": None, "final_return_std": None, "eval_episodes": 0}
    returns = evaluate(algo.act_deterministic, cfg.env, episodes, seed=seed + 10_000)
    return {
        "final_return": float(np.mean(returns)),
        "final_return_std": float(np.std(returns)),
        "eval_episodes": len(returns),
        "eval_returns": returns,
    }
