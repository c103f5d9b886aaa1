import os
import sys
from unittest import mock

import pytest
import torch
from helpers import compose_cfg, tiny_cfg

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
            # nn.Module.to places a new network's parameters once, at setup: not a copy of the data
            if sys._getframe(1).f_code.co_filename.endswith(os.path.join("nn", "modules", "module.py")):
                return to(t, *args, **kwargs)
            if t.device.type == "cpu" and any(getattr(a, "type", a) in ("cuda",) or str(a).startswith("cuda")
                                              for a in args):
                seen[flag].add(bool(kwargs.get("non_blocking", False)))
            return to(t, *args, **kwargs)

        with mock.patch.object(torch.Tensor, "to", recording):
            train(tiny_cfg(algo, "device=cuda", f"non_blocking={str(flag).lower()}"))
    assert seen[True] == {True} and seen[False] == {False}


@pytest.mark.parametrize("value", [True, False])
def test_on_a_cuda_runtime_each_host_to_device_copy_is_asynchronous(value: bool, monkeypatch) -> None:
    """Without a GPU: the toggle's apply on a runtime for a CUDA device, and its copy path, with the copy
    recorded instead of made (an apply that sets nothing fails here, not only on a GPU)."""
    import numpy as np

    from rlsweep.runtime import Runtime

    rt = Runtime(torch.device("cuda"))  # constructing it touches no CUDA API
    NonBlockingToggle().apply(rt, compose_cfg([f"non_blocking={str(value).lower()}"]))
    calls: list[tuple] = []
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *a, **k: calls.append((str(a[0]), k.get("non_blocking"))) or t)
    rt.h2d(np.zeros(3, dtype=np.float32))
    assert calls == [("cuda", value)]
