from rlsweep.toggles.inplace import InplaceToggle

from .contract import ToggleContract


class TestInplace(ToggleContract):
    toggle = InplaceToggle
