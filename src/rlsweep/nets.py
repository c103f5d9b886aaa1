"""Small MLPs with the orthogonal initialisation that CleanRL and Stable-Baselines3 use."""

from __future__ import annotations

import math
from collections.abc import Sequence

from torch import nn

from rlsweep.toggles.base import Runtime


def layer_init(layer: nn.Linear, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


def mlp(
    in_dim: int,
    hidden_sizes: Sequence[int],
    out_dim: int,
    rt: Runtime,
    activation: str,
    out_gain: float = 1.0,
) -> nn.Sequential:
    """Linear -> activation -> ... -> Linear; activations follow the ``inplace`` toggle."""
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden_sizes:
        layers += [layer_init(nn.Linear(last, width)), rt.activation(activation)]
        last = width
    layers.append(layer_init(nn.Linear(last, out_dim), gain=out_gain))
    return nn.Sequential(*layers)
