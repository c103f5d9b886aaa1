"""The talk's performance claims as measured verdicts on this machine.

Each claim is timed A/B in interleaved rounds on the model ``experiment=claims`` configures
(1 intra-op thread); the verdict follows the ratio's 95% bootstrap interval. CUDA-only claims say
"not applicable here" on a machine without a CUDA device instead of printing a number.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

import torch

from rlsweep.bootstrap import ratio_with_ci
from rlsweep.resources import CONF_DIR as CONF  # the checkout's conf/ or the installed package's

CLAIMS = {
    "pin_memory": "`.pin_memory()` before `.to(cuda, non_blocking=True)` can be slower than "
                  "`.to(cuda, non_blocking=True)` alone",
    "inplace": "in-place ops give little or no speed-up",
    "twin_modules": "`.train()`/`.eval()` switching costs small RL models noticeable time; twin modules "
                    "sharing parameters remove it",
    "compile": "`torch.compile` of the right functions speeds small RL models up",
}


def interleaved_ab(fa: Callable[[], Any], fb: Callable[[], Any], rounds: int, calls: int) -> dict[str, Any]:
    """Interleaved timing: per round, ``calls`` calls of A then of B (order alternating); time(A)/time(B)."""
    ta, tb = [], []
    for f in (fa, fb):  # warm-up
        for _ in range(max(3, calls // 10)):
            f()
    for r in range(rounds):
        for which in ((0, 1) if r % 2 == 0 else (1, 0)):
            f = (fa, fb)[which]
            t0 = time.perf_counter()
            for _ in range(calls):
                f()
            ((ta, tb)[which]).append((time.perf_counter() - t0) / calls)
    ratio, ci = ratio_with_ci(ta, tb, paired=True)  # round r of A and of B ran back to back
    return {"a_us": statistics.median(ta) * 1e6, "b_us": statistics.median(tb) * 1e6, "ratio": ratio, "ratio_ci": ci}


def _cfg(quick: bool):
    from hydra import compose, initialize_config_dir
    from hydra.core.global_hydra import GlobalHydra

    from rlsweep.algos import to_object
    from rlsweep.config import register_configs

    register_configs()
    GlobalHydra.instance().clear()
    over = ["experiment=claims", "logger.mode=disabled", "progress=false", "backend.num_threads=1", "device=cpu"]
    if quick:
        over += ["algo.num_steps=32", "algo.update_epochs=1"]
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=over)
    GlobalHydra.instance().clear()
    return to_object(cfg)


def claim_pin_memory(rounds: int, calls: int) -> dict[str, Any]:
    if not torch.cuda.is_available():
        return {"measured": "not applicable here (no CUDA device)", "verdict": "not applicable here"}
    from rlsweep.runtime import PinnedStaging

    dev = torch.device("cuda")
    rows, verdicts = [], []
    # MLP observations and rollouts, and a DQN batch of 32 Atari frame stacks (uint8)
    for x in (torch.randn(8, 4), torch.randn(256, 17), torch.randn(4096, 64),
              torch.randint(0, 255, (32, 4, 84, 84), dtype=torch.uint8)):
        staging = PinnedStaging(dev)

        def pinned() -> None:
            x.pin_memory().to(dev, non_blocking=True)
            torch.cuda.synchronize()

        def plain() -> None:
            x.to(dev, non_blocking=True)
            torch.cuda.synchronize()

        def staged() -> None:  # the remedy: page-locked buffers allocated once, reused (pin_memory=staging)
            staging.to_device(x, non_blocking=True)
            torch.cuda.synchronize()

        m = interleaved_ab(pinned, plain, rounds, calls)
        s = interleaved_ab(staged, plain, rounds, calls)
        rows.append(f"{tuple(x.shape)} {str(x.dtype).removeprefix('torch.')}: pin+copy {m['a_us']:.1f} us, "
                    f"staged {s['a_us']:.1f} us vs copy {m['b_us']:.1f} us ({m['ratio']:.2f}x, staged {s['ratio']:.2f}x)")
        verdicts.append(m["ratio_ci"][0] > 1.0)
    return {"measured": "; ".join(rows),
            "verdict": "confirmed" if any(verdicts) else "not seen here (pinning was not slower)"}


def claim_inplace(cfg: Any, rounds: int, calls: int) -> dict[str, Any]:
    from rlsweep.nets import mlp
    from rlsweep.runtime import Runtime

    rt_off, rt_on = Runtime(torch.device("cpu")), Runtime(torch.device("cpu"))
    rt_on.inplace = True
    a = cfg.algo
    torch.manual_seed(0)
    net_off = mlp(4, a.hidden_sizes, 2, rt_off, a.activation)
    net_on = mlp(4, a.hidden_sizes, 2, rt_on, a.activation)
    net_on.load_state_dict(net_off.state_dict())
    x = torch.randn(a.minibatch_size, 4)

    def step(net: torch.nn.Module) -> Callable[[], None]:
        def f() -> None:
            net.zero_grad(set_to_none=True)
            net(x).square().mean().backward()
        return f

    m = interleaved_ab(step(net_on), step(net_off), rounds, calls)
    big_t = [torch.randn(256, 256) for _ in range(6)]
    big_s = [torch.randn(256, 256) for _ in range(6)]
    p = interleaved_ab(lambda: rt_on.polyak_update(big_t, big_s, 0.005), lambda: rt_off.polyak_update(big_t, big_s, 0.005),
            rounds, calls)
    speedups = [1 / m["ratio"], 1 / p["ratio"]]
    lowest = 1 / m["ratio_ci"][1]  # the speed-up's lower 95% bound
    measured = (f"forward+backward (batch {a.minibatch_size}, {a.activation} {list(a.hidden_sizes)}): in-place "
                f"{m['a_us']:.0f} us vs {m['b_us']:.0f} us ({speedups[0]:.2f}x); Polyak update 256x256 nets: "
                f"{p['a_us']:.0f} us vs {p['b_us']:.0f} us ({speedups[1]:.2f}x)")
    small = lowest < 1.10
    verdict = "confirmed" if small else "refuted here (in-place paid >= 10% on the network step)"
    if small and speedups[1] >= 1.10:
        verdict = "confirmed for activations; the fused in-place Polyak update (_foreach_lerp_) does pay"
    return {"measured": measured, "verdict": verdict, "speedup": speedups[0], "polyak_speedup": speedups[1]}


def claim_twin(cfg: Any, rounds: int, calls: int) -> dict[str, Any]:
    from rlsweep.nets import mlp
    from rlsweep.runtime import ActingModules, Runtime

    rt = Runtime(torch.device("cpu"))
    a = cfg.algo
    actor, critic = mlp(4, a.hidden_sizes, 2, rt, a.activation), mlp(4, a.hidden_sizes, 1, rt, a.activation)
    switched, twins = ActingModules((actor, critic), twin=False), ActingModules((actor, critic), twin=True)
    obs = torch.randn(a.num_envs, 4)

    def act(acting: ActingModules) -> Callable[[], None]:
        def f() -> None:
            with torch.no_grad(), acting:
                m1, m2 = acting.modules
                m1(obs), m2(obs)
        return f

    m = interleaved_ab(act(switched), act(twins), rounds, calls)
    extra = (m["a_us"] - m["b_us"]) / m["b_us"]
    noticeable = m["ratio_ci"][0] > 1.05
    return {"measured": f"acting forward (actor+critic, batch {a.num_envs}): switching {m['a_us']:.0f} us vs "
                        f"twins {m['b_us']:.0f} us (+{extra:.0%} for switching)",
            "verdict": "confirmed" if noticeable else "not seen here (switching cost < 5% or within noise)",
            "ratio": m["ratio"]}


def claim_compile(cfg: Any, rounds: int, quick: bool) -> dict[str, Any]:
    """PPO's whole update step (loss, backward, clip, Adam) eager vs ``compile=default``."""
    import dataclasses

    from rlsweep.algos.ppo import PPO
    from rlsweep.compile_stats import CompileStats
    from rlsweep.envs import make_envs
    from rlsweep.timing import PhaseTimer
    from rlsweep.toggles import applied_toggles

    results = {}
    for mode in ("none", "default"):
        c = dataclasses.replace(cfg, compile=dataclasses.replace(cfg.compile, mode=mode))
        dev = torch.device("cpu")
        with applied_toggles(c, dev) as (rt, _states):
            stats = CompileStats()
            rt.compile_stats = stats
            envs = make_envs(c.env, c.algo.num_envs, 0)
            try:
                algo = PPO(c, envs, rt, PhaseTimer(dev))
                t0 = time.perf_counter()
                algo.iteration()  # compiles on the first call
                first = time.perf_counter() - t0
                rew, done = algo.rew_host, algo.done_host  # the rollout's host arrays, as iteration() passes them
                last = torch.as_tensor(algo.next_obs, dtype=torch.float32)
                n_mb = algo.batch_size // algo.minibatch_size * c.algo.update_epochs
                times = []
                for _ in range(rounds):
                    t0 = time.perf_counter()
                    algo._learn(rew, done, last)
                    times.append((time.perf_counter() - t0) / n_mb)
                results[mode] = {"us": statistics.median(times) * 1e6, "samples": times, "first_s": first,
                                 "compile_s": stats.total_compile_s()}
            finally:
                envs.close()
                stats.uninstall()
    # the two modes' rounds were timed one block after the other: independent samples
    ratio, ci = ratio_with_ci(results["none"]["samples"], results["default"]["samples"], paired=False)
    verdict = "confirmed" if ci[0] > 1.05 else ("refuted here" if ci[1] < 1.0 else "inconclusive")
    return {"measured": f"PPO update step per minibatch ({cfg.algo.minibatch_size}, tanh {list(cfg.algo.hidden_sizes)}): "
                        f"eager {results['none']['us']:.0f} us vs compiled {results['default']['us']:.0f} us "
                        f"({ratio:.2f}x faster, 95% CI [{ci[0]:.2f}, {ci[1]:.2f}]); one-off compile "
                        f"{results['default']['compile_s']:.1f} s",
            "verdict": verdict, "speedup": ratio, "speedup_ci": ci}


