"""Small MLPs with the orthogonal initialisation that CleanRL and Stable-Baselines3 use."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from rlsweep.runtime import Activation, Runtime


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


class OutputLinear(nn.Linear):
    """The output layer, in float32 even under autocast (``dtype=bfloat16``/``float16``).

    Its outputs are values, logits and means, and in bfloat16 they keep 8 mantissa bits: a Q-value
    near -300 is then good to +-1, coarser than Pendulum's rewards, and a SAC seed that learned in
    float32 (-133) stayed at -544. The layer is a few hundred multiply-adds; the hidden layers keep
    the reduced precision, and its speed. So every ``mlp`` returns float32, with or without
    autocast: its callers need no ``.float()``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return F.linear(x.float(), self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


class MLP(nn.Sequential):
    """``nn.Sequential`` whose forward runs its layers' torch ops itself.

    For the layers ``mlp`` builds it calls ``F.linear`` on the layer's current parameters and the
    activation's torch op, without ``Module.__call__`` or the layers' Python ``forward``: at
    acting batch sizes every Python call is a real share of the forward (docs/results/profiling.md).

    Parameters are read from each layer's ``_parameters`` at call time, so
    ``torch.func.functional_call``, ``load_state_dict`` and ``.to()`` act as on ``nn.Sequential``;
    other layer types run their own ``forward``. The layers' own hooks do not run; the network's
    hooks, parameters, state_dict keys and torch.compile tracing are those of ``nn.Sequential``.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self._modules.values():
            kind = type(layer)
            if kind is Activation:
                x = layer.fn(x)
            elif kind is nn.Linear or (kind is OutputLinear and not torch.is_autocast_enabled(x.device.type)):
                p = layer._parameters
                x = F.linear(x, p["weight"], p["bias"])
            else:
                x = layer.forward(x)  # type: ignore[union-attr]
        return x


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int,
    rt: Runtime,
    activation: str,
    out_gain: float = 1.0,
) -> MLP:
    """Linear -> activation -> ... -> Linear; activations follow the ``inplace`` toggle."""
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden_sizes:
        layers += [layer_init(nn.Linear(last, width)), rt.activation(activation)]
        last = width
    layers.append(layer_init(OutputLinear(last, out_dim), gain=out_gain))
    return MLP(*layers)
