from unittest import mock

import pytest
import torch
from helpers import tiny_cfg

from rlsweep.runner import train
from rlsweep.toggles.pin_memory import PinMemoryToggle

from .contract import Observation, ToggleContract, assert_not_applicable_here


class TestPinMemory(ToggleContract):
    toggle = PinMemoryToggle
    cpu_reason = "pinned memory needs a CUDA device"

    def assert_acts(self, on: Observation, off: Observation) -> None:
        # a CPU job has no host->device copy; test_copies_are_pinned_on_cuda checks the copy path where there is one
        assert_not_applicable_here("pin_memory", on, off)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_copies_are_pinned_on_cuda(algo: str) -> None:
    calls = {True: 0, False: 0}
    pin = torch.Tensor.pin_memory
    for flag in (False, True):
        def counting(t: torch.Tensor, *args, flag=flag, **kwargs) -> torch.Tensor:
            calls[flag] += 1
            return pin(t, *args, **kwargs)

        with mock.patch.object(torch.Tensor, "pin_memory", counting):
            train(tiny_cfg(algo, "device=cuda", f"pin_memory={str(flag).lower()}"))
    assert calls[True] > 0 and calls[False] == 0
