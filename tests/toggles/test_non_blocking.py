from rlsweep.toggles.non_blocking import NonBlockingToggle

from .contract import ToggleContract


class TestNonBlocking(ToggleContract):
    toggle = NonBlockingToggle
    on = ["non_blocking=true"]
    on_value = True
    cpu_reason = "no host-device copies without a CUDA device"
