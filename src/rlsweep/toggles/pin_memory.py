"""``pin_memory``: host->device copies go through page-locked memory first."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsweep.toggles.base import Toggle

if TYPE_CHECKING:
    import torch

    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime


class PinMemoryToggle(Toggle):
    name = "pin_memory"
    schema = bool
    values = (False, True)
    off_value = False
    on = ("pin_memory=true",)
    doc = "host->device copies go through .pin_memory() first (CUDA only)"

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if cfg.pin_memory and device.type != "cuda":
            return f"not applicable: pinned memory needs a CUDA device (device={device.type})"
        return None

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.pin_memory = cfg.pin_memory
