from rlsweep.toggles.twin_modules import TwinModulesToggle

from .contract import Observation, ToggleContract


class TestTwinModules(ToggleContract):
    toggle = TwinModulesToggle

    def assert_acts(self, on: Observation, off: Observation) -> None:
        # off: every acting call switches the networks to eval mode and back
        assert off.mode_switches > 0
        assert on.mode_switches == 0, f"{on.mode_switches} .train()/.eval() calls while acting with twins"
