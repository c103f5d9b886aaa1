"""``pin_memory``: host->device copies go through page-locked memory first.

``true`` pins every copy's source (``.pin_memory()``: a fresh page-locked allocation and a host copy
per transfer, which can cost more than the pageable copy it replaces); ``staging`` copies into
page-locked buffers allocated once per shape and reused every step, the usual remedy. Both are
measured beside ``false`` so the claim and its remedy are compared on the user's hardware.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rlsweep.toggles.base import FlagToggle, text

if TYPE_CHECKING:
    from rlsweep.config import TrainConfig

STAGING = "staging"


class PinMemoryToggle(FlagToggle):
    name = "pin_memory"
    # a bool or the word "staging": OmegaConf 2.3 has no Union, so Any, and validate() checks the type
    schema = Any
    values = (False, True, STAGING)
    off_value = False
    on = ("pin_memory=true",)
    cuda_only = "pinned memory needs a CUDA device"

    def validate(self, cfg: TrainConfig) -> list[str]:
        value = self.value(cfg)
        # `1 in (False, True)` holds in Python: compare types too, so pin_memory=1 is refused, not taken as true
        if not any(type(value) is type(v) and value == v for v in self.values):
            return [f"{self.key}={text(value)} is not valid; choose one of: {', '.join(map(text, self.values))}"]
        return []
