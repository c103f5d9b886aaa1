from rlsweep.toggles.compile import CompileToggle

from .contract import ToggleContract


class TestCompile(ToggleContract):
    toggle = CompileToggle
    on = ["compile=default"]
    on_value = "default"
    # inductor fuses and reorders float math: equal up to rounding, not bit for bit
    rtol = 1e-4
    atol = 1e-5
