"""DQN learning parity with Stable-Baselines3, side by side, with enough seeds to say something.

Identical zoo settings on both sides (``experiment=sb3_dqn`` and SB3's DQN with rl-zoo's CartPole
hyper-parameters, the bench's ``SB3_SETTINGS``), the same seeds, 10 deterministic evaluation
episodes each through the same evaluation function; every run a fresh process with one thread, two
at a time, the sides interleaved seed by seed. Prints and writes each side's final returns, how many
reach 200, the mean difference from every rlsweep variant to SB3 with a bootstrap 95% interval, and
the probability of improvement P(variant > SB3) (rliable's, over seed pairs).

    python scripts/dqn_parity.py --seeds 10 --out docs/results/dqn_parity.json \
        --variant default= --variant orthogonal=algo.init=orthogonal
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from rlsweep.bootstrap import iqm_with_ci, learning_difference

ROOT = Path(__file__).resolve().parents[1]
# the repository's benchmarks/ before site-packages, where torchrl installs a `benchmarks` package of its own
sys.path.insert(0, str(ROOT))


def _env() -> dict[str, str]:
    from benchmarks.core import Bench

    return Bench(root=ROOT).env()


def run_rlsweep(seed: int, overrides: list[str], steps: int, work: Path) -> float:
    out = work / f"rlsweep-{seed}-{time.monotonic_ns()}"
    args = ["experiment=sb3_dqn", f"seed={seed}", f"total_env_steps={steps}", "logger.mode=disabled", "progress=false",
            "backend.num_threads=1", "eval_episodes=10", f"hydra.run.dir={out}", *overrides]
    proc = subprocess.run([sys.executable, "-m", "sweeps.train", *args], cwd=ROOT, env=_env(), capture_output=True,
                          text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return float(json.loads((out / "result.json").read_text())["learning"]["final_return"])


def run_sb3(seed: int, steps: int, work: Path) -> float:
    out = work / f"sb3-{seed}-{time.monotonic_ns()}.json"
    args = {"algo": "dqn", "total_env_steps": steps, "seed": seed, "steady_from_env_steps": steps // 2,
            "eval_episodes": 10}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.worker", "sb3", json.dumps(args), str(out)], cwd=ROOT,
                          env=_env(), capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    return float(np.mean(json.loads(out.read_text())["eval_returns"]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=10)
    p.add_argument("--first-seed", type=int, default=0, help="seeds first_seed .. first_seed + seeds - 1")
    p.add_argument("--steps", type=int, default=50_000)
    p.add_argument("--variant", action="append", default=[],
                   help="NAME=override[,override...] (rlsweep side; repeatable; default: one variant 'rlsweep')")
    p.add_argument("--jobs", type=int, default=2)
    p.add_argument("--out", type=Path)
    args = p.parse_args()
    variants = {v.split("=", 1)[0]: [o for o in v.split("=", 1)[1].split(",") if o] for v in args.variant} or {
        "rlsweep": []}
    returns: dict[str, dict[int, float]] = {name: {} for name in [*variants, "sb3"]}
    started = time.time()
    with tempfile.TemporaryDirectory() as tmp, ThreadPoolExecutor(args.jobs) as pool:
        work = Path(tmp)
        futures = {}
        seeds = range(args.first_seed, args.first_seed + args.seeds)
        for seed in seeds:  # seed-major: drift of the machine spreads over every side
            futures[pool.submit(run_sb3, seed, args.steps, work)] = ("sb3", seed)
            for name, overrides in variants.items():
                futures[pool.submit(run_rlsweep, seed, overrides, args.steps, work)] = (name, seed)
        for fut, (name, seed) in futures.items():
            returns[name][seed] = fut.result()
            print(f"{name} seed {seed}: {returns[name][seed]:.1f}", flush=True)
    result = {"steps": args.steps, "seeds": list(seeds), "wall_s": round(time.time() - started, 1), "sides": {}}
    sb3 = [returns["sb3"][s] for s in seeds]
    for name, by_seed in returns.items():
        finals = [by_seed[s] for s in seeds]
        iqm, lo, hi = iqm_with_ci(finals, np.random.default_rng(0), 2000)
        side = {"final_returns": finals, "reached_200": sum(r >= 200 for r in finals), "mean": float(np.mean(finals)),
                "median": float(np.median(finals)), "iqm": iqm, "iqm_ci": [lo, hi]}
        if name != "sb3":
            side["vs_sb3"] = learning_difference(finals, sb3)
        result["sides"][name] = side
        print(f"{name}: >=200 on {side['reached_200']}/{args.seeds}, mean {side['mean']:.1f}, median "
              f"{side['median']:.1f}, IQM {iqm:.1f} [{lo:.1f}, {hi:.1f}]" + (f", vs SB3 {side['vs_sb3']}" if "vs_sb3" in side else ""))
    if args.out:
        args.out.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
