"""Small MLPs and the Nature-DQN CNN, with the orthogonal initialisation that CleanRL and
Stable-Baselines3 use."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from rlsweep.config import EnvConfig, choice_errors
from rlsweep.runtime import Activation, Runtime

INITS = ("orthogonal", "torch")
ENCODERS = ("auto", "mlp", "cnn")


def layer_init(layer: nn.Linear | nn.Conv2d, gain: float = math.sqrt(2), bias: float = 0.0) -> nn.Linear:
    nn.init.orthogonal_(layer.weight, gain)
    nn.init.constant_(layer.bias, bias)
    return layer


class OutputLinear(nn.Linear):
    """The output layer, in float32 even under autocast: bfloat16 makes a Q-value in the hundreds
    coarser than Pendulum's rewards (docs/results/bench_choices.md). Every ``mlp`` so returns float32.
    """

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_autocast_enabled(x.device.type):
            with torch.autocast(x.device.type, enabled=False):
                return F.linear(x.float(), self.weight, self.bias)
        return F.linear(x, self.weight, self.bias)


class MLP(nn.Sequential):
    """``nn.Sequential`` whose forward calls ``F.linear`` and the activation's op without ``Module.__call__``
    for the layers ``mlp`` builds (docs/results/profiling.md); the layers' own hooks do not run.

    Parameters are read from each layer's ``_parameters`` at call time, so ``functional_call``,
    ``load_state_dict``, ``.to()`` and torch.compile act as on ``nn.Sequential``.
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

    def inference_fn(self) -> Callable[[torch.Tensor], torch.Tensor] | None:
        """This network's forward on 2-D inputs as bare ``addmm`` ops on its parameters as they are now.

        Each ``weight.t()`` is made once: the same ops as ``F.linear``, so the same numbers (tested).
        In-place updates reach it (the transposes are views); make it again after parameters are
        replaced; no autograd. Stacked parameters (a :class:`~rlsweep.seeds.SeedStack`'s) use
        ``baddbmm`` on seed-major rows. None under autocast or with other layer types.
        """
        if any(torch.is_autocast_enabled(p.device.type) for p in self.parameters()):
            return None
        ops: list[Callable[[torch.Tensor], torch.Tensor]] = []
        seeds = 0
        for layer in self._modules.values():
            kind = type(layer)
            if kind is Activation:
                ops.append(layer.fn)  # type: ignore[union-attr]
            elif kind in (nn.Linear, OutputLinear) and layer._parameters["bias"] is not None:
                bias = layer._parameters["bias"].detach()  # type: ignore[union-attr]
                weight = layer._parameters["weight"].detach()  # type: ignore[union-attr]
                if weight.dim() == 3:  # stacked: (seeds, out, in)
                    seeds = weight.shape[0]
                    bias, weight_t, op = bias.unsqueeze(1), weight.transpose(1, 2), torch.baddbmm
                else:
                    weight_t, op = weight.t(), torch.addmm
                ops.append(lambda x, op=op, bias=bias, weight_t=weight_t: op(bias, x, weight_t))
            else:
                return None

        def forward(x: torch.Tensor) -> torch.Tensor:
            if seeds:
                x = x.unflatten(0, (seeds, -1))
            for op in ops:
                x = op(x)
            return x.flatten(0, 1) if seeds else x

        return forward


def mlp(in_dim: int, hidden_sizes: Sequence[int], out_dim: int, rt: Runtime, activation: str, out_gain: float = 1.0,
        init: str = "orthogonal") -> MLP:
    """Linear -> activation -> ... -> Linear; activations follow the ``inplace`` toggle.

    ``init``: "orthogonal" (gain sqrt(2) for hidden layers, ``out_gain`` for the output; what
    CleanRL's and SB3's PPO use) or "torch" (``nn.Linear``'s own initialisation, which SB3's and
    CleanRL's DQN and SAC keep).
    """
    if init not in INITS:
        raise ValueError(f"init={init!r}: choose one of {INITS}")
    keep = init == "torch"
    layers: list[nn.Module] = []
    last = in_dim
    for width in hidden_sizes:
        linear = nn.Linear(last, width)
        layers += [linear if keep else layer_init(linear), rt.activation(activation)]
        last = width
    out = OutputLinear(last, out_dim)
    layers.append(out if keep else layer_init(out, gain=out_gain))
    return MLP(*layers)


