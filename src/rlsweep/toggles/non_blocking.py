"""``non_blocking``: asynchronous host<->device copies (D2H is synchronised before use)."""

from __future__ import annotations

from typing import Any

import torch

from rlsweep.config import TrainConfig
from rlsweep.toggles.base import Runtime, Toggle


class NonBlockingToggle(Toggle):
    name = "non_blocking"
    off_value = False

    def value(self, cfg: TrainConfig) -> Any:
        return cfg.non_blocking

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if cfg.non_blocking and device.type != "cuda":
            return f"not applicable: no host-device copies without a CUDA device (device={device.type})"
        return None

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.non_blocking = cfg.non_blocking
