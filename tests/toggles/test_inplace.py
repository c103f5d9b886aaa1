from rlsweep.toggles.inplace import InplaceToggle

from .contract import Observation, ToggleContract


class TestInplace(ToggleContract):
    toggle = InplaceToggle
    record_ops = True

    def assert_acts(self, on: Observation, off: Observation) -> None:
        assert on.ops_named("relu_", "tanh_") > 0, "no in-place activation ran"
        assert off.ops_named("relu_", "tanh_") == 0
        assert off.ops_named("relu", "tanh") > 0
