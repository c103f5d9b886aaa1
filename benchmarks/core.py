"""The side-by-side benchmark: rlsweep vs Stable-Baselines3 and TorchRL, the env-stepping limit, overheads.

Every measured run is its own subprocess, run interleaved (A B C D, then D C B A, ...) so every
side sees the same machine load; ratios come from runs paired within one repeat. rlsweep runs
twice per repeat: once with an empty compile cache ("cold", what a job on a fresh node pays) and
once with the cache an untimed run of the same config filled ("warm", a job whose functions were
compiled before). Repeat ``r`` runs seed ``r`` on every side, so the repeats are also the seeds of
the learning comparison. The targets are against SB3 (the ``peer`` fields); TorchRL, where it is
installed, is reported beside it (``peers``). rlsweep runs ARE ``python -m sweeps.train`` runs
(same config composition, same ``runner.train``), read back from their ``result.json``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from rlsweep.bootstrap import ci_text, learning_difference, ratio_with_ci
from rlsweep.records import read_record, walk_records

#: the fastest toggles measured per algorithm on a CPU with 1 intra-op thread (figures in
#: docs/results/bench_choices.md): every algorithm's update compiles into one graph (rlsweep.update)
#: and pays; a compiled call of the batch-1 (DQN, SAC) or batch-8 (PPO) acting forward costs as much
#: as the eager forward or more, so acting stays eager (compile.functions=[update]). Inductor's C++
#: wrapper and skipping dynamo's guards after warm-up take Python overhead off every gradient step.
BEST_TOGGLES: dict[str, dict[str, list[str]]] = {
    "cpu": {algo: ["compile=default", "compile.functions=[update]", "compile.cpp_wrapper=true",
                   "compile.skip_guards_after_warmup=true", "twin_modules=true"] for algo in ("ppo", "dqn", "sac")}
    # the Nature CNN: compiled alone its float32 NCHW update was no faster than eager; with NHWC
    # convolutions (and bfloat16, below) it was (docs/results/atari.md)
    | {"atari_ppo": ["compile=default", "compile.functions=[update]", "twin_modules=true",
                     "backend.channels_last=true"]},
    # not measured on a GPU here: CUDA graphs and asynchronous copies are the usual wins
    "cuda": {"atari_ppo": ["compile=reduce-overhead", "twin_modules=true", "non_blocking=true",
                           "backend.channels_last=true"],
             "ppo": ["compile=reduce-overhead", "twin_modules=true", "non_blocking=true"],
             "dqn": ["compile=reduce-overhead", "twin_modules=true", "non_blocking=true"],
             "sac": ["compile=reduce-overhead", "twin_modules=true", "non_blocking=true"]},
}

#: bfloat16 autocast (``dtype=bfloat16``) pays only where the update is big matmuls (SAC's 256-wide
#: layers, the Atari CNN) AND the CPU multiplies bfloat16 natively (AVX512-BF16, AMX); small layers
#: (PPO's 64-wide, DQN's acting) lose to the casts. So only those algorithms get it, and only where
#: :func:`bf16_matmul_speedup` measures at least BF16_MIN_SPEEDUP (emulated bfloat16 is slower).
#: Figures in docs/results/bench_choices.md.
BF16_ALGOS = ("sac", "atari_ppo")
BF16_MIN_SPEEDUP = 1.5


def bf16_matmul_speedup(size: int = 256, rounds: int = 6, calls: int = 10) -> float:
    """float32 time / bfloat16 time of a ``size``-cubed matmul on this CPU with one thread (interleaved)."""
    import torch

    from benchmarks.claims import interleaved_ab

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        gen = torch.Generator().manual_seed(0)
        a32, b32 = torch.randn(size, size, generator=gen), torch.randn(size, size, generator=gen)
        a16, b16 = a32.bfloat16(), b32.bfloat16()
        return interleaved_ab(lambda: torch.mm(a32, b32), lambda: torch.mm(a16, b16), rounds, calls)["ratio"]
    finally:
        torch.set_num_threads(threads)


@dataclass(frozen=True)
class PeerRun:
    """One peer side of a comparison: a peer library's worker, run one way.

    A comparison may run one library more than one way (SB3 on Atari: with its own env pipeline, as
    its users run it, and with rlsweep's wrappers, like for like); each way is a side of its own,
    interleaved with the others, with its own rows.
    """

    key: str  # its runs' key and its entry in the comparison's ``peers``
    library: str  # a PEERS key: the worker kind, and what ``--peers`` selects
    how: str = ""  # said after the library and version in the rows
    #: keywords for the worker beyond the comparison's own (e.g. run_sb3's ``pipeline``)
    worker_kwargs: tuple[tuple[str, Any], ...] = ()


#: one comparison per algorithm: preset, env, full budget, quick budget, target ratios on CPU
@dataclass(frozen=True)
class Comparison:
    algo: str
    env_id: str
    preset: str
    total_env_steps: int  # the same real budget on both sides (SB3 PPO rounds up to whole rollouts)
    quick_env_steps: int
    #: quick mode's smaller settings, as (rlsweep override, SB3 keyword, value): applied to EVERY side
    #: (the TorchRL peer takes SB3's keywords too)
    quick_settings: tuple[tuple[str, str, int], ...]
    #: steady-state env-steps/s against SB3 (warm-up and compile excluded on both sides)
    target_ratio: float
    #: whole-process env-steps/s against SB3 with a cold and with a warm compile cache (None: reported only)
    end_to_end_targets: tuple[float | None, float | None] = (None, None)
    #: whether the final returns are checked against the peer's (no bar where the budget is too small to learn)
    learning_bar: bool = True
    #: the peer sides this comparison has, the first the targets' (None: each peer of the bench, run its one way);
    #: a side runs when its library is among the bench's peers
    peer_runs: tuple[PeerRun, ...] | None = None

    def quick_overrides(self) -> list[str]:
        return [f"{key}={value}" for key, _, value in self.quick_settings]

    def quick_peer_kwargs(self) -> dict[str, int]:
        return {kw: value for _, kw, value in self.quick_settings}

    @property
    def name(self) -> str:
        return f"{self.algo}_{self.env_id}"


COMPARISONS = (
    Comparison("ppo", "CartPole-v1", "sb3_ppo", 7 * 16384, 3 * 512,
               (("algo.num_steps", "n_steps", 64), ("algo.update_epochs", "n_epochs", 2)), 3.0, (4.0, 5.0)),
    Comparison("dqn", "CartPole-v1", "sb3_dqn", 196 * 256, 6 * 256,
               (("algo.learning_starts", "learning_starts", 256), ("algo.gradient_steps", "gradient_steps", 16)), 3.0,
               (2.5, 2.5)),
    Comparison("sac", "Pendulum-v1", "sb3_sac", 10_000, 750,
               (("algo.learning_starts", "learning_starts", 100),), 2.0, (2.5, 2.5)),
    # the Nature CNN on Breakout frames against SB3's PPO CnnPolicy, twice: on SB3's own Atari pipeline
    # (make_atari_env + VecFrameStack, as SB3's users run it: the target's side) and on rlsweep's
    # wrappers (envs.atari_wrappers: the same preprocessing code on both sides, like for like);
    # 20 rollouts of 8 x 128 steps: far from learning, so no learning bar; SB3 only (no TorchRL Atari peer)
    Comparison("atari_ppo", "ALE/Breakout-v5", "atari_ppo", 20 * 1024, 8 * 256,
               (("algo.num_steps", "n_steps", 32), ("algo.update_epochs", "n_epochs", 2)), 1.0,
               learning_bar=False, peer_runs=(
                   PeerRun("sb3", "sb3", "as its users run it (make_atari_env + VecFrameStack)",
                           (("pipeline", "sb3"),)),
                   PeerRun("sb3_rlsweep_wrappers", "sb3", "with rlsweep's wrappers (like for like)",
                           (("pipeline", "rlsweep"),)))),
)
#: what ``--algos`` may name
ALGOS = tuple(c.algo for c in COMPARISONS)
@dataclass(frozen=True)
class Peer:
    """A peer library: its worker kind (benchmarks.worker), import name and pip name."""

    key: str
    module: str
    label: str


#: SB3 first: it is the peer the targets name; TorchRL's versions are pinned in the bench extra
PEERS = (Peer("sb3", "stable_baselines3", "stable-baselines3"), Peer("torchrl", "torchrl", "torchrl"))


def installed_peers() -> tuple[str, ...]:
    import importlib.util

    return tuple(p.key for p in PEERS if importlib.util.find_spec(p.module) is not None)


#: the training command's module: the same Hydra main as ``python -m sweeps.train`` and ``rlsweep-train``,
#: importable from an installed wheel too (``sweeps/`` exists only in a checkout)
TRAIN_MODULE = "rlsweep.train"

COMMON = ["logger.mode=disabled", "progress=false", "backend.num_threads=1", "device=cpu"]


@dataclass
class Bench:
    """Settings of one bench invocation."""

    root: Path  # repository root: where ``python -m sweeps.train`` runs
    #: interleaved repeats per comparison, repeat r running seed r on every side: also the seeds
    #: of the learning verdict, which wants at least 10 a side
    repeats: int = 10
    quick: bool = False
    algos: tuple[str, ...] = ("ppo", "dqn", "sac")
    #: peer keys (see PEERS) to run beside rlsweep; "sb3" is the one the targets are against
    peers: tuple[str, ...] = ("sb3",)
    #: :func:`bf16_matmul_speedup` of this machine (None: not measured, bfloat16 not chosen)
    bf16_speedup: float | None = None
    #: scratch folder of the bench's jobs; made by :func:`run`, removed when it ends (also on failure)
    workdir: Path | None = None
    #: also measure the raw-stepping limit, the cold start and the launchers (minutes that a run of
    #: one comparison may not want)
    overheads: bool = True

    def toggles(self, algo: str, device: str = "cpu") -> list[str]:
        """The best toggles of ``algo`` on ``device``: BEST_TOGGLES, plus bfloat16 where it pays here."""
        toggles = list(BEST_TOGGLES[device][algo])
        if device == "cpu" and algo in BF16_ALGOS and (self.bf16_speedup or 0.0) >= BF16_MIN_SPEEDUP:
            toggles.append("dtype=bfloat16")
        return toggles

    def env(self, compile_cache_dir: Path | None = None) -> dict[str, str]:
        """Child environment: the same rlsweep as this process, 1 thread everywhere.

        ``compile_cache_dir``: the only compile cache the child may see. ``compile.cache_dir``
        already wins over TORCHINDUCTOR_CACHE_DIR, but the variable is set to the same folder too
        (anything reading it before the compile toggle applies sees that folder), and
        TRITON_CACHE_DIR is dropped: set, it would keep Triton's kernels outside the folder, so a
        "cold" GPU run would reuse them; unset, inductor keeps them under its cache folder.
        """
        import rlsweep

        src = str(Path(rlsweep.__file__).resolve().parents[1])
        path = os.pathsep.join(p for p in (src, str(self.root), os.environ.get("PYTHONPATH", "")) if p)
        env = {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1",
               "MKL_NUM_THREADS": "1", "WANDB_MODE": "disabled", "HYDRA_FULL_ERROR": "1"}
        if compile_cache_dir is not None:
            env.pop("TRITON_CACHE_DIR", None)
            env["TORCHINDUCTOR_CACHE_DIR"] = str(compile_cache_dir)
        return env


# -- single runs ---------------------------------------------------------------------------------
#: the compile caches of rlsweep's runs: an empty folder per run, or the folder a warm-up run filled
CACHE_KINDS = ("cold", "warm")
#: overrides that vary from run to run and say nothing about the configuration
_RUN_SPECIFIC = ("hydra.", "compile.cache_dir=")


def rlsweep_args(b: Bench, c: Comparison, seed: int, cache_dir: Path, out_dir: Path,
                 device: str = "cpu") -> list[str]:
    """The overrides of one ``python -m sweeps.train`` job: preset, best toggles, budget, its compile cache."""
    args = [f"experiment={c.preset}", *b.toggles(c.algo, device), *COMMON, f"seed={seed}",
            f"total_env_steps={c.quick_env_steps if b.quick else c.total_env_steps}",
            f"compile.cache_dir={cache_dir}", f"hydra.run.dir={out_dir}"]
    # the peers' evaluation episodes (a preset may set fewer: atari_ppo's games are long)
    return args + ([*c.quick_overrides(), "warmup_iters=1", "eval_episodes=3"] if b.quick else ["eval_episodes=10"])


def run_rlsweep(b: Bench, c: Comparison, seed: int, cache_dir: Path, cache: str,
                device: str = "cpu") -> dict[str, Any]:
    """One ``python -m sweeps.train`` job with the preset, the best toggles and ``cache_dir``; its record.

    ``cache`` names what ``cache_dir`` holds ("cold", "warm" or "warmup") for the record; the
    end-to-end rate is over the whole process, timed from outside (interpreter start-up, imports,
    config composition, compile, training, evaluation), as the peers' are.
    """
    out_dir = b.workdir / f"rlsweep-{c.algo}-{seed}-{cache}-{time.monotonic_ns()}"
    args = rlsweep_args(b, c, seed, cache_dir, out_dir, device)
    # a /tmp of its own, as a job on another node has: only compile.cache_dir carries compiled code over
    tmp = out_dir.with_name(out_dir.name + "-tmp")
    tmp.mkdir(parents=True)
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", TRAIN_MODULE, *args], cwd=b.root,
                          env={**b.env(cache_dir), "TMPDIR": str(tmp)}, capture_output=True, text=True, timeout=3600)
    process_wall = time.perf_counter() - t0
    shutil.rmtree(tmp, ignore_errors=True)
    rec = read_record(out_dir)
    if proc.returncode != 0 or rec is None:
        raise RuntimeError(f"rlsweep run failed ({' '.join(args)}):\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    shutil.rmtree(out_dir, ignore_errors=True)
    thr = rec["throughput"]
    per_iter = rec["env_steps"] // rec["iterations"]
    steady_steps = thr["steady_iterations"] * per_iter
    update_s = rec["timings"]["update"]["total_s"]
    collect_s = thr["steady_s"] - update_s
    return {
        "cache": cache,
        "seed": seed,
        "env_steps": rec["env_steps"],
        "env_steps_per_s": thr["env_steps_per_s"],
        "process_wall_s": process_wall,
        "record_wall_s": rec["wall_s"],
        "end_to_end_env_steps_per_s": rec["env_steps"] / process_wall,
        "steady_from_env_steps": rec["env_steps"] - steady_steps,
        "collection_env_steps_per_s": steady_steps / collect_s if collect_s > 0 else None,
        "final_return": rec["learning"]["final_return"],
        "eval_returns": rec["learning"].get("eval_returns", []),
        "compile_s": rec["compile"]["compile_s"],
        "compile_cache": rec["compile"].get("cache"),
        "timings_total_s": {k: v["total_s"] for k, v in rec["timings"].items()},
        "overrides": [a for a in args if not a.startswith(_RUN_SPECIFIC)],
    }


def run_worker(b: Bench, kind: str, **kwargs: Any) -> dict[str, Any]:
    """A peer (or the limit) in its own process; ``process_wall_s`` and the end-to-end rate timed from outside."""
    out = b.workdir / f"{kind}-{time.monotonic_ns()}.json"
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "benchmarks.worker", kind, json.dumps(kwargs), str(out)],
                          cwd=b.root, env=b.env(), capture_output=True, text=True, timeout=3600)
    process_wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} worker failed:\n{proc.stderr[-4000:]}")
    res = json.loads(out.read_text())
    if kind != "limit":  # the peer's own wall starts after its imports; the user pays those too
        res["in_process_end_to_end_env_steps_per_s"] = res["end_to_end_env_steps_per_s"]
        res["process_wall_s"] = process_wall
        res["end_to_end_env_steps_per_s"] = res["env_steps"] / process_wall
    return res


# -- the comparisons -------------------------------------------------------------------------------
def _median(runs: list[dict[str, Any]], key: str) -> float | None:
    values = [r[key] for r in runs if r.get(key) is not None]
    return statistics.median(values) if values else None


def _target(ratio: float, target: float | None) -> dict[str, Any]:
    return {"target": target, "meets_target": None if target is None else ratio >= target}


def _peer_summary(c: Comparison, ours: dict[str, list[dict[str, Any]]], runs: list[dict[str, Any]],
                  label: str, how: str = "") -> dict[str, Any]:
    """One peer's side of a comparison: steady and end-to-end ratios with intervals, the learning verdict.

    Steady state from the warm runs (the cache changes only the warm-up, which it excludes);
    learning from the warm runs too (seed r of the cold run is the same training run again).
    """
    warm = ours["warm"]
    ratio, ci = ratio_with_ci([o["env_steps_per_s"] for o in warm], [p["env_steps_per_s"] for p in runs], paired=True)
    e2e = {}
    for kind, target in zip(CACHE_KINDS, c.end_to_end_targets):
        r, rci = ratio_with_ci([o["end_to_end_env_steps_per_s"] for o in ours[kind]],
                               [p["end_to_end_env_steps_per_s"] for p in runs], paired=True)
        e2e[kind] = {"ratio": r, "ratio_ci": rci, "rlsweep_process_wall_s": _median(ours[kind], "process_wall_s"),
                     "peer_process_wall_s": _median(runs, "process_wall_s"), **_target(r, target)}
    returns = [p["final_return"] for p in runs]
    return {"peer": f"{label} {runs[0]['version']}" + (f" {how}" if how else ""), "env_steps": runs[0]["env_steps"],
            "peer_env_steps_per_s": statistics.median(p["env_steps_per_s"] for p in runs),
            "ratio": ratio, "ratio_ci": ci, "end_to_end": e2e,
            "peer_final_return": float(np.mean(returns)),
            # "no worse" = the difference's 95% interval reaches 0 or above (stats.learning_difference)
            "learning": learning_difference([o["final_return"] for o in warm], returns) if c.learning_bar else None}


def _compile_summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Median compile seconds of a cache kind's runs, and their summed cache hits and misses."""
    caches = [r["compile_cache"] for r in runs if r.get("compile_cache")]
    total = {k: sum(cc.get(k) or 0 for cc in caches)
             for k in ("fxgraph_hits", "fxgraph_misses", "aot_autograd_hits", "aot_autograd_misses")}
    looked_up = total["fxgraph_hits"] + total["fxgraph_misses"]
    return {"compile_s": _median(runs, "compile_s"), **total,
            "served_from_cache": total["fxgraph_hits"] / looked_up if looked_up else None}


def peer_sides(b: Bench, c: Comparison) -> tuple[PeerRun, ...]:
    """The peer sides ``c`` runs on this bench: its own, or each bench peer's one way; libraries the bench has."""
    sides = c.peer_runs if c.peer_runs is not None else tuple(PeerRun(key, key) for key in b.peers)
    return tuple(p for p in sides if p.library in b.peers)


def compare(b: Bench, c: Comparison, log: Any = print) -> dict[str, Any]:
    how = {p.key: p for p in peer_sides(b, c)}
    peer_runs: dict[str, list[dict[str, Any]]] = {key: [] for key in how}
    ours: dict[str, list[dict[str, Any]]] = {kind: [] for kind in CACHE_KINDS}
    # the warm cache: filled by one untimed run of the very config the warm runs use (only the
    # seed differs, which the compiled graphs do not depend on: the warm runs' records show it as
    # zero cache misses, see ``compile``)
    warm_dir = b.workdir / f"compile-cache-{c.algo}-warm"
    warm_dir.mkdir(parents=True)
    warmup = run_rlsweep(b, c, seed=b.repeats, cache_dir=warm_dir, cache="warmup")
    # the peers leave out the same leading env steps as rlsweep's warm-up iterations (the boundary
    # depends only on the config)
    steady_from = int(warmup["steady_from_env_steps"])
    sides = (*CACHE_KINDS, *peer_runs)
    for r in range(b.repeats):
        for side in (sides if r % 2 == 0 else sides[::-1]):
            if side == "cold":  # a folder no run used before, gone afterwards
                cold_dir = b.workdir / f"compile-cache-{c.algo}-cold-{r}"
                cold_dir.mkdir(parents=True)
                ours["cold"].append(run_rlsweep(b, c, seed=r, cache_dir=cold_dir, cache="cold"))
                shutil.rmtree(cold_dir, ignore_errors=True)
            elif side == "warm":
                ours["warm"].append(run_rlsweep(b, c, seed=r, cache_dir=warm_dir, cache="warm"))
                if c.algo == "ppo":  # the limit, right beside the run it bounds (same machine load)
                    ours["warm"][-1]["raw_limit_env_steps_per_s"] = _raw_limit(b, r)
            else:
                peer_runs[side].append(run_worker(
                    b, how[side].library, algo=c.algo, seed=r, steady_from_env_steps=steady_from,
                    total_env_steps=c.quick_env_steps if b.quick else c.total_env_steps,
                    eval_episodes=3 if b.quick else 10, overrides=c.quick_peer_kwargs() if b.quick else {},
                    **dict(how[side].worker_kwargs)))
        log(f"  {c.name} repeat {r + 1}/{b.repeats} (seed {r}): steady rlsweep {ours['warm'][-1]['env_steps_per_s']:.0f} vs "
            + ", ".join(f"{key} {runs[-1]['env_steps_per_s']:.0f}" for key, runs in peer_runs.items())
            + " env-steps/s; whole process rlsweep cold "
            + f"{ours['cold'][-1]['process_wall_s']:.1f} s, warm {ours['warm'][-1]['process_wall_s']:.1f} s vs "
            + ", ".join(f"{key} {runs[-1]['process_wall_s']:.1f} s" for key, runs in peer_runs.items()))
    labels = {p.key: p.label for p in PEERS}
    peers = {key: _peer_summary(c, ours, runs, labels[how[key].library], how[key].how)
             for key, runs in peer_runs.items()}
    main = peers[next(iter(peer_runs))]
    compile_stats = {kind: _compile_summary(runs) for kind, runs in ours.items()}
    warm_cc = compile_stats["warm"]
    # a warm run that compiled anything anew did not measure a warm cache: said, not hidden
    compile_stats["warm_cache_complete"] = (warm_cc["fxgraph_misses"] == 0 and warm_cc["aot_autograd_misses"] == 0
                                            if any(r.get("compile_cache") for r in ours["warm"]) else None)
    rl_ret = [o["final_return"] for o in ours["warm"]]
    # the same seed trained twice, once from freshly compiled graphs and once from cached ones
    compile_stats["cold_and_warm_returns_equal"] = rl_ret == [o["final_return"] for o in ours["cold"]]
    return {
        "algo": c.algo, "env_id": c.env_id, "preset": c.preset,
        "rlsweep_overrides": ours["warm"][0]["overrides"],
        "seeds": list(range(b.repeats)),
        "peer": main["peer"],
        "env_steps": {"rlsweep": ours["warm"][0]["env_steps"], "peer": main["env_steps"]},
        "rlsweep_env_steps_per_s": statistics.median(o["env_steps_per_s"] for o in ours["warm"]),
        "peer_env_steps_per_s": main["peer_env_steps_per_s"],
        "ratio": main["ratio"], "ratio_ci": main["ratio_ci"],
        "target_ratio": c.target_ratio,
        "meets_target": main["ratio"] >= c.target_ratio,
        "end_to_end": main["end_to_end"],
        "rlsweep_final_return": float(np.mean(rl_ret)),
        "peer_final_return": main["peer_final_return"],
        "learning": main["learning"],
        "compile": compile_stats,
        "peers": peers,
        "repeats": {"rlsweep_warmup": [warmup], "rlsweep_cold": ours["cold"], "rlsweep_warm": ours["warm"],
                    **peer_runs},
    }


# -- the limit ---------------------------------------------------------------------------------------
#: PPO's collection phase as a share of raw SyncVectorEnv stepping at the same env count
COLLECTION_TARGET = 0.6


def limit(b: Bench, ppo_runs: list[dict[str, Any]], log: Any = print) -> dict[str, Any]:
    """Raw SyncVectorEnv stepping (random actions) vs rlsweep PPO's collection phase, same env count."""
    n_envs = 8
    coll = [r["collection_env_steps_per_s"] for r in ppo_runs if r.get("collection_env_steps_per_s")]
    # paired where each PPO run has the raw stepping timed right beside it (same machine load);
    # raw stepping timed on its own, after the runs, is independent of them
    beside = [r for r in ppo_runs if r.get("collection_env_steps_per_s") and r.get("raw_limit_env_steps_per_s")]
    paired = bool(beside) and len(beside) == len(coll)
    raw = ([r["raw_limit_env_steps_per_s"] for r in beside] if paired
           else [_raw_limit(b, r) for r in range(b.repeats)])
    frac, ci = ratio_with_ci(coll, raw, paired=paired) if coll else (None, None)
    log(f"  limit: raw {statistics.median(raw):.0f} env-steps/s, PPO collection fraction {frac}")
    return {"env_id": "CartPole-v1", "num_envs": n_envs, "raw_env_steps_per_s": statistics.median(raw),
            "ppo_collection_env_steps_per_s": statistics.median(coll) if coll else None,
            "collection_fraction": frac, "collection_fraction_ci": ci, "target_fraction": COLLECTION_TARGET,
            "meets_target": frac is not None and frac >= COLLECTION_TARGET}


#: vector steps of one raw-limit measurement: long enough to last about as long as the PPO run's own
#: env stepping, since shorter ones scatter widely (docs/results/bench_choices.md)
_RAW_LIMIT_VECTOR_STEPS = 16384


def _raw_limit(b: Bench, seed: int) -> float:
    return run_worker(b, "limit", env_id="CartPole-v1", num_envs=8,
                      vector_steps=500 if b.quick else _RAW_LIMIT_VECTOR_STEPS, seed=seed)["env_steps_per_s"]


# -- framework overheads ---------------------------------------------------------------------------
_COLD_START_SAMPLES = 5
#: seconds ``python -m sweeps.train`` may take to its first env step beyond ``import torch, gymnasium``
COLD_START_TARGET_S = 1.0
_FIRST_STEP = re.compile(r"training \w+ on ")


def _time_until_line(cmd: list[str], b: Bench, pattern: re.Pattern[str] | None) -> float:
    """Seconds from process start to the first output line matching ``pattern`` (or to exit)."""
    t0 = time.perf_counter()
    proc = subprocess.Popen(cmd, cwd=b.root, env=b.env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert proc.stdout is not None
    seen: float | None = None
    lines = []
    for line in proc.stdout:
        lines.append(line)
        if seen is None and pattern is not None and pattern.search(line):
            seen = time.perf_counter() - t0
    proc.wait()
    end = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{''.join(lines)[-3000:]}")
    if pattern is not None and seen is None:
        raise RuntimeError(f"no line matching {pattern.pattern!r} in the output of {' '.join(cmd)}")
    return seen if seen is not None else end


#: the baselines of the cold start, each timed like rlsweep's side: to a line it prints (a process's
#: exit would add ~0.7 s of interpreter teardown to the baseline only). The second adds what every
#: PyTorch RL program does before its first step: building an optimizer, which imports dynamo
#: (torch.optim's methods are wrapped by torch._disable_dynamo), ~0.6 s here.
_IMPORT_BASELINE = "import torch, gymnasium; print('training baseline on import', flush=True)"
_OPTIM_BASELINE = ("import torch, gymnasium; torch.optim.Adam(torch.nn.Linear(1, 1).parameters()); "
                   "print('training baseline on import+optimizer', flush=True)")


def cold_start(b: Bench, log: Any = print) -> dict[str, Any]:
    """``python -m sweeps.train`` (tiny budget) up to its first env step vs importing torch+gymnasium."""
    base, optim, ours = [], [], []
    # at least 5 of each, alternated: one start-up is seconds of imports and page-cache reads, and
    # two samples on a shared machine moved the median by 0.4 s (1.1 s over 5, 1.5 s over 2)
    for r in range(b.repeats if b.quick else max(b.repeats, _COLD_START_SAMPLES)):
        base.append(_time_until_line([sys.executable, "-c", _IMPORT_BASELINE], b, _FIRST_STEP))
        optim.append(_time_until_line([sys.executable, "-c", _OPTIM_BASELINE], b, _FIRST_STEP))
        run_dir = b.workdir / f"cold-{r}"
        ours.append(_time_until_line([sys.executable, "-m", TRAIN_MODULE, "experiment=smoke", *COMMON,
                                      "total_env_steps=256", "eval_episodes=0", f"hydra.run.dir={run_dir}"],
                                     b, _FIRST_STEP))
    over = statistics.median(ours) - statistics.median(base)
    log(f"  cold start: {statistics.median(ours):.2f} s to first env step, imports {statistics.median(base):.2f} s, "
        f"imports + an optimizer {statistics.median(optim):.2f} s")
    return {"train_to_first_env_step_s": statistics.median(ours), "import_torch_gymnasium_s": statistics.median(base),
            "import_and_optimizer_s": statistics.median(optim),
            "overhead_s": over, "overhead_over_optimizer_s": statistics.median(ours) - statistics.median(optim),
            "target_overhead_s": COLD_START_TARGET_S, "meets_target": over <= COLD_START_TARGET_S,
            "samples": {"train": ours, "import": base, "import_and_optimizer": optim}}


def slurm_available() -> bool:
    if not shutil.which("sinfo"):
        return False
    try:
        return subprocess.run(["sinfo", "-h"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


#: alternated samples of each sweep size per launcher: one 1-job sweep on a shared machine once
#: took 10.4 s where its neighbours took 7-8 s, and made the per-job figure negative
_LAUNCHER_SAMPLES = 3


def launcher_overhead(b: Bench, log: Any = print) -> dict[str, Any]:
    """Marginal wall seconds per extra trivial job: (median wall(k jobs) - median wall(1 job)) / (k - 1)."""
    k = 2 if b.quick else 3
    samples = 1 if b.quick else _LAUNCHER_SAMPLES
    out: dict[str, Any] = {}
    launchers = ["basic", "submitit_local"] + (["submitit_slurm"] if slurm_available() else [])
    for launcher in launchers:
        walls: dict[int, list[float]] = {1: [], k: []}
        job_walls: list[float] = []
        for _ in range(samples):
            for n in (1, k):
                sweep_dir = b.workdir / f"launch-{launcher}-{n}-{time.monotonic_ns()}"
                seeds = ",".join(str(i) for i in range(n))
                cmd = [sys.executable, "-m", TRAIN_MODULE, "-m", "experiment=smoke", *COMMON, "total_env_steps=256",
                       "eval_episodes=0", "warmup_iters=0", f"seed={seeds}", f"hydra.sweep.dir={sweep_dir}"]
                if launcher != "basic":
                    cmd.append(f"hydra/launcher={launcher}")
                walls[n].append(_time_until_line(cmd, b, None))
                if n == k:
                    job_walls += [rec["wall_s"] for _, rec in walk_records(sweep_dir)]
        one, many = statistics.median(walls[1]), statistics.median(walls[k])
        per_job = (many - one) / (k - 1)
        out[launcher] = {"per_job_s": per_job, "one_job_sweep_s": one, f"{k}_job_sweep_s": many,
                         "trivial_job_train_s": statistics.mean(job_walls) if job_walls else None,
                         "samples": {str(n): w for n, w in walls.items()}}
        log(f"  launcher {launcher}: {per_job:.2f} s per extra job (1-job sweep {one:.1f} s, medians of {samples})")
    if "submitit_slurm" not in out:
        out["submitit_slurm"] = "not available (no working Slurm: `sinfo` failed or is missing)"
    return out


# -- the whole bench -----------------------------------------------------------------------------
def run(b: Bench, log: Any = print) -> dict[str, Any]:
    started = time.time()
    b.workdir = Path(tempfile.mkdtemp(prefix="rlsweep-bench-"))
    try:
        return _run(b, log, started)
    finally:
        shutil.rmtree(b.workdir, ignore_errors=True)


def _run(b: Bench, log: Any, started: float) -> dict[str, Any]:
    import platform

    import torch

    from rlsweep.results import fingerprint

    if b.bf16_speedup is None:
        b.bf16_speedup = bf16_matmul_speedup()
    log(f"bfloat16 matmul speed-up on this CPU: {b.bf16_speedup:.2f}x "
        f"(dtype=bfloat16 for {', '.join(BF16_ALGOS)} from {BF16_MIN_SPEEDUP}x)")
    result: dict[str, Any] = {
        "settings": {"repeats": b.repeats, "quick": b.quick, "threads_per_run": 1, "peers": list(b.peers),
                     "bf16_matmul_speedup": b.bf16_speedup, "bf16_min_speedup": BF16_MIN_SPEEDUP},
        "fingerprint": fingerprint(torch.device("cpu")),
        "load_avg_at_start": os.getloadavg(), "python": platform.python_version(),
        "comparisons": {},
    }
    ppo_runs: list[dict[str, Any]] = []
    for c in COMPARISONS:
        if c.algo not in b.algos:
            continue
        log(f"{c.name}: rlsweep ({' '.join(b.toggles(c.algo))}) vs {', '.join(b.peers)}, "
            f"{b.repeats} interleaved repeats")
        comp = compare(b, c, log)
        result["comparisons"][c.name] = comp
        result[c.name] = {k: v for k, v in comp.items() if k != "repeats"}
        if c.algo == "ppo":
            ppo_runs = comp["repeats"]["rlsweep_warm"]
    if b.overheads:
        log("limit")
        result["limit"] = limit(b, ppo_runs, log)
        log("framework overhead")
        result["cold_start"] = cold_start(b, log)
        result["launchers"] = launcher_overhead(b, log)
    result["load_avg_at_end"] = os.getloadavg()
    result["bench_wall_s"] = time.time() - started
    return result


def _verdict(ok: bool | None, yes: str = "met", no: str = "MISSED") -> str:
    return "(reported)" if ok is None else (yes if ok else no)


def _fmt(x: float | None, spec: str, none: str = "-") -> str:
    return none if x is None else format(x, spec)


def _speed_rows(name: str, c: dict[str, Any]) -> list[str]:
    """Steady state and end to end (cold and warm compile cache) against each peer; targets on SB3's rows."""
    rows = []
    for i, p in enumerate(c["peers"].values()):
        steady_target = f"{c['target_ratio']:g}x {_verdict(c['meets_target'])}" if i == 0 else "(reported)"
        rows.append(f"| {name} | {p['peer']} | steady state (env-steps/s) | {c['rlsweep_env_steps_per_s']:.0f} | "
                    f"{p['peer_env_steps_per_s']:.0f} | {p['ratio']:.2f}x {ci_text(p['ratio_ci'])} | {steady_target} |")
        for kind in CACHE_KINDS:
            e = p["end_to_end"][kind]
            target = (f"{e['target']:g}x {_verdict(e['meets_target'])}" if i == 0 and e["target"] is not None
                      else "(reported)")
            rows.append(f"| {name} | {p['peer']} | end to end, {kind} compile cache (process s) | "
                        f"{e['rlsweep_process_wall_s']:.1f} | {e['peer_process_wall_s']:.1f} | {e['ratio']:.2f}x "
                        f"{ci_text(e['ratio_ci'])} | {target} |")
    return rows


def _learning_rows(name: str, c: dict[str, Any]) -> list[str]:
    rows = []
    for p in c["peers"].values():
        d = p["learning"]
        if d is None:
            rows.append(f"| {name} | {p['peer']} | {len(c['seeds'])} | {c['rlsweep_final_return']:.1f} | "
                        f"{p['peer_final_return']:.1f} | | | no bar (budget too small to learn) |")
            continue
        pi = d["p_improvement_ci"]
        rows.append(f"| {name} | {p['peer']} | {d['n_ours']} / {d['n_peer']} | {d['mean_ours']:.1f} | "
                    f"{d['mean_peer']:.1f} | {d['mean_diff']:+.1f} [{d['ci_low']:+.1f}, {d['ci_high']:+.1f}] | "
                    f"{d['p_improvement']:.2f} [{pi[0]:.2f}, {pi[1]:.2f}] | "
                    f"{'no worse' if d['no_worse'] else 'WORSE'} |")
    return rows


def _compile_row(name: str, c: dict[str, Any]) -> str:
    cs = c["compile"]

    def cell(kind: str) -> str:
        k = cs[kind]
        served = "-" if k["served_from_cache"] is None else f"{k['served_from_cache']:.0%}"
        return (f"{_fmt(k['compile_s'], '.1f')} | {served} ({k['fxgraph_hits']} hits, {k['fxgraph_misses']} misses; "
                f"AOT {k['aot_autograd_hits']}/{k['aot_autograd_misses']})")

    complete = {True: "yes", False: "NO: the warm runs compiled anew", None: "-"}[cs["warm_cache_complete"]]
    return f"| {name} | {cell('cold')} | {cell('warm')} | {complete} |"


def markdown(res: dict[str, Any]) -> str:
    f = res["fingerprint"]
    comps = res["comparisons"]
    lines = [f"# rlsweep bench ({'quick' if res['settings']['quick'] else 'full'}, "
             f"{res['settings']['repeats']} interleaved repeats = seeds, 1 intra-op thread per run)", "",
             f"Machine: {f.get('cpu_model')} x{f.get('cpu_count')}, torch {f.get('torch')}; "
             f"load avg at start {res['load_avg_at_start'][0]:.2f}, at end {res['load_avg_at_end'][0]:.2f}; "
             f"bfloat16 matmul speed-up {res['settings'].get('bf16_matmul_speedup') or 0:.2f}x.", "",
             "## Speed", "",
             "| comparison | peer | measure | rlsweep | peer | ratio [95% CI] | target |",
             "|---|---|---|---:|---:|---|---|"]
    for name, c in comps.items():
        lines += _speed_rows(name, c)
    lines += ["", "Ratios are env-steps/s, rlsweep / peer (the geometric mean of the paired repeats' ratios, with "
              "Student's t 95% interval over them: wide with two repeats, none with one). Steady state: warm-up and compile excluded on every side, same boundary. End to "
              "end: the whole process timed from outside (interpreter start-up, imports, compile, training, "
              "evaluation; the process seconds shown are medians), rlsweep once with an empty compile cache (cold) "
              "and once with the cache an untimed run of the same config filled (warm). Peers run the same "
              "hyper-parameters, env, env count and env-step budget; the targets are against SB3.", "",
              "rlsweep runs `python -m sweeps.train " + "`; `".join(
                  " ".join(o for o in c["rlsweep_overrides"] if not o.startswith(("seed=", "logger.", "progress=")))
                  for c in comps.values()) + "`.", "",
              "## Learning", "",
              "| comparison | peer | seeds (rlsweep / peer) | rlsweep mean return | peer mean return | "
              "difference [95% CI] | P(rlsweep > peer) [95% CI] | verdict |",
              "|---|---|---|---:|---:|---|---|---|"]
    for name, c in comps.items():
        lines += _learning_rows(name, c)
    lines += ["", "Final return = mean of the deterministic evaluation episodes; seed r on both sides in repeat r "
              "(rlsweep's warm-cache runs). Difference of the means with a 95% bootstrap interval (each side "
              "resampled); P(rlsweep > peer) over all seed pairs, ties counting half (rliable's probability of "
              "improvement). Verdict \"no worse\" while the interval's upper bound is >= 0.", "",
              "## Compile (rlsweep)", "",
              "| comparison | cold: compile s (median) | cold: served from cache | warm: compile s (median) | "
              "warm: served from cache | warm cache complete |",
              "|---|---:|---|---:|---|---|"]
    for name, c in comps.items():
        lines.append(_compile_row(name, c))
    if "limit" not in res:  # --skip-overheads
        return "\n".join(lines) + "\n"
    lim = res["limit"]
    frac = lim["collection_fraction"]
    lines += ["", "## Limit", "",
              f"Raw SyncVectorEnv x{lim['num_envs']} {lim['env_id']} (random actions): "
              f"{lim['raw_env_steps_per_s']:.0f} env-steps/s; rlsweep PPO collection: "
              + (f"{lim['ppo_collection_env_steps_per_s']:.0f} env-steps/s = {frac:.1%} of the limit "
                 f"(target >= {lim['target_fraction']:.0%}: {_verdict(lim['meets_target'])})"
                 if frac is not None else "not measured"),
              "", "## Framework overhead", ""]
    cs = res["cold_start"]
    lines.append(f"Cold `python -m sweeps.train` to first env step: {cs['train_to_first_env_step_s']:.2f} s; "
                 f"`import torch, gymnasium`: {cs['import_torch_gymnasium_s']:.2f} s; overhead "
                 f"{cs['overhead_s']:.2f} s (target <= {cs['target_overhead_s']:g} s: {_verdict(cs['meets_target'])})"
                 + (f"; over importing and building one optimizer (which imports dynamo, as in every PyTorch "
                    f"RL program): {cs['overhead_over_optimizer_s']:.2f} s" if "overhead_over_optimizer_s" in cs else "")
                 + ". Every side is timed to a line it prints.")
    lines += ["", "| launcher (medians) | per extra trivial job (s) | 1-job sweep (s) |", "|---|---:|---:|"]
    for name, v in res["launchers"].items():
        if isinstance(v, str):
            lines.append(f"| {name} | {v} | |")
        else:
            lines.append(f"| {name} | {v['per_job_s']:.2f} | {v['one_job_sweep_s']:.2f} |")
    return "\n".join(lines) + "\n"
