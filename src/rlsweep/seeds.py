"""Several seeds trained in one process: their networks stacked, their calls vectorised.

A job with ``seeds_per_job > 1`` trains S seeds of one cell together: one vectorised call over S
parameter sets instead of S calls, one start-up and compile instead of S. Each network is built once
per seed and held as a :class:`SeedStack` of the copies' parameters stacked along a leading
dimension: Adam, RMSprop and SGD act elementwise, so one optimizer over the stacks takes the steps
S optimizers would. A stacked network's forward takes the seeds' rows seed-major and runs each
seed's rows with its parameters through ``torch.func.vmap``; where the runtime runs code once per
seed (the update's step, ``rt.policy``'s forward, :func:`run_as_seed`) it is that seed's network.
Why torch.func rather than TensorDict: docs/results/seeds.md.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
from torch import nn

#: > 0 while code runs once per seed: a SeedStack then holds one seed's parameters
_IN_SEED_STEP = [0]


@contextlib.contextmanager
def per_seed_step() -> Iterator[None]:
    """Inside it, stacked networks are one seed's: whoever enters it has swapped each seed's parameters in."""
    _IN_SEED_STEP[0] += 1
    try:
        yield
    finally:
        _IN_SEED_STEP[0] -= 1


class Root(nn.Module):
    """Modules under one root: ``functional_call`` on it swaps their parameters for a call of ``fn``."""

    def __init__(self, modules: Mapping[str, nn.Module]) -> None:
        super().__init__()
        self.held = nn.ModuleDict(modules)

    def forward(self, fn: Callable[[], Any]) -> Any:
        return fn()


def _stacked(root: nn.Module) -> dict[str, torch.Tensor]:
    """The parameters and buffers of every :class:`SeedStack` under ``root``, by name (seeds first)."""
    prefixes = tuple(f"{name}.stack." for name, m in root.named_modules() if isinstance(m, SeedStack))
    return {n: t for n, t in (*root.named_parameters(), *root.named_buffers()) if n.startswith(prefixes)}


def run_as_seed(modules: Mapping[str, nn.Module], index: int, fn: Callable[[], Any]) -> Any:
    """``fn()`` with every stacked network among ``modules`` seed ``index``'s own: the algorithm's
    ordinary code (its deterministic acting, say) runs for that seed alone."""
    root = Root(modules)
    own = {n: t.detach()[index] for n, t in _stacked(root).items()}
    with per_seed_step():
        return torch.func.functional_call(root, own, (fn,), tie_weights=False)


def vmap_over_seeds(fn: Callable[..., Any], modules: Sequence[nn.Module], seeds: int) -> Callable[..., Any]:
    """``fn(*modules, *args)`` run once per seed, vectorised: each seed's call sees its own networks
    (methods and buffers included) and its own rows of every tensor argument and result, whose rows
    are the seeds' one seed after another. ``rt.policy``'s forward for several seeds."""
    root = Root({str(i): m for i, m in enumerate(modules)})

    def one(own: dict[str, torch.Tensor], *rows: Any) -> Any:
        with per_seed_step():
            return torch.func.functional_call(root, own, (lambda: fn(*modules, *rows),), tie_weights=False)

    def call(*modules_and_args: Any) -> Any:
        state = {n: t.detach() for n, t in _stacked(root).items()}
        return _vmap_rows(one, state, modules_and_args[len(modules):], seeds)

    return call


def _vmap_rows(one: Callable[..., Any], state: dict[str, torch.Tensor], args: Sequence[Any], seeds: int) -> Any:
    """``one(own_state, *own_rows)`` vmapped over the seeds: each tensor argument and result holds seed-major rows."""
    split = [a.unflatten(0, (seeds, -1)) if isinstance(a, torch.Tensor) else a for a in args]
    dims = [0 if isinstance(a, torch.Tensor) else None for a in args]
    out = torch.func.vmap(one, in_dims=(0, *dims))(state, *split)
    return torch.utils._pytree.tree_map(lambda t: t.flatten(0, 1), out)


class SeedStack(nn.Module):
    """S copies of one network, their parameters and buffers stacked along a leading seed dimension.

    ``self.stack`` is the first copy holding the stacks under the same names. Its parameters and
    buffers are read through this module too (seeds first); its other attributes and methods only
    where it is one seed's network (see the module doc).
    """

    def __init__(self, copies: Sequence[nn.Module]) -> None:
        super().__init__()
        self.seeds = len(copies)
        stack = copy.deepcopy(copies[0])
        for name, _ in copies[0].named_parameters():
            stacked = torch.stack([c.get_parameter(name).detach() for c in copies])
            _set(stack, name, nn.Parameter(stacked, requires_grad=copies[0].get_parameter(name).requires_grad))
        for name, _ in copies[0].named_buffers():
            _set(stack, name, torch.stack([c.get_buffer(name) for c in copies]), buffer=True)
        self.stack = stack

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            stack = self._modules["stack"]
            if name in stack._parameters or name in stack._buffers or _IN_SEED_STEP[0]:
                return getattr(stack, name)
            if hasattr(stack, name):
                raise AttributeError(
                    f"{type(stack).__name__}.{name} of a network trained for {self.seeds} seeds together "
                    "(seeds_per_job): use it inside rt.policy's forward or rt.update's step, where each seed's "
                    "network is its own; a direct call takes the forward only") from None
            raise

    def forward(self, *args: Any) -> Any:
        """The network on every seed's rows: each tensor argument holds the seeds' rows one seed after
        another (seed-major), and so does each tensor it returns."""
        if _IN_SEED_STEP[0]:
            return self.stack(*args)
        state = {**dict(self.stack.named_parameters()), **dict(self.stack.named_buffers())}

        def one(own: dict[str, torch.Tensor], *rows: Any) -> Any:
            return torch.func.functional_call(self.stack, own, rows)

        return _vmap_rows(one, state, args, self.seeds)

    def inference_fn(self) -> Any:
        """The stacked network's bare acting forward where it has one (:meth:`rlsweep.nets.MLP.inference_fn`):
        one batched matrix product per layer for every seed, instead of a vmap per call."""
        inner = getattr(self.stack, "inference_fn", None)
        return inner() if inner is not None else None

    def seed_module(self, index: int) -> nn.Module:
        """Seed ``index``'s network as a module of its own (a copy: for inspection and tests)."""
        one = copy.deepcopy(self.stack)
        for name, p in self.stack.named_parameters():
            _set(one, name, nn.Parameter(p.detach()[index].clone()))
        for name, b in self.stack.named_buffers():
            _set(one, name, b[index].clone(), buffer=True)
        return one


def _set(root: nn.Module, name: str, value: torch.Tensor, buffer: bool = False) -> None:
    owner_name, _, leaf = name.rpartition(".")
    owner = root.get_submodule(owner_name) if owner_name else root
    if buffer:
        owner.register_buffer(leaf, value)
    else:
        setattr(owner, leaf, value)


def stack_builds(builds: Sequence[Any]) -> Any:
    """The per-seed results of one build function, stacked: a module becomes a :class:`SeedStack`,
    a tuple, list or dict is stacked item by item; anything else must be the same in every build."""
    first = builds[0]
    if isinstance(first, nn.Module):
        return SeedStack(builds)
    if isinstance(first, dict):
        return {k: stack_builds([b[k] for b in builds]) for k in first}
    if isinstance(first, (tuple, list)):
        return type(first)(stack_builds(list(items)) for items in zip(*builds, strict=True))
    return first
