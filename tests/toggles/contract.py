"""The contract every toggle meets (TorchRL style: a base class, one subclass per toggle).

``ToggleContract`` has no ``Test`` prefix, so pytest collects only its subclasses. A toggle in
``rlsweep.toggles.TOGGLES`` without a subclass fails ``test_every_toggle_has_a_contract``. The
overrides that turn a toggle on come from the toggle class, its observable effect from
``rlsweep.testing.toggles.EFFECTS``: the public algorithm contract checks that effect on every
algorithm (tests/algos, the TD3 plugin included); here the Atari job (slow) and what does not
depend on the algorithm: composing, records and W&B, global state, CPU/CUDA applicability.
"""

from __future__ import annotations

import functools
import json
from typing import Any, ClassVar

import pytest
import torch
from helpers import compose_cfg, flatten, params_of, tiny_cfg

from rlsweep.runner import train
from rlsweep.testing.algorithm import initial_parameters
from rlsweep.testing.toggles import EFFECTS, Effect, Observation, global_state, observe
from rlsweep.toggles import Toggle

#: the Atari PPO job (the Nature CNN on Breakout frames, a tiny budget) has no algorithm contract of its
#: own: each toggle's effect is checked on it here, in the slow tier (its compiled jobs compile convolutions)
ALGOS = (pytest.param("atari_ppo", marks=pytest.mark.slow),)


@functools.cache
def reference_params(algo: str, *overrides: str) -> tuple[int, int, dict[str, torch.Tensor]]:
    """(env_steps, updates, parameters) of a tiny all-off run, shared by every toggle's test."""
    out = baseline_observation(algo, False).outcome if not overrides else train(tiny_cfg(algo, *overrides))
    return out.env_steps, out.updates, params_of(out.algo)


@functools.cache
def baseline_observation(algo: str, record_ops: bool) -> Observation:
    """The all-off tiny job of ``algo``, observed (shared by every toggle's ``test_acts``)."""
    return observe(tiny_cfg(algo), record_ops)


@functools.cache
def toggled_observation(algo: str, on: tuple[str, ...], record_ops: bool) -> tuple[Observation, dict[str, torch.Tensor]]:
    """The tiny job of ``algo`` with a toggle on, observed, and its final parameters.

    ``test_acts`` and ``test_matches_baseline_numerically`` share this one job: the instruments
    (a mode-switch counter, an op recorder) change no number. The trained algorithm is dropped
    (its replay buffer is large); its parameters are kept.
    """
    observation = observe(tiny_cfg(algo, *on), record_ops)
    params = params_of(observation.outcome.algo)
    observation.outcome.algo = None
    return observation, params


