"""``twin_modules``: act with eval-mode twins sharing Parameters instead of switching modes."""

from __future__ import annotations

from typing import Any

from rlsweep.config import TrainConfig
from rlsweep.toggles.base import Runtime, Toggle


class TwinModulesToggle(Toggle):
    name = "twin_modules"
    off_value = False

    def value(self, cfg: TrainConfig) -> Any:
        return cfg.twin_modules

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.twin_modules = cfg.twin_modules
