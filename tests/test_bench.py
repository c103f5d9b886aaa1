"""The bench (``python -m sweeps.bench --quick``) and the claims table, run for real on tiny budgets.

The comparison needs stable-baselines3 (the ``bench`` extra); without it that test is skipped.
"""

from __future__ import annotations

import importlib.util
import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

HAS_SB3 = importlib.util.find_spec("stable_baselines3") is not None
HAS_TORCHRL = importlib.util.find_spec("torchrl") is not None
HAS_ALE = importlib.util.find_spec("ale_py") is not None
REQUIRED = ("rlsweep_env_steps_per_s", "peer", "peer_env_steps_per_s", "ratio", "ratio_ci",
            "rlsweep_final_return", "peer_final_return")


def _paired_ratio(res: dict, peer: str) -> float:
    """The geometric mean of the warm repeats' ratios to ``peer``'s (repeat r of each side ran back to back)."""
    runs = res["comparisons"]["ppo_CartPole-v1"]["repeats"]
    paired = [o["env_steps_per_s"] / p["env_steps_per_s"] for o, p in zip(runs["rlsweep_warm"], runs[peer], strict=True)]
    return math.prod(paired) ** (1 / len(paired))


def check_quick_bench(res: dict, md: str, stdout: str) -> None:
    """What a quick bench's JSON and markdown must say (also usable on a saved ``--out`` file)."""
    c = res["ppo_CartPole-v1"]
    for key in REQUIRED:
        assert key in c, key
    assert c["rlsweep_env_steps_per_s"] > 0 and c["peer_env_steps_per_s"] > 0
    assert math.isclose(c["ratio"], _paired_ratio(res, "sb3"), rel_tol=1e-9)
    assert c["ratio_ci"][0] <= c["ratio"] <= c["ratio_ci"][1]
    assert c["peer"].startswith("stable-baselines3")
    assert c["env_steps"]["rlsweep"] == c["env_steps"]["peer"]  # the same real budget on both sides
    assert math.isfinite(c["rlsweep_final_return"]) and math.isfinite(c["peer_final_return"])
    repeats = res["settings"]["repeats"]
    assert c["seeds"] == list(range(repeats))
    # every requested peer ran, interleaved with rlsweep's cold and warm runs, on the same budget
    assert list(c["peers"]) == res["settings"]["peers"] and c["peers"]["sb3"]["ratio"] == c["ratio"]
    runs = res["comparisons"]["ppo_CartPole-v1"]["repeats"]
    for kind in ("cold", "warm"):
        assert [r["cache"] for r in runs[f"rlsweep_{kind}"]] == [kind] * repeats
        e = c["end_to_end"][kind]
        assert e["ratio_ci"][0] <= e["ratio"] <= e["ratio_ci"][1] and e["rlsweep_process_wall_s"] > 0
        assert e["target"] == {"cold": 4.0, "warm": 5.0}[kind]
    # the cold runs compiled from nothing, the warm ones found everything the warm-up run compiled
    assert c["compile"]["cold"]["fxgraph_hits"] == 0 and c["compile"]["cold"]["fxgraph_misses"] > 0
    assert c["compile"]["warm_cache_complete"] is True and c["compile"]["warm"]["served_from_cache"] == 1.0
    for key, p in c["peers"].items():
        assert p["env_steps"] == c["env_steps"]["rlsweep"], key
        assert math.isclose(p["ratio"], _paired_ratio(res, key), rel_tol=1e-9)
        assert math.isfinite(p["peer_final_return"]) and len(runs[key]) == repeats
        d = p["learning"]
        assert d["n_ours"] == d["n_peer"] == repeats and d["ci_low"] <= d["mean_diff"] <= d["ci_high"]
        assert d["no_worse"] == (d["ci_high"] >= 0)
    lim = res["limit"]
    assert lim["raw_env_steps_per_s"] > 0 and 0 < lim["collection_fraction"] and lim["target_fraction"] == 0.6
    cs = res["cold_start"]
    assert cs["train_to_first_env_step_s"] > 0 and cs["import_torch_gymnasium_s"] > 0 and cs["target_overhead_s"] == 1.0
    for launcher in ("basic", "submitit_local"):
        assert res["launchers"][launcher]["one_job_sweep_s"] > 0
    assert "submitit_slurm" in res["launchers"]
    assert "ppo_CartPole-v1" in md and "| comparison | peer | measure |" in md
    assert md.strip() in stdout
    # per peer: a steady row and a cold and a warm end-to-end row, a learning row; one compile row
    assert md.count("| ppo_CartPole-v1 |") == 4 * len(c["peers"]) + 1


