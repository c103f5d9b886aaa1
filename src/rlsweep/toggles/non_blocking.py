"""``non_blocking``: asynchronous host<->device copies (D2H is synchronised before use)."""

from __future__ import annotations

from rlsweep.toggles.base import BoolToggle


class NonBlockingToggle(BoolToggle):
    """``non_blocking``: asynchronous host<->device copies, synchronised before a result is read."""

    name = "non_blocking"
    keeps_numbers = True
    cuda_only = "no host-device copies without a CUDA device"
