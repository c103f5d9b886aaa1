"""``pin_memory``: host->device copies go through page-locked memory first."""

from __future__ import annotations

from typing import Any

import torch

from rlsweep.config import TrainConfig
from rlsweep.toggles.base import Runtime, Toggle


class PinMemoryToggle(Toggle):
    name = "pin_memory"
    off_value = False

    def value(self, cfg: TrainConfig) -> Any:
        return cfg.pin_memory

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if cfg.pin_memory and device.type != "cuda":
            return f"not applicable: pinned memory needs a CUDA device (device={device.type})"
        return None

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.pin_memory = cfg.pin_memory