def run(quick: bool = False, repeats: int | None = None) -> dict[str, Any]:
    """Measure every claim; returns {"claims": [{"id", "claim", "measured", "verdict", ...}], "device": ...}."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        cfg = _cfg(quick)
        rounds = repeats or (3 if quick else 7)
        calls = 50 if quick else 500
        measured = {
            "pin_memory": claim_pin_memory(rounds, calls),
            "inplace": claim_inplace(cfg, rounds, calls),
            "twin_modules": claim_twin(cfg, rounds, calls),
            "compile": claim_compile(cfg, rounds, quick),
        }
    finally:
        torch.set_num_threads(threads)
    rows = [{"id": k, "claim": CLAIMS[k], **v} for k, v in measured.items()]
    return {"claims": rows, "device": "cuda" if torch.cuda.is_available() else "cpu", "threads": 1,
            "quick": quick, "rounds": rounds}


def markdown(res: dict[str, Any]) -> str:
    lines = [f"# The claims, measured here ({res['device']}, 1 intra-op thread, {res['rounds']} interleaved rounds)", "",
             "| claim | measured here | verdict |", "|---|---|---|"]
    for r in res["claims"]:
        lines.append(f"| {r['claim']} | {r['measured']} | {r['verdict']} |")
    return "\n".join(lines) + "\n"
