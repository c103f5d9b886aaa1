"""torch.func vs TensorDict for stacking seeds' networks (docs/results/seeds.md): one PPO-sized update.

S copies of a 64x64 tanh MLP (4 inputs, 2 outputs), minibatch 64, MSE loss: parameters stacked with
``torch.func.stack_module_state`` + ``functional_call``, or with TensorDict's ``from_modules`` +
``to_module`` (the talk's library); each vmapped over the seeds with ``grad_and_value``, eager and
compiled, one thread. Prints the median microseconds per call, interleaved repeats.

    python scripts/seeds_stacking_choice.py [--seeds 8] [--repeats 5]
"""

from __future__ import annotations

import argparse
import copy
import json
import statistics
import time

import torch
from tensordict import TensorDict
from torch import nn
from torch.func import functional_call, grad_and_value, stack_module_state, vmap


def _net() -> nn.Module:
    return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(), nn.Linear(64, 2))


def _func_step(seeds: int):  # noqa: ANN202
    nets = [_net() for _ in range(seeds)]
    params, _ = stack_module_state(nets)
    base = copy.deepcopy(nets[0]).to("meta")

    def loss(p: dict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return ((functional_call(base, p, (x,)) - y) ** 2).mean()

    step = vmap(grad_and_value(loss))
    return lambda x, y: step(params, x, y)


def _tensordict_step(seeds: int):  # noqa: ANN202
    nets = [_net() for _ in range(seeds)]
    params = TensorDict.from_modules(*nets, as_module=True)
    base = copy.deepcopy(nets[0]).to("meta")

    def loss(p: TensorDict, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        with p.to_module(base):
            return ((base(x) - y) ** 2).mean()

    step = vmap(grad_and_value(loss))
    return lambda x, y: step(params.data, x, y)


def _time(fn, x: torch.Tensor, y: torch.Tensor, calls: int = 200) -> float:  # noqa: ANN001
    for _ in range(20):
        fn(x, y)
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(x, y)
    return (time.perf_counter() - t0) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seeds", type=int, default=8)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    x, y = torch.randn(args.seeds, 64, 4), torch.randn(args.seeds, 64, 2)
    steps = {"torch.func": _func_step(args.seeds), "tensordict": _tensordict_step(args.seeds)}
    steps |= {f"{name} compiled": torch.compile(fn) for name, fn in list(steps.items())}
    for name, fn in steps.items():  # compile (and check they agree in shape) before timing
        grads, value = fn(x, y)
        assert value.shape == (args.seeds,), name
    times: dict[str, list[float]] = {name: [] for name in steps}
    for _ in range(args.repeats):
        for name, fn in steps.items():
            times[name].append(_time(fn, x, y))
    out = {name: round(statistics.median(t), 1) for name, t in times.items()}
    print(json.dumps({"seeds": args.seeds, "median_us_per_call": out, "torch": torch.__version__}, indent=1))


if __name__ == "__main__":
    main()
