"""``inplace``: in-place activations, target-network updates and advantage normalisation."""

from __future__ import annotations

from rlsweep.toggles.base import BoolToggle


class InplaceToggle(BoolToggle):
    """``inplace``: in-place activations, target-network updates and advantage normalisation."""

    name = "inplace"
    keeps_numbers = True
