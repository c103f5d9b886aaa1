"""What each toggle visibly does to a job: the evidence the toggle contracts check, on any algorithm.

:class:`~rlsweep.testing.AlgorithmContract` trains a plugin's tiny job with each toggle on and all
off, observed (:func:`observe`), and asks the toggle's :class:`Effect` whether the toggle acted
and whether the numbers still match. rlsweep's own suite checks the same effects on its built-ins.
A toggle without an entry in :data:`EFFECTS` fails rlsweep's registry test.
"""

from __future__ import annotations

import collections
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field
from typing import Any
from unittest import mock

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from rlsweep.runner import train
from rlsweep.update import Update


def global_state() -> dict[str, Any]:
    """Process-global settings a job may touch and must leave as it found them."""
    handler = torch._dynamo.callback_handler
    return {
        "num_threads": torch.get_num_threads(),
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_benchmark": torch.backends.cudnn.benchmark,
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": torch.get_default_dtype(),
        "dynamo_callbacks": (len(handler.start_callbacks), len(handler.end_callbacks)),
    }


class _OpRecorder(TorchDispatchMode):
    """Counts every aten op an eager job runs, by (op name, dtype of its first tensor output), those of
    its gradient steps apart, and the memory format of every 4-d input a convolution (forward or backward) reads."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter[tuple[str, str]] = collections.Counter()
        self.update_ops: collections.Counter[tuple[str, str]] = collections.Counter()
        self.in_update = False
        self.conv_layouts: collections.Counter[str] = collections.Counter()

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if func.__name__.startswith("convolution") and args and isinstance(args[0], torch.Tensor) and args[0].dim() == 4:
            x = args[0]
            nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
            self.conv_layouts["channels_last" if nhwc else "contiguous"] += 1
        out = func(*args, **(kwargs or {}))
        first = out[0] if isinstance(out, (tuple, list)) and out else out
        dtype = str(first.dtype).removeprefix("torch.") if isinstance(first, torch.Tensor) else ""
        self.ops[func.__name__, dtype] += 1  # e.g. ("relu_.default", "float32")
        if self.in_update:
            self.update_ops[func.__name__, dtype] += 1
        return out

    def stepping(self, call: Callable[..., Any]) -> Callable[..., Any]:
        """``Update.__call__``, with the ops it runs counted as the gradient step's too."""
        def step(update: Any, *args: Any) -> Any:
            self.in_update = True
            try:
                return call(update, *args)
            finally:
                self.in_update = False
        return step


@dataclass
class Observation:
    """What a job visibly did while it trained: the evidence a toggle's effect is checked against."""

    outcome: Any  # rlsweep.runner.TrainOutcome
    #: aten ops by (name, output dtype); empty unless recorded (eager jobs only)
    ops: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    #: those of them that ran inside the gradient steps (``rt.update``'s calls)
    update_ops: collections.Counter[tuple[str, str]] = field(default_factory=collections.Counter)
    #: memory formats of the 4-d inputs convolutions read ("channels_last", "contiguous"); recorded with ops
    conv_layouts: collections.Counter[str] = field(default_factory=collections.Counter)
    #: nn.Module.train()/.eval() calls after the first iteration
    mode_switches: int = 0
    #: process-global settings seen before the job, inside its training loop, and after it
    before: dict[str, Any] = field(default_factory=dict)
    during: dict[str, Any] = field(default_factory=dict)
    after: dict[str, Any] = field(default_factory=dict)

    def ops_named(self, *names: str, dtype: str | None = None, in_update: bool = False) -> int:
        """How many ops of these names (and output ``dtype``) ran; ``in_update``: inside the gradient steps."""
        return sum(n for (op, dt), n in (self.update_ops if in_update else self.ops).items()
                   if op.split(".")[0] in names and (dtype is None or dt == dtype))


def observe(cfg: Any, record_ops: bool = False) -> Observation:
    """Train ``cfg`` with every instrument on (none of them changes a number)."""
    switches = {"counting": False, "n": 0}
    during: dict[str, Any] = {}
    train_method = torch.nn.Module.train

    def counting_train(module: torch.nn.Module, mode: bool = True) -> torch.nn.Module:
        if switches["counting"] and module._modules is not None:
            switches["n"] += 1
        return train_method(module, mode)

    def hook(row: dict[str, Any], env_steps: int) -> None:
        switches["counting"] = True
        during.update(global_state())

    before = global_state()
    recorder = _OpRecorder()
    with (mock.patch.object(torch.nn.Module, "train", counting_train),
          mock.patch.object(Update, "__call__", recorder.stepping(Update.__call__)),
          recorder if record_ops else nullcontext()):
        outcome = train(cfg, on_iteration=hook)
    return Observation(outcome, recorder.ops, recorder.update_ops, recorder.conv_layouts, switches["n"], before,
                       during, global_state())