@pytest.mark.bench
@pytest.mark.timeout(1900)
@pytest.mark.skipif(not HAS_SB3, reason='stable-baselines3 not installed (pip install -e ".[bench]")')
def test_quick_bench_writes_consistent_json_and_markdown(tmp_path) -> None:
    out = tmp_path / "bench.json"
    proc = subprocess.run([sys.executable, "-m", "sweeps.bench", "--quick", "--algos", "ppo", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=1800)
    assert proc.returncode == 0, proc.stderr[-3000:]
    res = json.loads(out.read_text())
    assert res["settings"]["peers"] == (["sb3", "torchrl"] if HAS_TORCHRL else ["sb3"])  # every installed one
    check_quick_bench(res, out.with_suffix(".md").read_text(), proc.stdout)
    if HAS_TORCHRL:
        assert res["ppo_CartPole-v1"]["peers"]["torchrl"]["peer"].startswith("torchrl ")


@pytest.mark.bench
@pytest.mark.skipif(not HAS_TORCHRL, reason='torchrl not installed (pip install -e ".[bench]")')
@pytest.mark.parametrize(("algo", "total_env_steps", "overrides"), [
    ("dqn", 512, {"learning_starts": 256, "gradient_steps": 8}),
    ("sac", 160, {"learning_starts": 100}),
])
def test_torchrl_peer_trains_the_whole_budget_and_is_evaluated(algo, total_env_steps, overrides) -> None:
    """TorchRL's DQN and SAC (PPO runs in the quick bench above): real collector, losses, buffers."""
    import torch

    from benchmarks.torchrl_peer import run_torchrl

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
    from benchmarks import claims

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
    from benchmarks import ratio_with_ci

    r, ci = ratio_with_ci([10.0, 12.0, 11.0], [5.0, 5.5, 6.0], paired=True)
    assert math.isclose(r, (10 / 5 * 12 / 5.5 * 11 / 6) ** (1 / 3))  # the geometric mean of the pairs' ratios
    assert ci[0] <= r <= ci[1]
    r, ci = ratio_with_ci([3.0], [1.0], paired=True)  # one repeat: a ratio, no interval
    assert math.isclose(r, 3.0) and ci is None
    # two repeats that agree to 5% still give a wide interval (t with one degree of freedom), not +-2%
    lo, hi = ratio_with_ci([5910.0, 5636.0], [1031.0, 959.0], paired=True)[1]
    assert lo < 5.0 and hi > 6.7
    # pairs that drift together: pairing keeps each pair whole, so the shared drift cancels
    a, b = [10.0, 20.0, 30.0, 40.0], [5.0, 10.0, 15.0, 20.0]
    assert ratio_with_ci(a, b, paired=True)[1] == pytest.approx([2.0, 2.0])
    lo, hi = ratio_with_ci(a, b, paired=False)[1]
    assert lo < 2.0 < hi
    with pytest.raises(ValueError, match="as many on each side"):
        ratio_with_ci(a, b[:3], paired=True)


def test_bfloat16_is_chosen_only_for_sac_and_only_where_it_is_native() -> None:
    from benchmarks import BEST_TOGGLES, Bench
    from benchmarks.core import BF16_MIN_SPEEDUP, bf16_matmul_speedup

    speedup = bf16_matmul_speedup(size=64, rounds=2, calls=3)
    assert math.isfinite(speedup) and speedup > 0
    fast = Bench(root=Path("."), bf16_speedup=BF16_MIN_SPEEDUP)
    slow = Bench(root=Path("."), bf16_speedup=BF16_MIN_SPEEDUP - 0.01)
    assert fast.toggles("sac") == [*BEST_TOGGLES["cpu"]["sac"], "dtype=bfloat16"]
    assert slow.toggles("sac") == BEST_TOGGLES["cpu"]["sac"]
    for algo in ("ppo", "dqn"):
        assert fast.toggles(algo) == BEST_TOGGLES["cpu"][algo]
    assert fast.toggles("sac", "cuda") == BEST_TOGGLES["cuda"]["sac"]


def test_learning_difference_flags_a_clearly_worse_side_and_not_equal_ones() -> None:
    from benchmarks import learning_difference

    good = [480.0, 500.0, 450.0, 500.0, 470.0, 500.0, 490.0, 460.0, 500.0, 495.0]
    bad = [100.0, 150.0, 90.0, 130.0, 120.0, 110.0, 140.0, 95.0, 105.0, 125.0]
    worse = learning_difference(bad, good)
    assert not worse["no_worse"] and worse["ci_high"] < 0 and worse["p_improvement"] == 0.0
    assert worse["ci_low"] <= worse["mean_diff"] <= worse["ci_high"]
    # the same returns in another order, and a solved task on both sides (all ties): no difference
    same = learning_difference(good, good[::-1])
    assert same["no_worse"] and same["ci_low"] <= 0 <= same["ci_high"] and same["p_improvement"] == 0.5
    solved = learning_difference([500.0] * 10, [500.0] * 10)
    assert solved["no_worse"] and solved["mean_diff"] == 0 and solved["p_improvement"] == 0.5
    better = learning_difference(good, bad)
    assert better["no_worse"] and better["ci_low"] > 0 and better["p_improvement"] == 1.0
    # noisy sides a little apart: not significantly worse, and the interval says how unsure that is
    noisy = learning_difference([15.7, 500, 99.5, 103.2, 83.2, 104.8, 113.8, 500, 500, 20],
                                [500, 500, 500, 500, 117.1, 254.4, 126.6, 500, 500, 30])
    assert noisy["no_worse"] and noisy["ci_low"] < noisy["mean_diff"] < 0 <= noisy["ci_high"]
    assert noisy["p_improvement_ci"][0] <= noisy["p_improvement"] <= noisy["p_improvement_ci"][1]
    with pytest.raises(ValueError, match="both sides"):
        learning_difference([], good)


class FakeProcesses:
    """Stands in for the bench's child processes: a ``sweeps.train`` job that "compiles" into its
    compile.cache_dir (a hit when the folder already holds a graph) and peer/limit workers."""

    def __init__(self, hit_when_filled: bool = True) -> None:
        self.hit_when_filled = hit_when_filled
        self.calls: list[dict] = []

    def __call__(self, cmd, cwd=None, env=None, **kwargs):
        module = cmd[2]
        if module == "rlsweep.train":
            args = dict(a.split("=", 1) for a in cmd[3:])
            cache, out = Path(args["compile.cache_dir"]), Path(args["hydra.run.dir"])
            found = sorted(p.name for p in cache.iterdir()) if cache.exists() else None
            self.calls.append({"kind": "rlsweep", "seed": int(args["seed"]), "cache_dir": str(cache), "found": found,
                               "env_cache": env.get("TORCHINDUCTOR_CACHE_DIR"), "triton": env.get("TRITON_CACHE_DIR")})
            hit = bool(found) and self.hit_when_filled
            (cache / "fxgraph").write_text("compiled")
            out.mkdir(parents=True)
            (out / "result.json").write_text(json.dumps({
                "env_steps": 1536, "iterations": 3, "wall_s": 2.0 if hit else 9.0,
                "throughput": {"env_steps_per_s": 5000.0, "steady_iterations": 2, "steady_s": 0.3},
                "timings": {"update": {"total_s": 0.1}},
                "learning": {"final_return": 100.0 + int(args["seed"]), "eval_returns": [100.0]},
                "compile": {"compile_s": 1.0 if hit else 8.0, "cache": {
                    "dir": str(cache), "fxgraph_hits": int(hit), "fxgraph_misses": int(not hit), "fxgraph_bypasses": 0,
                    "aot_autograd_hits": int(hit), "aot_autograd_misses": int(not hit),
                    "served_from_cache": float(hit)}}}))
        else:
            kind, kw, out = cmd[3], json.loads(cmd[4]), cmd[5]
            self.calls.append({"kind": kind, "seed": kw.get("seed"), "pipeline": kw.get("pipeline")})
            res = ({"env_steps": 8000, "env_steps_per_s": 20000.0} if kind == "limit" else
                   {"env_steps": kw["total_env_steps"], "env_steps_per_s": 1000.0, "end_to_end_env_steps_per_s": 500.0,
                    "final_return": 100.0 + kw["seed"], "eval_returns": [100.0], "version": "9.9"})
            Path(out).write_text(json.dumps(res))
        return subprocess.CompletedProcess(cmd, 0, "", "")


def _fake_compare(tmp_path, monkeypatch, fake: FakeProcesses, repeats: int = 3):
    from benchmarks import core

    monkeypatch.setattr(core.subprocess, "run", fake)
    # a warm cache of the caller's, and a Triton cache outside any folder the bench chose: neither may leak
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "callers-cache"))
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "triton"))
    b = core.Bench(root=ROOT, repeats=repeats, quick=True, peers=("sb3",), bf16_speedup=1.0,
                   workdir=tmp_path / "work")
    return b, core.compare(b, core.COMPARISONS[0], log=lambda m: None)


