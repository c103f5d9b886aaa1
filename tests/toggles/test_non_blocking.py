from unittest import mock

import pytest
import torch
from helpers import tiny_cfg

from rlsweep.runner import train
from rlsweep.toggles.non_blocking import NonBlockingToggle

from .contract import ToggleContract


class TestNonBlocking(ToggleContract):
    toggle = NonBlockingToggle
    cpu_reason = "no host-device copies without a CUDA device"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_copies_are_asynchronous_on_cuda(algo: str) -> None:
    seen = {True: set(), False: set()}
    to = torch.Tensor.to
    for flag in (False, True):
        def recording(t: torch.Tensor, *args, flag=flag, **kwargs) -> torch.Tensor:
            if t.device.type == "cpu" and any(getattr(a, "type", a) in ("cuda",) or str(a).startswith("cuda")
                                              for a in args):
                seen[flag].add(bool(kwargs.get("non_blocking", False)))
            return to(t, *args, **kwargs)

        with mock.patch.object(torch.Tensor, "to", recording):
            train(tiny_cfg(algo, "device=cuda", f"non_blocking={str(flag).lower()}"))
    assert seen[True] == {True} and seen[False] == {False}
