from rlsweep.toggles.backend import BackendToggle

from .contract import Observation, ToggleContract


class TestBackend(ToggleContract):
    toggle = BackendToggle
    # TF32 acts on CUDA only, so on CPU the numbers are identical
    cpu_reason = None

    def assert_acts(self, on: Observation, off: Observation) -> None:
        # the global settings are in effect while the job trains, and restored after it
        assert on.during["matmul_precision"] == "high" and on.during["num_threads"] == 1
        assert off.during["matmul_precision"] == "highest"
        assert on.after == on.before
