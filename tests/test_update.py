"""rlsweep.update: the single-graph step (torch.func gradients + torch's optimizer formulas on the
optimizer's own state) gives torch.optim's numbers, for each optimizer it knows, with clipping, a
learning-rate schedule and two optimizers in one step. Run here without compiling (the same code
dynamo traces); the compiled path is checked on every algorithm by the contract's compile toggle."""

from __future__ import annotations

from collections.abc import Callable

import pytest
import torch
from torch import nn

from rlsweep.runtime import Runtime
from rlsweep.update import Update, single_graph_refusal

OPTIMIZERS: dict[str, Callable[..., torch.optim.Optimizer]] = {
    "adam": lambda p: torch.optim.Adam(p, lr=1e-2),
    "adam_weight_decay": lambda p: torch.optim.Adam(p, lr=1e-2, weight_decay=0.1, eps=1e-5),
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-2, weight_decay=0.1, betas=(0.8, 0.9)),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-2),
    "rmsprop_momentum_centered": lambda p: torch.optim.RMSprop(p, lr=1e-2, momentum=0.9, centered=True,
                                                               weight_decay=0.01),
    "sgd": lambda p: torch.optim.SGD(p, lr=1e-2),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9),
    "sgd_nesterov": lambda p: torch.optim.SGD(p, lr=1e-2, momentum=0.9, nesterov=True, weight_decay=0.01),
}


def _train(make_opt: Callable[..., torch.optim.Optimizer], single_graph: bool, clip: float | None = None,
           steps: int = 20) -> tuple[dict[str, torch.Tensor], list[dict], torch.Tensor | None]:
    """Two optimizers in one step (a body + head with the named one, a second head with Adam), a schedule,
    and a hyper-parameter changed halfway (the single-graph step holds them as constants: it must see it)."""
    torch.manual_seed(0)
    body = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 3))
    head, other = nn.Linear(3, 1), nn.Linear(3, 1)
    opt = make_opt([*body.parameters(), *head.parameters()])
    opt_other = torch.optim.Adam(other.parameters(), lr=1e-3)
    schedule = torch.optim.lr_scheduler.StepLR(opt, step_size=5, gamma=0.5)
    rt = Runtime(torch.device("cpu"))

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        a = rt.minimize(lambda: (head(body(x)).squeeze(-1) - y).pow(2).mean(), opt, max_grad_norm=clip)
        b = rt.minimize(lambda: (other(body(x).detach()).squeeze(-1) + y).abs().mean(), opt_other)
        return torch.stack([a, b])

    update = Update(rt, step, {"body": body, "head": head, "other": other}, [opt, opt_other])
    update.single_graph = single_graph  # the step compile=default takes, here uncompiled
    g = torch.Generator().manual_seed(1)
    losses = []
    for i in range(steps):
        if i == steps // 2:
            opt.param_groups[0]["weight_decay"] = opt.param_groups[0]["weight_decay"] + 0.05
        losses.append(update(torch.randn(16, 4, generator=g), torch.randn(16, generator=g)))
        schedule.step()
    params = {f"{k}.{n}": p.detach().clone() for k, m in (("body", body), ("head", head), ("other", other))
              for n, p in m.named_parameters()}
    return params, [opt.state_dict()["state"], opt_other.state_dict()["state"]], torch.stack(losses) if losses else None


@pytest.mark.parametrize("clip", [None, 0.5])
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_the_single_graph_step_gives_torch_optims_numbers(name: str, clip: float | None) -> None:
    assert single_graph_refusal(OPTIMIZERS[name]([nn.Parameter(torch.zeros(1))])) is None
    eager, functional = _train(OPTIMIZERS[name], False, clip), _train(OPTIMIZERS[name], True, clip)
    torch.testing.assert_close(functional[2], eager[2], rtol=1e-5, atol=1e-6)
    moved = {k: (eager[0][k] - v).abs().max() for k, v in _train(OPTIMIZERS[name], False, clip, steps=0)[0].items()}
    assert all(d > 0 for d in moved.values()), moved  # every parameter trained: the comparison means something
    for k in eager[0]:
        torch.testing.assert_close(functional[0][k], eager[0][k], rtol=1e-5, atol=1e-6, msg=lambda m, k=k: f"{k}: {m}")
    # the optimizers' own state, as a checkpoint or a later eager run reads it (plain SGD keeps None
    # momentum buffers, which the single-graph step has no use for); float error accumulates in it
    for state_e, state_f in zip(eager[1], functional[1], strict=True):
        tensors_e, tensors_f = ({i: t for i, t in ((i, {k: v for k, v in s.items() if v is not None})
                                                    for i, s in state.items()) if t}
                                for state in (state_e, state_f))
        assert tensors_e.keys() == tensors_f.keys()
        for i, entries in tensors_e.items():
            assert entries.keys() == tensors_f[i].keys()
            for key, value in entries.items():
                torch.testing.assert_close(torch.as_tensor(tensors_f[i][key]).float(), torch.as_tensor(value).float(),
                                           rtol=1e-4, atol=1e-5, msg=lambda m, key=key: f"{key}: {m}")


def test_options_it_does_not_write_keep_the_eager_step_and_say_why() -> None:
    p = [nn.Parameter(torch.zeros(2))]
    assert "Adagrad" in single_graph_refusal(torch.optim.Adagrad(p))
    assert "amsgrad" in single_graph_refusal(torch.optim.Adam(p, amsgrad=True))
    assert "maximize" in single_graph_refusal(torch.optim.SGD(p, lr=0.1, maximize=True))
    assert "dampening" in single_graph_refusal(torch.optim.SGD(p, lr=0.1, momentum=0.9, dampening=0.1))


def test_an_optimized_tensor_outside_the_modules_is_refused_with_its_shape() -> None:
    net, loose = nn.Linear(2, 2), nn.Parameter(torch.zeros(3))
    opt = torch.optim.Adam([*net.parameters(), loose])
    with pytest.raises(TypeError, match=r"shapes \[\(3,\)\] that are not parameters"):
        Update(Runtime(torch.device("cpu")), lambda: None, {"net": net}, [opt])
