"""One-graph gradient steps for the compiled updates of every algorithm.

``loss.backward()`` and ``optimizer.step()`` split a compiled update into separate graphs (forward,
backward, optimizer), and for small RL networks each graph's call overhead is a real share of the
step. Written functionally — gradients from ``torch.func.grad_and_value``, the global-norm clip and
Adam as plain tensor operations on the optimizer's own state tensors — the whole step traces into
ONE graph that inductor fuses (Adam's per-parameter loops become a few fused kernels).

The formulas are torch's own (``clip_grad_norm_``; ``torch.optim.Adam``'s tensor-step form) and the
state lives in ``optimizer.state`` exactly where torch.optim.Adam keeps it, so a checkpoint, a
resume, or a later eager run see an ordinary Adam state. Only used when ``compile`` is on: the
eager path keeps autograd + torch.optim.Adam, the baseline every toggle is compared with.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class AdamState:
    """The tensors ``torch.optim.Adam`` keeps per parameter, as parallel lists (compiled-call inputs)."""

    steps: list[torch.Tensor]
    exp_avgs: list[torch.Tensor]
    exp_avg_sqs: list[torch.Tensor]

    def as_args(self) -> tuple[list[torch.Tensor], list[torch.Tensor], list[torch.Tensor]]:
        return self.steps, self.exp_avgs, self.exp_avg_sqs


def adam_state(optimizer: torch.optim.Adam, params: Sequence[torch.Tensor]) -> AdamState:
    """``optimizer``'s state for ``params``, created as torch.optim.Adam creates it on its first step.

    A capturable optimizer (``Runtime.adam`` on CUDA) keeps the step counters on the parameters'
    device; its state tensors are marked as static addresses, as torch.optim does when compiled,
    so a CUDA graph updates them in place instead of skipping the graph for mutated inputs.
    """
    state = optimizer.state
    capturable = optimizer.param_groups[0].get("capturable", False)
    for p in params:
        if not state[p]:
            state[p]["step"] = (torch.zeros((), dtype=torch.float32, device=p.device) if capturable
                                else torch.tensor(0.0, dtype=torch.get_default_dtype()))
            state[p]["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state[p]["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        if capturable:
            for t in state[p].values():
                torch._dynamo.mark_static_address(t)
    return AdamState([state[p]["step"] for p in params], [state[p]["exp_avg"] for p in params],
                     [state[p]["exp_avg_sq"] for p in params])


def clip_grad_norm(grads: Sequence[torch.Tensor], max_norm: float) -> list[torch.Tensor]:
    """``grads`` scaled as ``nn.utils.clip_grad_norm_`` scales them (global L2 norm, same epsilon)."""
    norms = torch.stack([torch.linalg.vector_norm(g) for g in grads])
    clip = torch.clamp(max_norm / (torch.linalg.vector_norm(norms) + 1e-6), max=1.0)
    return [g * clip for g in grads]


@torch.no_grad()
def adam_step_(params: Sequence[torch.Tensor], grads: Sequence[torch.Tensor], state: AdamState,
               optimizer: torch.optim.Adam, lr: float | torch.Tensor | None = None) -> None:
    """One Adam step of ``params`` in place, with ``optimizer``'s hyper-parameters and ``state``.

    ``lr`` overrides the group's learning rate (a tensor: annealing changes a value, not the graph).
    """
    group = optimizer.param_groups[0]
    beta1, beta2 = group["betas"]
    eps = group["eps"]
    lr = group["lr"] if lr is None else lr
    # every parameter of the group is at the same step: its bias corrections are two scalars
    step = state.steps[0] + 1
    step_size_neg, bias2_sqrt = _once(torch.stack([-(lr / (1 - beta1**step)), (1 - beta2**step).sqrt()]))
    for p, g, s, m, v in zip(params, grads, state.steps, state.exp_avgs, state.exp_avg_sqs, strict=True):
        s += 1
        m.lerp_(g, 1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        p.addcdiv_(m, (v.sqrt() / (bias2_sqrt * step_size_neg)).add_(eps / step_size_neg))


def _once(scalars: torch.Tensor) -> torch.Tensor:
    """``scalars``, computed once per call instead of once per vector of every parameter.

    Inductor inlines scalar pointwise math into each kernel that reads it, so Adam's two ``pow``
    would be evaluated for every 8 floats of every parameter, and they would be most of the Adam
    step's cost (docs/results/profiling.md). A reduction is always its own buffer.
    """
    return scalars.unsqueeze(-1).amax(-1)


def functional_forward(module: nn.Module, names: Sequence[str]) -> Callable[..., torch.Tensor]:
    """``f(params, *inputs)``: ``module``'s forward with ``params`` (in ``names`` order) in place of its own."""

    def call(params: Sequence[torch.Tensor], *inputs: torch.Tensor) -> torch.Tensor:
        return torch.func.functional_call(module, dict(zip(names, params, strict=True)), inputs)

    return call
