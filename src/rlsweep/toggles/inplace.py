"""``inplace``: in-place activations, target-network updates and advantage normalisation."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsweep.toggles.base import Toggle

if TYPE_CHECKING:
    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime


class InplaceToggle(Toggle):
    name = "inplace"
    schema = bool
    values = (False, True)
    off_value = False
    on = ("inplace=true",)
    doc = "in-place activations, target-network updates and advantage normalisation"

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.inplace = cfg.inplace