def test_cold_runs_get_an_empty_compile_cache_and_warm_runs_the_filled_one(tmp_path, monkeypatch) -> None:
    fake = FakeProcesses()
    b, comp = _fake_compare(tmp_path, monkeypatch, fake)
    runs = [c for c in fake.calls if c["kind"] == "rlsweep"]
    warmup, timed = runs[0], runs[1:]
    assert warmup["found"] == [] and warmup["seed"] == b.repeats  # untimed, a seed no timed run uses
    cold = [c for c in timed if c["cache_dir"] != warmup["cache_dir"]]
    warm = [c for c in timed if c["cache_dir"] == warmup["cache_dir"]]
    assert len(cold) == len(warm) == b.repeats
    assert all(c["found"] == [] for c in cold)  # empty, made for this run
    assert len({c["cache_dir"] for c in cold}) == b.repeats
    assert all(c["found"] == ["fxgraph"] for c in warm)  # what the warm-up run compiled
    for c in runs:  # the child sees only the bench's folder
        assert c["env_cache"] == c["cache_dir"] and c["triton"] is None
    assert not any(Path(c["cache_dir"]).exists() for c in cold)  # removed after each cold run
    # interleaved: cold, warm, peer (with PPO's raw limit beside the warm run), then reversed; repeat r = seed r
    order = [c["kind"] if c["kind"] != "rlsweep" else ("cold" if c in cold else "warm") for c in fake.calls[1:]]
    assert order == ["cold", "warm", "limit", "sb3", "sb3", "warm", "limit", "cold", "cold", "warm", "limit", "sb3"]
    assert [c["seed"] for c in fake.calls[1:] if c["kind"] != "limit"] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    # what the records said about their caches reaches the comparison
    assert [r["cache"] for r in comp["repeats"]["rlsweep_cold"]] == ["cold"] * 3
    assert comp["compile"]["cold"]["fxgraph_misses"] == 3 and comp["compile"]["cold"]["served_from_cache"] == 0
    assert comp["compile"]["warm"]["fxgraph_hits"] == 3 and comp["compile"]["warm_cache_complete"] is True
    assert comp["compile"]["cold"]["compile_s"] == 8.0 and comp["compile"]["warm"]["compile_s"] == 1.0
    assert all("compile.cache_dir" not in o for o in comp["rlsweep_overrides"])
    e2e = comp["end_to_end"]
    assert e2e["cold"]["target"] == 4.0 and e2e["warm"]["target"] == 5.0
    assert comp["learning"]["n_ours"] == comp["learning"]["n_peer"] == 3 and comp["learning"]["no_worse"]


