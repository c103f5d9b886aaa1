"""Shared test helpers: compose the real Hydra configs, tiny budgets, run the real entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from rlsweep.config import TrainConfig
from rlsweep.testing import QUIET, compose, parameters

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "conf"

# Budgets that exercise every phase (warm-up, steady iterations, updates) in about a second.
TINY = {
    "ppo": ["algo.num_envs=4", "algo.num_steps=16", "algo.update_epochs=2", "algo.minibatch_size=32",
            "algo.hidden_sizes=[16,16]", "total_env_steps=256"],
    "dqn": ["algo.learning_starts=64", "algo.train_freq=32", "algo.gradient_steps=4", "algo.batch_size=16",
            "algo.hidden_sizes=[16,16]", "algo.target_update_interval=8", "total_env_steps=256"],
    "sac": ["algo.learning_starts=32", "algo.steps_per_iteration=32", "algo.batch_size=16",
            "algo.hidden_sizes=[16,16]", "total_env_steps=160"],
    # seed 2: on seed 0 this tiny run reaches a state where Adam's eps amplifies the float differences
    # of the compiled and the eager step in the actor to 1e-3 (seeds 1-6: < 1e-5; measured 2026-12-03)
    "td3": ["algo.learning_starts=32", "algo.steps_per_iteration=32", "algo.batch_size=16",
            "algo.hidden_sizes=[16,16]", "total_env_steps=160", "seed=2"],
    "a2c": ["algo.num_envs=4", "algo.num_steps=8", "algo.hidden_sizes=[16,16]", "total_env_steps=256"],
    # the Atari PPO preset (Nature CNN on uint8 frames) on Breakout, games cut at 400 frames (100 steps)
    "atari_ppo": ["experiment=atari_ppo", "algo.num_envs=2", "algo.num_steps=16", "algo.update_epochs=1",
                  "algo.minibatch_size=16", "env.max_episode_steps=400", "total_env_steps=64"],
}
# the sweep's preparation is tested in test_prepare.py; elsewhere it would only add minutes of untimed runs
COMMON = ["prepare=false", *QUIET]


#: algorithms that are plugins from another config directory (the examples)
PLUGIN_CONF = {"td3": ROOT / "examples" / "td3" / "conf", "a2c": ROOT / "examples" / "a2c" / "conf"}


def compose_cfg(overrides: list[str] | None = None, config_dir: Path | None = None) -> TrainConfig:
    """Compose conf/config.yaml with ``overrides`` exactly as ``python -m sweeps.train`` would."""
    return compose(overrides or [], config_dir)


def tiny_cfg(algo: str, *overrides: str) -> TrainConfig:
    selects = [] if algo.startswith("atari_") else [f"algo={algo}"]  # an experiment preset selects its algo
    return compose_cfg([*selects, *TINY[algo], *COMMON, *overrides], PLUGIN_CONF.get(algo))


params_of = parameters


def run_train(args: list[str], cwd: Path | None = None, env: dict[str, str] | None = None,
              timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """Run the real entry point ``python -m sweeps.train`` (from the repository root)."""
    full_env = {**os.environ, "PYTHONUNBUFFERED": "1", **(env or {})}
    return subprocess.run([sys.executable, "-m", "sweeps.train", *args], cwd=cwd or ROOT, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


def read_wandb_run(run_dir: str | Path) -> dict:
    """Read an offline W&B run back from disk with wandb's own reader (no network).

    Returns config (nested keys as the W&B app names them: ``algo.lr``), nested_config (as stored),
    summary, tags, project, entity, group, job_type, name, exit_code, the history rows and the
    metric definitions.
    """
    import json

    def inspect(*flags: str) -> str:
        proc = subprocess.run(["wandb", "leet", "inspect", *flags, "--json", str(run_dir)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    head = json.loads(inspect("--summary"))
    out = {"config": flatten(head["config"]), "nested_config": head["config"], "summary": head["summary"], "tags": head.get("tags") or [],
           "project": head.get("project"), "entity": head.get("entity"),
           "exit_code": head.get("exit_code"), "state": head.get("state"), "history": [], "metrics": []}
    for line in inspect().splitlines():
        rec = json.loads(line)
        if rec["type"] == "run":
            run = rec["run"]
            out.update(group=run.get("run_group"), job_type=run.get("job_type"), name=run.get("display_name"),
                       run_id=run.get("run_id"))
        elif rec["type"] == "history":
            out["history"].append(rec["history"]["item"])
        elif rec["type"] == "metric":
            out["metrics"].append(rec["metric"])
    return out


def flatten(d: dict, prefix: str = "") -> dict:
    """A nested W&B config as dotted keys (``{"algo": {"lr": 1}}`` -> ``{"algo.lr": 1}``), as the W&B app shows it."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out
