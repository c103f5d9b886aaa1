"""``twin_modules``: act with eval-mode twins sharing Parameters instead of switching modes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlsweep.toggles.base import Toggle

if TYPE_CHECKING:
    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime


class TwinModulesToggle(Toggle):
    name = "twin_modules"
    schema = bool
    values = (False, True)
    off_value = False
    on = ("twin_modules=true",)
    doc = "acting uses eval-mode twins sharing the same Parameters instead of .eval()/.train() around each call"

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        rt.twin_modules = cfg.twin_modules
