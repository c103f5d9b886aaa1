from unittest import mock

import pytest
import torch
from helpers import compose_cfg, tiny_cfg

from rlsweep.runner import train
from rlsweep.toggles.pin_memory import PinMemoryToggle

from .contract import ToggleContract


class TestPinMemory(ToggleContract):
    toggle = PinMemoryToggle
    cpu_reason = "pinned memory needs a CUDA device"


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


class _Event:
    """Stands in for a CUDA event: counts record/synchronize calls in one shared log."""

    def __init__(self, log: list[str]) -> None:
        self.log = log

    def record(self) -> None:
        self.log.append("record")

    def synchronize(self) -> None:
        self.log.append("wait")


@pytest.mark.parametrize("non_blocking", [False, True])
def test_staging_reuses_two_buffers_and_waits_for_their_last_copy(non_blocking: bool) -> None:
    from rlsweep.runtime import PinnedStaging

    log: list[str] = []
    allocated: list[torch.Tensor] = []

    def allocate(shape, dtype):  # ordinary memory here: the reuse and the waiting are what is checked
        allocated.append(torch.empty(shape, dtype=dtype))
        return allocated[-1]

    staging = PinnedStaging(torch.device("cpu"), allocate=allocate, new_event=lambda: _Event(log))
    for step in range(5):
        src = torch.full((3, 2), float(step))
        out = staging.to_device(src, non_blocking)
        assert torch.equal(out, src)
        assert out.data_ptr() == allocated[step % 2].data_ptr()  # the copy came out of the reused buffer
        staging.to_device(torch.zeros(7, dtype=torch.uint8), non_blocking)  # another shape: its own buffers
    assert len(allocated) == 4  # two buffers per shape, each allocated once
    if non_blocking:
        # every buffer's copy is recorded; from the third use on, a buffer first waits for its previous copy
        assert log.count("record") == 10 and log.count("wait") == 6
        assert log[:4] == ["record"] * 4 and log[4] == "wait"
    else:
        assert log == []


def test_pin_memory_values_are_typed() -> None:
    from rlsweep.validate import validate

    assert validate(tiny_cfg("ppo", "pin_memory=staging")) == []
    for bad, shown in (("1", "1"), ("yes", "'yes'"), ("Staging", "'Staging'")):
        errors = validate(tiny_cfg("ppo", f"pin_memory={bad}"))
        assert errors == [f"pin_memory={shown} is not valid; choose one of: false, true, staging"], errors


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("algo", ["ppo", "sac"])
def test_staging_pins_once_per_shape_and_learns_the_same(algo: str) -> None:
    calls = 0
    pin = torch.Tensor.pin_memory

    def counting(t: torch.Tensor, *args, **kwargs) -> torch.Tensor:
        nonlocal calls
        calls += 1
        return pin(t, *args, **kwargs)

    with mock.patch.object(torch.Tensor, "pin_memory", counting):
        staged = train(tiny_cfg(algo, "device=cuda", "pin_memory=staging", "non_blocking=true"))
    plain = train(tiny_cfg(algo, "device=cuda"))
    assert calls == 0  # the staging buffers are allocated pinned, never pinned per copy
    curve = {k: v for k, v in staged.record()["learning"]["curve"].items() if k != "wall_s"}
    assert curve == {k: v for k, v in plain.record()["learning"]["curve"].items() if k != "wall_s"}


@pytest.mark.parametrize(("value", "pinned"), [(True, 1), (False, 0)])
def test_on_a_cuda_runtime_each_host_to_device_copy_is_pinned_first(value: bool, pinned: int, monkeypatch) -> None:
    """Without a GPU: the toggle's apply on a runtime for a CUDA device, and its copy path, with torch's
    copy calls recorded instead of made (an apply that sets nothing fails here, not only on a GPU)."""
    import numpy as np

    from rlsweep.runtime import Runtime

    rt = Runtime(torch.device("cuda"))  # constructing it touches no CUDA API
    PinMemoryToggle().apply(rt, compose_cfg([f"pin_memory={str(value).lower()}"]))
    calls: list[str] = []
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda t, *a, **k: calls.append("pin_memory") or t)
    monkeypatch.setattr(torch.Tensor, "to", lambda t, *a, **k: calls.append(f"to {a[0]}") or t)
    rt.h2d(np.zeros(3, dtype=np.float32))
    assert calls == ["pin_memory"] * pinned + ["to cuda"]
