from rlsweep.toggles.twin_modules import TwinModulesToggle

from .contract import ToggleContract


class TestTwinModules(ToggleContract):
    toggle = TwinModulesToggle
