"""``non_blocking``: asynchronous host<->device copies (D2H is synchronised before use)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsweep.toggles.base import Toggle

if TYPE_CHECKING:
    import torch

    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime


class NonBlockingToggle(Toggle):
    name = "non_blocking"
    schema = bool
    values = (False, True)
    off_value = False
    on = ("non_blocking=true",)
    doc = ".to(device, non_blocking=...) for host->device copies (CUDA only)"

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if cfg.non_blocking and device.type != "cuda":
            return f"not applicable: no host-device copies without a CUDA device (device={device.type})"
        return None

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.non_blocking = cfg.non_blocking
