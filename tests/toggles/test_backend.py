from rlsweep.toggles.backend import BackendToggle

from .contract import ToggleContract


class TestBackend(ToggleContract):
    toggle = BackendToggle
    # TF32 acts on CUDA only, so on CPU the numbers are identical
    cpu_reason = None
