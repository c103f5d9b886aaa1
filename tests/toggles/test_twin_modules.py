from rlsweep.toggles.twin_modules import TwinModulesToggle

from .contract import ToggleContract


class TestTwinModules(ToggleContract):
    toggle = TwinModulesToggle
    on = ["twin_modules=true"]
    on_value = True