def is_image_shape(shape: Sequence[int], dtype: object) -> bool:
    """Image observations (uint8 with 3 dims: channels, height, width): what ``encoder=auto`` gives the CNN."""
    return len(shape) == 3 and np.dtype(dtype) == np.uint8  # type: ignore[arg-type]


def uses_cnn(encoder: str, obs_shape: Sequence[int], obs_dtype: object) -> bool:
    """Whether an algorithm with ``algo.encoder=encoder`` builds the CNN for these observations."""
    return encoder == "cnn" or (encoder == "auto" and is_image_shape(obs_shape, obs_dtype))


def encoder_errors(encoder: str, env_cfg: EnvConfig) -> list[str]:
    """Why ``algo.encoder=encoder`` cannot run on ``env_cfg``'s observations (one message each)."""
    if encoder not in ENCODERS:
        return choice_errors("algo.encoder", encoder, ENCODERS)
    if encoder == "cnn":
        from rlsweep.envs import observation_space

        try:
            space = observation_space(env_cfg)
        except Exception:  # noqa: BLE001 - an env that cannot be made is reported by the env checks
            return []
        if not is_image_shape(space.shape, space.dtype):
            return [f"algo.encoder=cnn needs image observations (uint8, 3 dims: channels, height, width); "
                    f"{env_cfg.id} gives {space.dtype} {space.shape}: use algo.encoder=auto or mlp"]
    return []


class NatureCNN(nn.Module):
    """The Nature-DQN encoder (Mnih et al. 2015): three convolutions, then 512 features, ReLU.

    Takes uint8 frames and scales them to [0, 1] on the device; with ``rt.settings.channels_last`` the
    convolutions run in NHWC.
    """

    def __init__(self, obs_shape: Sequence[int], rt: Runtime, features: int = 512) -> None:
        super().__init__()
        c, h, w = obs_shape
        self.channels_last = rt.settings.channels_last
        self.convs = nn.Sequential(
            layer_init(nn.Conv2d(c, 32, 8, stride=4)), rt.activation("relu"),
            layer_init(nn.Conv2d(32, 64, 4, stride=2)), rt.activation("relu"),
            layer_init(nn.Conv2d(64, 64, 3, stride=1)), rt.activation("relu"),
        )
        for conv in self.convs[::2]:  # each convolution's output size (no padding)
            h, w = (h - conv.kernel_size[0]) // conv.stride[0] + 1, (w - conv.kernel_size[1]) // conv.stride[1] + 1
        flat = 64 * h * w
        self.fc = nn.Sequential(layer_init(nn.Linear(flat, features)), rt.activation("relu"))
        self.features = features
        if self.channels_last:
            self.convs.to(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        lead = x.shape[:-3]
        x = x.reshape(-1, *x.shape[-3:])
        # uint8: div_ on the fresh float copy, no second tensor; never in place on a caller's float input
        x = x.float().div_(255.0) if x.dtype == torch.uint8 else x / 255.0
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self.fc(self.convs(x).flatten(1)).reshape(*lead, -1)


class SharedEncoder(nn.Module):
    """CleanRL's Atari actor-critic: one encoder, an actor head and a critic head on its features."""

    def __init__(self, encoder: nn.Module, actor_head: nn.Module, critic_head: nn.Module) -> None:
        super().__init__()
        self.encoder, self.actor_head, self.critic_head = encoder, actor_head, critic_head

    def forward(self, obs: torch.Tensor, head: int | None = None) -> Any:
        """(actor's output, critic's output); with ``head`` (0: actor, 1: critic), that head's only."""
        features = self.encoder(obs)
        if head is not None:
            return (self.actor_head, self.critic_head)[head](features)
        return self.actor_head(features), self.critic_head(features)


class Head(nn.Module):
    """One head of a :class:`SharedEncoder` as a network of its own; the parameters stay the joint network's."""

    def __init__(self, joint: nn.Module, head: int) -> None:
        super().__init__()
        self.joint, self.head = joint, head

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.joint(obs, self.head)


class GaussianLogStd(nn.Module):
    """A Gaussian policy's state-independent log standard deviation (a module's parameter, for the update)."""

    def __init__(self, act_dim: int, init: float) -> None:
        super().__init__()
        self.log_std = nn.Parameter(torch.full((act_dim,), init))
