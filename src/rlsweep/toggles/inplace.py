"""``inplace``: in-place activations, target-network updates and advantage normalisation."""

from __future__ import annotations

from typing import Any

from rlsweep.config import TrainConfig
from rlsweep.toggles.base import Runtime, Toggle


class InplaceToggle(Toggle):
    name = "inplace"
    off_value = False

    def value(self, cfg: TrainConfig) -> Any:
        return cfg.inplace

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.inplace = cfg.inplace
