from rlsweep.toggles.backend import BackendToggle

from .contract import ToggleContract


class TestBackend(ToggleContract):
    toggle = BackendToggle
    on = ["backend.num_threads=1", "backend.matmul_precision=high"]
    on_value = {"matmul_precision": "high", "cudnn_benchmark": False, "num_threads": 1}
    # TF32 acts on CUDA only, so on CPU the numbers are identical
    cpu_reason = None
