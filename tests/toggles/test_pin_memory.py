from rlsweep.toggles.pin_memory import PinMemoryToggle

from .contract import ToggleContract


class TestPinMemory(ToggleContract):
    toggle = PinMemoryToggle
    on = ["pin_memory=true"]
    on_value = True
    cpu_reason = "pinned memory needs a CUDA device"
