"""Stable-Baselines3 peers with the hyper-parameters of the ``sb3_*`` presets, timed like rlsweep.

Each function runs one training job in the current process (the bench starts one subprocess per
run) and returns env steps, steady-state and in-process end-to-end env-steps/s (from before the
env is made; the bench replaces it with the whole process timed from outside, imports included, as
it does for rlsweep) and the deterministic 10-episode return. "Steady state" starts at
``steady_from_env_steps``: the env step at which the matching rlsweep run left its warm-up
iterations, so both sides exclude the same share of the run.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

#: hyper-parameters identical to conf/experiment/sb3_{ppo,dqn,sac}.yaml and atari_ppo.yaml (SB3 / rl-zoo values)
SB3_SETTINGS: dict[str, dict[str, Any]] = {
    "ppo": {"env_id": "CartPole-v1", "n_envs": 8, "kwargs": dict(
        learning_rate=3e-4, n_steps=2048, batch_size=64, n_epochs=10, gamma=0.99, gae_lambda=0.95,
        clip_range=0.2, ent_coef=0.0, vf_coef=0.5, max_grad_norm=0.5)},
    "dqn": {"env_id": "CartPole-v1", "n_envs": 1, "kwargs": dict(
        learning_rate=2.3e-3, batch_size=64, buffer_size=100_000, learning_starts=1000, gamma=0.99,
        target_update_interval=10, train_freq=256, gradient_steps=128, exploration_fraction=0.16,
        exploration_final_eps=0.04, policy_kwargs=dict(net_arch=[256, 256]))},
    "sac": {"env_id": "Pendulum-v1", "n_envs": 1, "kwargs": dict(
        learning_rate=3e-4, buffer_size=1_000_000, learning_starts=100, batch_size=256, tau=0.005,
        gamma=0.99, train_freq=1, gradient_steps=1, ent_coef="auto",
        policy_kwargs=dict(net_arch=[256, 256]))},
    # CnnPolicy: the Nature CNN shared by both heads, frames scaled by 1/255, Adam eps 1e-5, as rlsweep's;
    # the learning rate annealed linearly to 0 as rlsweep's anneal_lr (rl-zoo also anneals the clip range).
    # sb3_env_id: the id SB3's docs and rl-zoo give make_atari_env; its emulator settings are those of
    # rlsweep's env=breakout (ALE/Breakout-v5 made with frameskip=1, repeat_action_probability=0.0)
    "atari_ppo": {"env_id": "ALE/Breakout-v5", "sb3_env_id": "BreakoutNoFrameskip-v4", "n_envs": 8,
                  "policy": "CnnPolicy", "atari": True, "kwargs": dict(
        learning_rate=lambda remaining: remaining * 2.5e-4, n_steps=128, batch_size=256, n_epochs=4, gamma=0.99,
        gae_lambda=0.95, clip_range=0.1, ent_coef=0.01, vf_coef=0.5, max_grad_norm=0.5)},
}


class SteadyClock:
    """Notes the time at the first collection that starts at or after the steady boundary."""

    def __init__(self, steady_from_env_steps: int) -> None:
        self.steady_from = steady_from_env_steps
        self.mark: tuple[float, int] | None = None

    def collection_starts(self, env_steps: int) -> None:
        if self.mark is None and env_steps >= self.steady_from:
            self.mark = (time.perf_counter(), env_steps)


def peer_record(clock: SteadyClock, env_steps: int, t_start: float, t0: float, t_end: float,
                returns: list[float], version: str) -> dict[str, Any]:
    """A peer run's record: steady-state rate from the clock's mark (or from ``t0``), walls, returns."""
    mark_t, mark_steps = clock.mark if clock.mark is not None else (t0, 0)
    steady = (env_steps - mark_steps) / (t_end - mark_t) if t_end > mark_t and env_steps > mark_steps else None
    wall = time.perf_counter() - t_start
    return {
        "env_steps": env_steps,
        "env_steps_per_s": steady,
        "end_to_end_env_steps_per_s": env_steps / wall,
        "train_wall_s": t_end - t0,
        "wall_s": wall,
        "final_return": float(np.mean(returns)) if returns else None,
        "eval_returns": returns,
        "version": version,
    }


#: how an Atari peer's envs are made (``run_sb3``'s ``pipeline``)
PIPELINES = {
    # what an SB3 user writes: make_atari_env (AtariWrapper on each env) + VecFrameStack(n_stack=4),
    # evaluated with evaluate_policy on the same pipeline
    "sb3": "make_atari_env + VecFrameStack(n_stack=4)",
    # rlsweep's own wrapper stack (envs.atari_wrappers) on SB3's vector env and rlsweep's evaluation:
    # identical preprocessing on both sides, so the ratio is the training code's alone
    "rlsweep": "rlsweep's envs.atari_wrappers on make_vec_env",
}


def run_sb3(algo: str, total_env_steps: int, seed: int, steady_from_env_steps: int,
            eval_episodes: int = 10, overrides: dict[str, Any] | None = None,
            pipeline: str = "sb3") -> dict[str, Any]:
    """Train SB3's ``algo`` for ``total_env_steps`` on 1 intra-op thread and measure it.

    ``overrides`` replace hyper-parameters (the bench's quick mode shrinks both sides alike).
    ``pipeline`` (a key of PIPELINES) says how an Atari game's envs are made; the other envs are
    make_vec_env's either way. ale-py ships its ROMs: nothing is downloaded.
    """
    if pipeline not in PIPELINES:
        raise ValueError(f"unknown pipeline {pipeline!r}: {', '.join(PIPELINES)}")
    import torch

    torch.set_num_threads(1)
    import stable_baselines3 as sb3
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env

    from rlsweep.config import EnvConfig

    s = SB3_SETTINGS[algo]

    class SteadyMark(BaseCallback):
        """Tells the clock when each rollout starts."""

        def __init__(self, clock: SteadyClock) -> None:
            super().__init__()
            self.clock = clock

        def _on_rollout_start(self) -> None:
            self.clock.collection_starts(self.num_timesteps)

        def _on_step(self) -> bool:
            return True

    t_start = time.perf_counter()
    # rlsweep's config of the env: env=breakout's Atari preprocessing where it has one
    env_cfg = EnvConfig(id=s["env_id"], atari=s.get("atari", False))
    sb3_atari = env_cfg.atari and pipeline == "sb3"
    if sb3_atari:
        env = _sb3_atari_env(s["sb3_env_id"], s["n_envs"], seed)
    elif env_cfg.atari:
        from functools import partial

        from rlsweep.envs import atari_wrappers, register_ale

        register_ale()
        env = make_vec_env(s["env_id"], n_envs=s["n_envs"], seed=seed,
                           env_kwargs={"frameskip": 1, "repeat_action_probability": env_cfg.repeat_action_probability},
                           wrapper_class=partial(atari_wrappers, env_cfg=env_cfg))
    else:
        env = make_vec_env(s["env_id"], n_envs=s["n_envs"], seed=seed)
    cls = {"ppo": sb3.PPO, "atari_ppo": sb3.PPO, "dqn": sb3.DQN, "sac": sb3.SAC}[algo]
    model = cls(s.get("policy", "MlpPolicy"), env, seed=seed, device="cpu", verbose=0,
                **{**s["kwargs"], **(overrides or {})})
    clock = SteadyClock(steady_from_env_steps)
    t0 = time.perf_counter()
    model.learn(total_timesteps=total_env_steps, callback=SteadyMark(clock), progress_bar=False)
    t_end = time.perf_counter()
    if eval_episodes <= 0:
        returns = []
    elif sb3_atari:
        returns = _evaluate_sb3_atari(model, s["sb3_env_id"], eval_episodes, seed + 10_000)
    else:
        returns = _evaluate(model, env_cfg, eval_episodes, seed + 10_000)
    record = peer_record(clock, int(model.num_timesteps), t_start, t0, t_end, returns, sb3.__version__)
    if env_cfg.atari:
        record["pipeline"] = pipeline
        record["env_wrappers"] = env_wrappers(model.get_env())
    return record


def _sb3_atari_env(env_id: str, n_envs: int, seed: int) -> Any:
    """SB3's Atari pipeline as its docs write it (the registration is the step SB3's docs ask of gymnasium 1.x)."""
    import ale_py
    import gymnasium as gym
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    gym.register_envs(ale_py)
    return VecFrameStack(make_atari_env(env_id, n_envs=n_envs, seed=seed), n_stack=4)


def _evaluate_sb3_atari(model: Any, env_id: str, episodes: int, seed: int) -> list[float]:
    """Deterministic game scores of ``episodes`` episodes, one per env, as an SB3 user evaluates.

    evaluate_policy reads Monitor's whole-game scores (Monitor sits under AtariWrapper: raw
    scores, a lost life is not an episode's end), as rlsweep's evaluation reports whole games.
    """
    from stable_baselines3.common.evaluation import evaluate_policy

    env = _sb3_atari_env(env_id, episodes, seed)
    try:
        returns, _ = evaluate_policy(model, env, n_eval_episodes=episodes, deterministic=True,
                                     return_episode_rewards=True)
    finally:
        env.close()
    return [float(r) for r in returns]


def env_wrappers(venv: Any) -> list[str]:
    """Class names from the outer vector-env wrapper down to the first env's ALE env: what the peer ran."""
    names = []
    while venv is not None:
        names.append(type(venv).__name__)
        inner = getattr(venv, "venv", None)
        if inner is None:
            env = venv.envs[0] if hasattr(venv, "envs") else None
            while env is not None:
                names.append(type(env).__name__)
                env = getattr(env, "env", None)
        venv = inner
    return names


def _evaluate(model: Any, env_cfg: Any, episodes: int, seed: int) -> list[float]:
    """Deterministic returns of ``episodes`` episodes, with the very evaluation rlsweep's jobs use."""
    from rlsweep.envs import evaluate

    return evaluate(lambda obs: model.predict(obs, deterministic=True)[0], env_cfg, episodes, seed)


def raw_vector_stepping(env_id: str, num_envs: int, vector_steps: int, seed: int) -> dict[str, Any]:
    """The limit: SyncVectorEnv stepped with pre-drawn random actions, nothing else."""
    import gymnasium as gym

    envs = gym.make_vec(env_id, num_envs=num_envs, vectorization_mode="sync")
    envs.action_space.seed(seed)
    actions = [envs.action_space.sample() for _ in range(vector_steps)]
    envs.reset(seed=seed)
    t0 = time.perf_counter()
    for a in actions:
        envs.step(a)
    dt = time.perf_counter() - t0
    envs.close()
    return {"env_steps": vector_steps * num_envs, "env_steps_per_s": vector_steps * num_envs / dt}
