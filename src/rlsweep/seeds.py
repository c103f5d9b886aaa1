"""Several seeds trained in one process: their networks stacked, their calls vectorised.

A job with ``seeds_per_job > 1`` trains S seeds of one cell together (the issue's remedy for small
networks: one vectorised call over S parameter sets instead of S calls, and one process's start-up
and compile instead of S). Each network of the algorithm is built once per seed, from that seed's
random stream, and held as a :class:`SeedStack`: the S copies' parameters stacked along a new
leading dimension, so ``torch.optim`` optimizes them as ordinary tensors (Adam, RMSprop and SGD
act elementwise: one optimizer over the stacks takes the very steps S optimizers would take).

A stacked network's forward takes the S seeds' rows one after another along its input's first
dimension (seed-major: seed 0's rows, then seed 1's, ...) and runs the one network on each seed's
rows with that seed's parameters, through ``torch.func.vmap``. Inside a gradient step
(:class:`rlsweep.update.Update` vmaps the whole step over the seeds) it is one seed's network.

``torch.func`` rather than TensorDict's ``from_modules``/``to_module``: both end in
``functional_call`` under ``vmap``; torch.func is already what the runtime-owned update is written
in, and the measurement is in docs/results/seeds.md.
"""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch import nn

#: > 0 while a vectorised gradient step runs: a SeedStack then holds one seed's parameters
_IN_SEED_STEP = [0]
#: the seed a SeedStack's forward is restricted to (evaluation of one seed); None: all of them
_ONLY_SEED: list[int | None] = [None]


@contextlib.contextmanager
def per_seed_step() -> Iterator[None]:
    """Inside it, stacked networks are one seed's (the vectorised gradient step is per seed)."""
    _IN_SEED_STEP[0] += 1
    try:
        yield
    finally:
        _IN_SEED_STEP[0] -= 1


@contextlib.contextmanager
def only_seed(index: int) -> Iterator[None]:
    """Inside it, a stacked network's forward is seed ``index``'s alone, on inputs without seed rows
    (the deterministic evaluation of one seed runs the algorithm's ordinary acting code)."""
    before = _ONLY_SEED[0]
    _ONLY_SEED[0] = index
    try:
        yield
    finally:
        _ONLY_SEED[0] = before


class SeedStack(nn.Module):
    """S copies of one network, their parameters and buffers stacked along a leading seed dimension.

    ``self.stack`` is the first copy with each parameter replaced by the stack of all copies' (same
    names, a leading dimension of size S). Its own parameters and buffers (``log_std``) are read
    through the stack too, so algorithm code reads a stacked network's tensors as it reads the
    network's; they have the seeds first.
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
            if name in stack._parameters or name in stack._buffers:
                return getattr(stack, name)
            raise

    def forward(self, x: torch.Tensor, *rest: Any) -> Any:
        if _IN_SEED_STEP[0]:
            return self.stack(x, *rest)
        state = {**dict(self.stack.named_parameters()), **dict(self.stack.named_buffers())}
        if _ONLY_SEED[0] is not None:
            k = _ONLY_SEED[0]
            return torch.func.functional_call(self.stack, {n: t[k] for n, t in state.items()}, (x, *rest))

        def one(own: dict[str, torch.Tensor], rows: torch.Tensor) -> Any:
            return torch.func.functional_call(self.stack, own, (rows, *rest))

        out = torch.func.vmap(one)(state, x.unflatten(0, (self.seeds, -1)))
        return torch.utils._pytree.tree_map(lambda t: t.flatten(0, 1), out)

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