def test_markdown_has_the_cold_and_warm_rows_and_the_learning_interval(tmp_path, monkeypatch) -> None:
    from benchmarks import core

    b, comp = _fake_compare(tmp_path, monkeypatch, FakeProcesses(hit_when_filled=False), repeats=2)
    assert comp["compile"]["warm_cache_complete"] is False  # the warm runs compiled anew: said
    res = {"settings": {"repeats": 2, "quick": True, "bf16_matmul_speedup": 1.0}, "fingerprint": {},
           "load_avg_at_start": [0.5], "load_avg_at_end": [0.6], "comparisons": {"ppo_CartPole-v1": comp},
           "limit": core.limit(b, comp["repeats"]["rlsweep_warm"], log=lambda m: None),
           "cold_start": {"train_to_first_env_step_s": 3.0, "import_torch_gymnasium_s": 2.2, "overhead_s": 0.8,
                          "target_overhead_s": core.COLD_START_TARGET_S, "meets_target": True},
           "launchers": {"basic": {"per_job_s": 0.5, "one_job_sweep_s": 5.0}}}
    md = core.markdown(res)
    rows = [line for line in md.splitlines() if line.startswith("| ppo_CartPole-v1 |")]
    assert len(rows) == 5
    steady, cold, warm, learning, compiled = rows
    assert "steady state" in steady and "3x" in steady
    assert "end to end, cold compile cache" in cold and "4x" in cold
    assert "end to end, warm compile cache" in warm and "5x" in warm
    d = comp["learning"]
    assert f"{d['mean_diff']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}]" in learning and "no worse" in learning
    assert "NO: the warm runs compiled anew" in compiled
    assert "target >= 60%" in md and "target <= 1 s" in md