@dataclass(frozen=True)
class Effect:
    """A toggle's observable effect, and how close its job's numbers stay to the all-off job's."""

    #: ``check(on, off)`` fails unless ``on`` (the toggle on) shows the effect and ``off`` (all off) does not
    check: Callable[[Observation, Observation], None]
    #: record every aten op of both jobs (eager effects; slows a job ~2x)
    record_ops: bool = False
    #: parameters after the same updates vs all off: allclose(rtol, atol); 0 = bit-exact
    rtol: float = 0.0
    atol: float = 0.0
    #: > 0: instead, |p - p_off| <= drift * |p_off - p_init| over all parameters (reduced precision,
    #: where single elements may round, and greedy actions flip, the other way)
    drift: float = 0.0

    def assert_keeps_the_numbers(self, p_on: dict[str, torch.Tensor], p_off: dict[str, torch.Tensor],
                                 initial: Callable[[], dict[str, torch.Tensor]]) -> None:
        """Parameters with the toggle on vs all off, within this effect's tolerance (``initial()``: before training)."""
        if self.drift > 0:
            flat = {name: torch.cat([p[k].flatten() for k in sorted(p)])
                    for name, p in (("off", p_off), ("on", p_on), ("init", initial()))}
            moved = (flat["off"] - flat["init"]).norm()
            assert moved > 0
            assert (flat["on"] - flat["off"]).norm() <= self.drift * moved
            return
        for k in p_off:
            if self.rtol == 0 and self.atol == 0:
                assert torch.equal(p_on[k], p_off[k]), f"{k} differs from the all-off job's"
            else:
                torch.testing.assert_close(p_on[k], p_off[k], rtol=self.rtol, atol=self.atol,
                                           msg=lambda m, k=k: f"{k}: {m}")


def _not_applicable_on_cpu(name: str) -> Callable[[Observation, Observation], None]:
    def check(on: Observation, off: Observation) -> None:
        state = on.outcome.toggles[name]
        if str(on.outcome.device).startswith("cuda"):
            assert state["applied"], state  # what the copies do there: rlsweep's CUDA tier
            return
        assert state["value"] is True and not state["applied"] and "not applicable" in state["reason"], state
        assert off.outcome.toggles[name]["applied"]
    return check


def _backend(on: Observation, off: Observation) -> None:
    # the settings are in effect while the job trains, and restored after it
    assert on.during["matmul_precision"] == "high" and on.during["num_threads"] == 1, on.during
    assert off.during["matmul_precision"] == "highest", off.during
    assert on.after == on.before


def _channels_last(on: Observation, off: Observation) -> None:
    state = on.outcome.toggles["backend.channels_last"]
    if not state["applied"]:  # an MLP job: nothing to convert, and it says why
        assert state["reason"].startswith("not applicable") and "no convolutional network" in state["reason"]
        assert not on.conv_layouts and not off.conv_layouts
        return
    assert on.conv_layouts["channels_last"] > 0 and on.conv_layouts["contiguous"] == 0, on.conv_layouts
    assert off.conv_layouts["contiguous"] > 0 and off.conv_layouts["channels_last"] == 0, off.conv_layouts


def _compile(on: Observation, off: Observation) -> None:
    per_function = on.outcome.compile["per_function"]
    assert set(per_function) == {"act", "update"}, per_function
    assert all(f["compilations"] >= 1 for f in per_function.values()), per_function
    assert on.outcome.compile["compile_s"] > 0
    assert off.outcome.compile["per_function"] == {} and off.outcome.compile["compile_s"] == 0


def _dtype(on: Observation, off: Observation) -> None:
    matmuls = ("addmm", "mm", "linear", "bmm")
    # acting autocasts by itself (rt.policy): the losses must too, inside the gradient step
    assert on.ops_named(*matmuls, dtype="bfloat16", in_update=True) > 0, (
        "no matmul of the gradient step ran in bfloat16: run the forwards and losses under `with rt.autocast():`")
    assert off.ops_named(*matmuls, dtype="bfloat16") == 0
    assert off.ops_named(*matmuls, dtype="float32") > 0


def _inplace(on: Observation, off: Observation) -> None:
    assert on.ops_named("relu_", "tanh_") > 0, "no in-place activation ran"
    assert off.ops_named("relu_", "tanh_") == 0
    assert off.ops_named("relu", "tanh") > 0


def _twin_modules(on: Observation, off: Observation) -> None:
    assert off.mode_switches > 0, "acting switched no network to eval mode and back: does it use rt.policy?"
    assert on.mode_switches == 0, f"{on.mode_switches} .train()/.eval() calls while acting with twins"


#: every toggle's effect, by the toggle's name
EFFECTS: dict[str, Effect] = {
    "backend": Effect(_backend),
    # NHWC convolutions sum in another order: equal up to rounding
    "backend.channels_last": Effect(_channels_last, record_ops=True, rtol=1e-4, atol=1e-5),
    # inductor fuses and reorders float math: equal up to rounding
    "compile": Effect(_compile, rtol=1e-4, atol=1e-5),
    # bfloat16 keeps 8 mantissa bits
    "dtype": Effect(_dtype, record_ops=True, drift=0.25),
    "inplace": Effect(_inplace, record_ops=True),
    "non_blocking": Effect(_not_applicable_on_cpu("non_blocking")),
    "pin_memory": Effect(_not_applicable_on_cpu("pin_memory")),
    "twin_modules": Effect(_twin_modules),
}