class ToggleContract:
    #: the toggle under test (its class gives the overrides that turn it on)
    toggle: ClassVar[type[Toggle]]
    #: substring of the reason this setting gives on a CPU-only job (None: it applies on CPU)
    cpu_reason: ClassVar[str | None] = None
    #: the tiny job (tiny_cfg's first argument) where the toggle applies on a CUDA device
    cuda_job: ClassVar[str] = "ppo"
    #: its observable effect and float tolerance (rlsweep.testing.toggles.EFFECTS)
    effect: ClassVar[Effect]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not hasattr(cls, "toggle"):
            raise TypeError(f"{cls.__name__} must set toggle")
        cls.effect = EFFECTS[cls.toggle.name]
        cls.record_ops, cls.rtol, cls.atol, cls.drift = (cls.effect.record_ops, cls.effect.rtol, cls.effect.atol,
                                                         cls.effect.drift)
        cls.on = list(cls.toggle.on)
        cls.on_value = cls.toggle().value(compose_cfg(cls.on))
        for name in dir(ToggleContract):
            if name.startswith("test_") and getattr(cls, name) is None:
                raise TypeError(f"{cls.__name__} disables the contract test {name}")

    def assert_acts(self, on: Observation, off: Observation) -> None:
        """Fail unless ``on`` (the toggle on) shows the toggle's effect and ``off`` (all off) does not."""
        self.effect.check(on, off)

    @pytest.mark.parametrize("algo", ALGOS)
    def test_acts(self, algo: str) -> None:
        """The toggle changes what the job does, observably, on every algorithm (or says it cannot)."""
        on = toggled_observation(algo, tuple(self.on), self.record_ops)[0]
        off = baseline_observation(algo, self.record_ops)
        self.assert_acts(on, off)

    def test_composes(self) -> None:
        cfg = compose_cfg(self.on)
        assert self.toggle().value(cfg) == self.on_value
        off = compose_cfg([])
        assert self.toggle().value(off) != self.on_value

    @pytest.mark.parametrize("algo", ALGOS)
    def test_matches_baseline_numerically(self, algo: str) -> None:
        env_steps, updates, p0 = reference_params(algo)
        observation, p1 = toggled_observation(algo, tuple(self.on), self.record_ops)
        toggled = observation.outcome
        assert toggled.env_steps == env_steps
        assert toggled.updates == updates > 0
        assert p0.keys() == p1.keys()
        other_seed = reference_params(algo, "seed=1")[2]
        assert any(not torch.equal(p0[k], v) for k, v in other_seed.items()), (
            "a different seed must give different parameters, or this comparison proves nothing")
        self.effect.assert_keeps_the_numbers(p1, p0, lambda: initial_parameters(tiny_cfg(algo)))

    def test_a_toggle_that_declares_it_keeps_the_numbers_is_held_to_bit_exact(self) -> None:
        """The report flags a keeps_numbers toggle loudly when a seed's return changes: the contract's
        numerical check (test_matches_baseline_numerically) must then be bit-exact, not a tolerance."""
        exact = self.effect.rtol == self.effect.atol == self.effect.drift == 0
        assert exact or not self.toggle.keeps_numbers

    def test_works_with_compile(self) -> None:
        out = train(tiny_cfg("ppo", *self.on, "compile=default"))
        assert out.toggles[self.toggle.name]["value"] == self.on_value
        assert out.compile["mode"] == "default"
        assert out.compile["compile_s"] > 0
        assert out.compile["per_function"]["update"]["compilations"] >= 1
        assert out.throughput["env_steps_per_s"] > 0

    def test_declares_where_it_applies(self) -> None:
        cfg = compose_cfg(self.on)
        reason = self.toggle().not_applicable(cfg, torch.device("cpu"))
        if self.cpu_reason is None:
            assert reason is None or reason.startswith("partly")
        else:
            assert reason is not None and self.cpu_reason in reason
        out = train(tiny_cfg("ppo", *self.on, "device=cpu"))
        state = out.toggles[self.toggle.name]
        assert state["applied"] == (self.cpu_reason is None)
        if self.cpu_reason:
            assert state["reason"].startswith("not applicable")

    def test_leaves_no_global_state(self) -> None:
        torch.set_num_threads(2)
        before = global_state()
        try:
            train(tiny_cfg("ppo", *self.on))
            assert global_state() == before
        finally:
            torch.set_num_threads(1)

    def test_in_result_record_and_wandb(self, all_toggles_job: dict[str, Any]) -> None:
        record, wandb_config, wandb_summary = (all_toggles_job[k] for k in ("record", "config", "summary"))
        assert record["status"] == "ok"
        state = record["toggles"][self.toggle.name]
        assert state["value"] == self.on_value
        assert state["applied"] == (self.cpu_reason is None)
        # W&B's config is nested (a dict-valued toggle such as backend becomes toggle.backend.<field>):
        # compare it flattened, as the W&B app shows it
        expected = flatten({f"toggle.{self.toggle.name}": self.on_value})
        assert {k: json.loads(json.dumps(wandb_config.get(k))) for k in expected} == expected
        assert wandb_summary[f"toggle_applied/{self.toggle.name}"] == state["applied"]
        for tag in self.toggle().tags(self.on_value):  # e.g. twin_modules=true
            assert tag in all_toggles_job["tags"]

    @pytest.mark.cuda
    @pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
    def test_applies_on_cuda(self) -> None:
        out = train(tiny_cfg(self.cuda_job, *self.on, "device=cuda"))
        assert out.toggles[self.toggle.name]["applied"], out.toggles[self.toggle.name]