@pytest.mark.bench
@pytest.mark.skipif(not (HAS_SB3 and HAS_ALE), reason='stable-baselines3 or ale-py not installed (pip install -e ".[bench]")')
@pytest.mark.parametrize(("pipeline", "ran", "not_ran"), [
    # SB3's own pipeline, as its users run it: AtariWrapper on each env, frames stacked by the vector env
    ("sb3", ["VecTransposeImage", "VecFrameStack", "DummyVecEnv", "AtariWrapper", "Monitor", "AtariEnv"],
     ["FrameStackObservation", "GameStatistics"]),
    # like for like: rlsweep's wrappers on SB3's vector env
    ("rlsweep", ["DummyVecEnv", "FrameStackObservation", "GameStatistics", "AtariPreprocessing", "AtariEnv"],
     ["AtariWrapper", "VecFrameStack"]),
])
def test_sb3_atari_peer_trains_and_evaluates_on_the_pipeline_it_names(tmp_path, pipeline, ran, not_ran) -> None:
    """The bench's Atari SB3 worker on a tiny budget, in its own process as the bench runs it, with
    every HTTP(S) request sent to a closed port: ale-py's ROMs ship with it, nothing may download."""
    import os

    out = tmp_path / "sb3.json"
    kwargs = {"algo": "atari_ppo", "total_env_steps": 256, "seed": 0, "steady_from_env_steps": 128,
              "eval_episodes": 2, "overrides": {"n_steps": 16, "n_epochs": 1, "batch_size": 64}, "pipeline": pipeline}
    offline = {k: "http://127.0.0.1:9" for k in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy")}
    proc = subprocess.run([sys.executable, "-m", "benchmarks.worker", "sb3", json.dumps(kwargs), str(out)],
                          cwd=ROOT, env={**os.environ, **offline, "NO_PROXY": "", "no_proxy": ""},
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["pipeline"] == pipeline and r["env_steps"] == 256
    assert [w for w in r["env_wrappers"] if w in ran] == ran  # present, outermost first
    assert not set(not_ran) & set(r["env_wrappers"])
    assert r["env_steps_per_s"] > 0 and r["end_to_end_env_steps_per_s"] > 0
    assert len(r["eval_returns"]) == 2 and all(math.isfinite(x) for x in r["eval_returns"])


def test_atari_row_runs_sb3_both_ways_interleaved_and_labels_each(tmp_path, monkeypatch) -> None:
    """The Atari comparison's peer sides: SB3 on its own pipeline (the targets' side), then on
    rlsweep's wrappers, each with its rows; TorchRL, which has no Atari peer, is not run."""
    from benchmarks import core

    fake = FakeProcesses()
    monkeypatch.setattr(core.subprocess, "run", fake)
    atari = next(c for c in core.COMPARISONS if c.algo == "atari_ppo")
    b = core.Bench(root=ROOT, repeats=2, quick=True, peers=("sb3", "torchrl"), bf16_speedup=1.0,
                   workdir=tmp_path / "work", overheads=False)
    comp = core.compare(b, atari, log=lambda m: None)
    assert list(comp["peers"]) == ["sb3", "sb3_rlsweep_wrappers"]
    peers = [(c["kind"], c["pipeline"], c["seed"]) for c in fake.calls if c["kind"] not in ("rlsweep", "limit")]
    assert peers == [("sb3", "sb3", 0), ("sb3", "rlsweep", 0), ("sb3", "rlsweep", 1), ("sb3", "sb3", 1)]
    assert comp["peer"] == comp["peers"]["sb3"]["peer"] == "stable-baselines3 9.9 as its users run it " \
        "(make_atari_env + VecFrameStack)"
    assert comp["peers"]["sb3_rlsweep_wrappers"]["peer"] == "stable-baselines3 9.9 with rlsweep's wrappers (like for like)"
    assert comp["ratio"] == comp["peers"]["sb3"]["ratio"] and comp["learning"] is None
    assert len(comp["repeats"]["sb3"]) == len(comp["repeats"]["sb3_rlsweep_wrappers"]) == 2
    # a bench of the comparisons only (--skip-overheads): no limit or overhead sections
    res = {"settings": {"repeats": 2, "quick": True, "bf16_matmul_speedup": 1.0}, "fingerprint": {},
           "load_avg_at_start": [0.5], "load_avg_at_end": [0.6], "comparisons": {"atari": comp}}
    md = core.markdown(res)
    rows = [line for line in md.splitlines() if line.startswith("| atari |")]
    assert len(rows) == 3 * 2 + 2 + 1  # per side a steady and two end-to-end rows, a learning row; one compile row
    assert sum("as its users run it" in r for r in rows) == sum("like for like" in r for r in rows) == 4
    assert "## Limit" not in md and "## Framework overhead" not in md


@pytest.mark.parametrize("beside", [True, False], ids=["timed-beside-each-run", "timed-apart"])
def test_the_collection_limit_pairs_only_what_was_timed_side_by_side(tmp_path, monkeypatch, beside) -> None:
    from benchmarks import core

    runs = [{"collection_env_steps_per_s": c} for c in (500.0, 600.0, 700.0)]
    if beside:
        for r, raw in zip(runs, (1000.0, 1000.0, 1400.0)):
            r["raw_limit_env_steps_per_s"] = raw
    apart = iter([1000.0, 1000.0, 1400.0])  # the same figures, timed after the runs
    monkeypatch.setattr(core, "_raw_limit", lambda b, seed: next(apart))
    seen = []
    real = core.ratio_with_ci
    monkeypatch.setattr(core, "ratio_with_ci", lambda a, b, paired: seen.append(paired) or real(a, b, paired=paired))
    out = core.limit(core.Bench(root=tmp_path, repeats=3), runs, log=lambda m: None)
    assert seen == [beside]
    # the geometric mean of the ratios: paired run by run, or each side's own over its runs (the same here)
    assert out["collection_fraction"] == pytest.approx((500 * 600 * 700 / (1000 * 1000 * 1400)) ** (1 / 3))
    assert next(apart, None) == (1000.0 if beside else None)  # apart: the raw stepping timed on its own


@pytest.mark.parametrize("script", ["ab.py", "dqn_parity.py"])
def test_the_bench_scripts_import_the_repository_benchmarks_from_any_folder(script: str, tmp_path: Path) -> None:
    # torchrl (the bench extra) installs a top-level `benchmarks` package of its own into site-packages
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / script), "--help"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
