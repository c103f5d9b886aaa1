"""``twin_modules``: act with eval-mode twins sharing Parameters instead of switching modes."""

from __future__ import annotations

from rlsweep.toggles.base import BoolToggle


class TwinModulesToggle(BoolToggle):
    name = "twin_modules"
    keeps_numbers = True
