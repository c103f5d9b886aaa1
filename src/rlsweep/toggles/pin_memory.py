"""``pin_memory``: host->device copies go through page-locked memory first.

``true`` pins every copy's source (``.pin_memory()``: a fresh page-locked allocation and a host copy
per transfer, which can cost more than the pageable copy it replaces); ``staging`` copies into
page-locked buffers allocated once per shape and reused every step, the usual remedy. Both are
measured beside ``false`` so the claim and its remedy are compared on the user's hardware.
"""

from __future__ import annotations

from typing import Any

from rlsweep.toggles.base import FlagToggle

STAGING = "staging"


class PinMemoryToggle(FlagToggle):
    """``pin_memory``: host->device copies from page-locked memory (per copy, or reused staging buffers)."""

    name = "pin_memory"
    keeps_numbers = True
    # a bool or the word "staging": OmegaConf 2.3 has no Union, so Any, and Toggle.validate() checks the type
    schema = Any
    values = (False, True, STAGING)
    off_value = False
    on = ("pin_memory=true",)
    cuda_only = "pinned memory needs a CUDA device"
