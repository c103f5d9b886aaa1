"""The bench (``python -m sweeps.bench --quick``) and the claims table, run for real on tiny budgets.

The comparison needs stable-baselines3 (the ``bench`` extra); without it that test is skipped.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys

import pytest
from helpers import ROOT

HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None
HAS_TORCHRL = importlib.util.find_spec("torchrl") is not None
REQUIRED = ("rlsweep_env_steps_per_s", "peer", "peer_env_steps_per_s", "ratio", "ratio_ci",
            "rlsweep_final_return", "peer_final_return")


@pytest.mark.bench
@pytest.mark.skipif(not HAS_SB3, reason='stable-baselines3 not installed (pip install -e ".[bench]")')
def test_quick_bench_writes_consistent_json_and_markdown(tmp_path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "sweeps.bench", "--quick", "--algos", "ppo", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    c = res["ppo_CartPole-v1"]
    for key in REQUIRED:
        assert key in c, key
    assert c["rlsweep_env_steps_per_s"] > 0 and c["peer_env_steps_per_s"] > 0
    assert math.isclose(c["ratio"], c["rlsweep_env_steps_per_s"] / c["peer_env_steps_per_s"], rel_tol=1e-9)
    assert c["ratio_ci"][0] <= c["ratio"] <= c["ratio_ci"][1]
    assert c["peer"].startswith("stable-baselines3")
    assert c["env_steps"]["rlsweep"] == c["env_steps"]["peer"]  # the same real budget on both sides
    assert math.isfinite(c["rlsweep_final_return"]) and math.isfinite(c["peer_final_return"])
    # every installed peer ran, interleaved with rlsweep, on the same budget; SB3's fields are the top level's
    assert list(c["peers"]) == (["sb3", "torchrl"] if HAS_TORCHRL else ["sb3"]) == res["settings"]["peers"]
    assert c["peers"]["sb3"]["ratio"] == c["ratio"]
    for key, p in c["peers"].items():
        assert p["env_steps"] == c["env_steps"]["rlsweep"], key
        assert math.isclose(p["ratio"], c["rlsweep_env_steps_per_s"] / p["peer_env_steps_per_s"], rel_tol=1e-9)
        assert math.isfinite(p["peer_final_return"]) and len(res["comparisons"]["ppo_CartPole-v1"]["repeats"][key]) == 1
    if HAS_TORCHRL:
        assert c["peers"]["torchrl"]["peer"].startswith("torchrl ")
    lim = res["limit"]
    assert lim["raw_env_steps_per_s"] > 0 and 0 < lim["collection_fraction"]
    cs = res["cold_start"]
    assert cs["train_to_first_env_step_s"] > 0 and cs["import_torch_gymnasium_s"] > 0
    for launcher in ("basic", "submitit_local"):
        assert res["launchers"][launcher]["one_job_sweep_s"] > 0
    assert "submitit_slurm" in res["launchers"]
    md = out.with_suffix(".md").read_text()
    assert "ppo_CartPole-v1" in md and "| comparison |" in md
    assert md.strip() in proc.stdout
    assert md.count("| ppo_CartPole-v1 |") == len(c["peers"])  # one row per peer


@pytest.mark.bench
@pytest.mark.skipif(not HAS_TORCHRL, reason='torchrl not installed (pip install -e ".[bench]")')
@pytest.mark.parametrize(("algo", "total_env_steps", "overrides"), [
    ("dqn", 512, {"learning_starts": 256, "gradient_steps": 8}),
    ("sac", 160, {"learning_starts": 100}),
])
def test_torchrl_peer_trains_the_whole_budget_and_is_evaluated(algo, total_env_steps, overrides) -> None:
    """TorchRL's DQN and SAC (PPO runs in the quick bench above): real collector, losses, buffers."""
    import torch

    from rlsweep.bench.torchrl_peer import run_torchrl

    threads = torch.get_num_threads()
    try:
        r = run_torchrl(algo, total_env_steps, seed=0, steady_from_env_steps=total_env_steps // 2,
                        eval_episodes=2, overrides=overrides)
        assert torch.get_num_threads() == 1  # set back after TorchRL's collector shut down
    finally:
        torch.set_num_threads(threads)
    assert r["env_steps"] == total_env_steps
    assert r["env_steps_per_s"] > 0 and r["end_to_end_env_steps_per_s"] > 0
    assert len(r["eval_returns"]) == 2 and all(math.isfinite(x) for x in r["eval_returns"])
    assert r["version"].startswith("0.")


def test_bench_without_sb3_or_with_bad_algo_fails_clearly() -> None:
    proc = subprocess.run([sys.executable, "-m", "sweeps.bench", "--quick", "--algos", "a2c"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode != 0
    assert ("a2c" in proc.stderr) or ("stable-baselines3" in proc.stderr)
    for peers, message in (("sb3,rllib", "unknown peers ['rllib']"), ("torchrl", "must include sb3")):
        proc = subprocess.run([sys.executable, "-m", "sweeps.bench", "--quick", "--peers", peers], cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr


@pytest.mark.slow  # a real sweep / measurement (tens of seconds): the slow tier
def test_claims_table_structure() -> None:
    from rlsweep.bench import claims

    res = claims.run(quick=True)
    ids = [r["id"] for r in res["claims"]]
    assert ids == ["pin_memory", "inplace", "twin_modules", "compile"]
    for r in res["claims"]:
        assert r["claim"] and r["measured"] and r["verdict"]
    pin = res["claims"][0]
    if res["device"] == "cpu":
        assert pin["measured"].startswith("not applicable here")
        assert pin["verdict"] == "not applicable here"
    assert res["claims"][3]["speedup"] > 0
    md = claims.markdown(res)
    assert "| claim | measured here | verdict |" in md
    assert md.count("\n| ") == 1 + 4  # the header and one row per claim


def test_ratio_ci_brackets_the_ratio() -> None:
    from rlsweep.bench import ratio_with_ci

    r, ci = ratio_with_ci([10.0, 12.0, 11.0], [5.0, 5.5, 6.0])
    assert math.isclose(r, 11.0 / 5.5)
    assert ci[0] <= r <= ci[1]
    assert ratio_with_ci([3.0], [1.0]) == (3.0, [3.0, 3.0])


def test_bfloat16_is_chosen_only_for_sac_and_only_where_it_is_native() -> None:
    from pathlib import Path

    from rlsweep.bench import BEST_TOGGLES, Bench
    from rlsweep.bench.core import BF16_MIN_SPEEDUP, bf16_matmul_speedup

    speedup = bf16_matmul_speedup(size=64, rounds=2, calls=3)
    assert math.isfinite(speedup) and speedup > 0
    fast = Bench(root=Path("."), bf16_speedup=BF16_MIN_SPEEDUP)
    slow = Bench(root=Path("."), bf16_speedup=BF16_MIN_SPEEDUP - 0.01)
    assert fast.toggles("sac") == [*BEST_TOGGLES["cpu"]["sac"], "dtype=bfloat16"]
    assert slow.toggles("sac") == BEST_TOGGLES["cpu"]["sac"]
    for algo in ("ppo", "dqn"):
        assert fast.toggles(algo) == BEST_TOGGLES["cpu"][algo]
    assert fast.toggles("sac", "cuda") == BEST_TOGGLES["cuda"]["sac"]
