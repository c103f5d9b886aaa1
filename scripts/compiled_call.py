"""What a compiled gradient step costs per call outside its kernels: the same PPO-shaped functional step
(two 64-unit tanh MLPs, clipped policy loss + value loss, ``torch.func.grad``, Adam written out in place)
called eagerly, through ``torch.compile``, through it with dynamo's guards skipped
(``torch.compiler.set_stance(skip_guard_eval_unsafe=True)``: what ``compile.skip_guards_after_warmup`` does),
and as torch's precompiled function (``aot_compile``) called directly, its guard check disabled.

    taskset -c 1 python scripts/compiled_call.py --repeats 7

One thread; the four ways interleaved ``--repeats`` times, each a batch of calls; prints each way's median
microseconds per call and its ratio to ``torch.compile``'s, and what ``aot_compile`` costs on a warm cache.

    taskset -c 1 python scripts/compiled_call.py --warm-start 6

A fresh process's first call instead, on a warm compile cache (its own, in a temporary folder): through
``torch.compile`` (dynamo traces, inductor finds its graph in the cache) against loading the function that
one process precompiled and saved (``torch.compiler.load_compiled_function``), ``--warm-start`` processes
of each, alternately. Saving needs ``guard_filter_fn=keep_portable_guards_unsafe``: with the default guards,
loading fails in torch 2.13 ("TracingContext.get() must be called within an ongoing trace").
The results and what they mean for rlsweep: docs/results/sweep_cost.md ("The compiled call itself").
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

SHAPES = [(64, 4), (64,), (64, 64), (64,), (2, 64), (2,), (64, 4), (64,), (64, 64), (64,), (1, 64), (1,)]


def _loss(p: list[torch.Tensor], x: torch.Tensor, a: torch.Tensor, adv: torch.Tensor, ret: torch.Tensor,
          old_logp: torch.Tensor) -> torch.Tensor:
    h = torch.tanh(torch.tanh(x @ p[0].T + p[1]) @ p[2].T + p[3])
    logp = torch.log_softmax(h @ p[4].T + p[5], -1).gather(1, a[:, None]).squeeze(1)
    v = torch.tanh(torch.tanh(x @ p[6].T + p[7]) @ p[8].T + p[9])
    ratio = torch.exp(logp - old_logp)
    policy = -torch.min(ratio * adv, torch.clamp(ratio, 0.8, 1.2) * adv).mean()
    return policy + 0.5 * (((v @ p[10].T + p[11]).squeeze(-1) - ret) ** 2).mean()


def step(p: list[torch.Tensor], m: list[torch.Tensor], v: list[torch.Tensor], *batch: torch.Tensor) -> None:
    """One gradient step: the loss's gradients, then Adam's update of ``p`` with its moments ``m``, ``v``."""
    grads = torch.func.grad(_loss)(p, *batch)
    for param, m1, m2, g in zip(p, m, v, grads):
        m1.mul_(0.9).add_(g, alpha=0.1)
        m2.mul_(0.999).addcmul_(g, g, value=0.001)
        param.sub_(3e-4 * m1 / (m2.sqrt() + 1e-8))


def _inputs() -> tuple:
    torch.manual_seed(0)
    return ([torch.randn(s) * 0.1 for s in SHAPES], [torch.zeros(s) for s in SHAPES], [torch.zeros(s) for s in SHAPES],
            torch.randn(64, 4), torch.randint(0, 2, (64,)), torch.randn(64), torch.randn(64), torch.randn(64))


def _child(way: str, saved: str) -> None:
    """One fresh process's first call: ``compile``, ``load`` (``saved``), or ``save`` (precompile into ``saved``)."""
    inputs = _inputs()
    start = time.perf_counter()
    if way == "load":
        with open(saved, "rb") as f:
            fn = torch.compiler.load_compiled_function(f)
    else:
        portable = {"guard_filter_fn": torch.compiler.keep_portable_guards_unsafe}
        fn = torch.compile(step, fullgraph=True, options=portable if way == "save" else None)
    fn(*inputs)
    if way == "save":
        fn.aot_compile((inputs, {})).save_compiled_function(saved)
    print(f"{time.perf_counter() - start:.3f}")


def _warm_start(rounds: int) -> None:
    folder = Path(tempfile.mkdtemp(prefix="compiled_call_"))
    env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(folder / "cache")}
    saved = str(folder / "step.bin")

    def first_call(way: str) -> float:
        out = subprocess.run([sys.executable, __file__, "--child", way, saved], env=env, check=True,
                             capture_output=True, text=True).stdout
        return float(out.split()[-1])

    first_call("compile")  # fills the cache
    first_call("save")
    times: dict[str, list[float]] = {"torch.compile": [], "load_compiled_function": []}
    for _ in range(rounds):
        times["torch.compile"].append(first_call("compile"))
        times["load_compiled_function"].append(first_call("load"))
    for name, each in times.items():
        print(f"{name:24s} first call in a fresh process {statistics.median(each):.2f} s "
              f"(median; {min(each):.2f}-{max(each):.2f} over {rounds})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7, help="interleaved rounds of the four ways")
    parser.add_argument("--calls", type=int, default=2000, help="calls per way and round")
    parser.add_argument("--warm-start", type=int, default=0, metavar="N",
                        help="instead: N fresh processes each way, first call on a warm cache")
    parser.add_argument("--child", nargs=2, metavar=("WAY", "FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_num_threads(1)
    if args.child:
        return _child(*args.child)
    if args.warm_start:
        return _warm_start(args.warm_start)
    inputs = _inputs()
    compiled = torch.compile(step, fullgraph=True)
    for _ in range(50):
        compiled(*inputs)
    start = time.perf_counter()
    precompiled = compiled.aot_compile((inputs, {}))
    aot_s = time.perf_counter() - start
    precompiled.disable_guard_check()

    def skipping_guards(*a: object) -> None:
        with torch.compiler.set_stance("default", skip_guard_eval_unsafe=True):
            for _ in range(args.calls):
                compiled(*a)

    ways = {"eager": step, "torch.compile": compiled, "skip guards": None, "aot_compile, no guard check": precompiled}
    times: dict[str, list[float]] = {name: [] for name in ways}
    for _ in range(args.repeats):
        for name, fn in ways.items():
            calls = args.calls // 10 if name == "eager" else args.calls  # eager is ~7x slower
            start = time.perf_counter()
            if fn is None:
                skipping_guards(*inputs)
            else:
                for _ in range(calls):
                    fn(*inputs)
            times[name].append((time.perf_counter() - start) / calls * 1e6)
    base = statistics.median(times["torch.compile"])
    for name, each in times.items():
        print(f"{name:28s} {statistics.median(each):8.1f} us per call  ({statistics.median(each) / base:.2f}x "
              f"torch.compile's; {min(each):.1f}-{max(each):.1f} over {args.repeats} rounds)")
    print(f"aot_compile of the warm function: {aot_s:.2f} s")


if __name__ == "__main__":
    main()
