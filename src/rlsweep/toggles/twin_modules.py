"""``twin_modules``: act with eval-mode twins sharing Parameters instead of switching modes."""

from __future__ import annotations

from rlsweep.toggles.base import BoolToggle


class TwinModulesToggle(BoolToggle):
    """``twin_modules``: acting on eval-mode twins that share the parameters, instead of switching .train()/.eval()."""

    name = "twin_modules"
    keeps_numbers = True
