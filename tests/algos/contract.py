"""The contract every algorithm meets; one subclass per algorithm module.

``AlgorithmContract`` has no ``Test`` prefix; adding an algorithm to ``rlsweep.algos.ALGORITHMS``
without a subclass fails ``test_every_algorithm_has_a_contract``.
"""

from __future__ import annotations

import dataclasses
import inspect
import os
import signal
from pathlib import Path
from typing import Any, ClassVar

import numpy as np
import pytest
import torch
from helpers import compose_cfg, params_of, tiny_cfg

from rlsweep.algos import ALGORITHMS
from rlsweep.algos.base import NonFiniteLossError
from rlsweep.config import ALGO_SCHEMAS, AlgoConfig
from rlsweep.runner import train
from rlsweep.signals import Interrupted
from rlsweep.validate import validate


class AlgorithmContract:
    algo: ClassVar[str]
    #: an env whose action space the algorithm cannot drive (None: it drives every kind we ship)
    incompatible_env: ClassVar[str | None]
    #: learning bar: (total_env_steps, final_return threshold), judged on 2 of 3 seeds
    learning_bar: ClassVar[tuple[int, float]]
    #: phases every steady iteration records
    phases: ClassVar[tuple[str, ...]] = ("env_step", "act", "h2d", "d2h", "update")

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for attr in ("algo", "incompatible_env", "learning_bar"):
            if not hasattr(cls, attr):
                raise TypeError(f"{cls.__name__} must set {attr}")

    def test_runs_and_times_every_phase(self) -> None:
        out = train(tiny_cfg(self.algo))
        cfg = tiny_cfg(self.algo)
        assert 0 < out.env_steps <= cfg.total_env_steps
        assert out.env_steps == out.iterations * out.algo.iteration_env_steps
        assert out.updates > 0
        for phase in self.phases:
            t = out.timings[phase]
            assert t["count"] > 0, phase
            assert 0 < t["p10_ms"] <= t["median_ms"] <= t["p90_ms"], phase
        assert out.throughput["env_steps_per_s"] > 0
        assert out.throughput["steady_iterations"] == len(out.throughput["per_iteration_env_steps_per_s"]) > 0
        assert np.isfinite(out.learning["final_return"])
        assert out.learning["eval_episodes"] == cfg.eval_episodes

    def test_same_seed_same_numbers(self) -> None:
        a, b = train(tiny_cfg(self.algo)), train(tiny_cfg(self.algo))
        assert a.env_steps == b.env_steps
        assert a.learning["curve"]["episode_return"] == b.learning["curve"]["episode_return"]
        assert a.learning["curve"]["env_steps"] == b.learning["curve"]["env_steps"]
        pa, pb = params_of(a.algo), params_of(b.algo)
        assert all(torch.equal(pa[k], pb[k]) for k in pa)

    def test_every_hyper_parameter_is_used(self) -> None:
        """Config parity: no schema field that the algorithm module ignores."""
        schema = ALGO_SCHEMAS[self.algo]
        source = inspect.getsource(inspect.getmodule(ALGORITHMS[self.algo]))
        generic = {f.name for f in dataclasses.fields(AlgoConfig)} - {"hidden_sizes", "activation", "lr", "gamma"}
        for field in dataclasses.fields(schema):
            if field.name in generic:
                continue
            assert f".{field.name}" in source, f"algo.{field.name} is in the schema but {self.algo}.py never reads it"

    def test_rejects_incompatible_env(self) -> None:
        if self.incompatible_env is None:
            pytest.skip("drives both discrete and continuous actions")
        errors = validate(compose_cfg([f"algo={self.algo}", f"env={self.incompatible_env}"]))
        assert any(f"algo={self.algo} needs" in e for e in errors), errors

    def test_non_finite_loss_stops_the_job(self) -> None:
        with pytest.raises(NonFiniteLossError, match=r"non-finite loss at update \d+"):
            train(tiny_cfg(self.algo, "algo.lr=1e30", "total_env_steps=2048"))

    def test_resume_from_checkpoint_is_exact(self, tmp_path: Path) -> None:
        """Stopped by a signal after 3 iterations and resumed: same numbers as one straight run."""
        extra = ("total_env_steps=768",)
        straight = train(tiny_cfg(self.algo, *extra))
        ckpt = tmp_path / "checkpoint.pt"
        calls = {"n": 0}

        def stop_after_three(row: dict, env_steps: int) -> None:
            calls["n"] += 1
            if calls["n"] == 3:
                os.kill(os.getpid(), signal.SIGINT)

        with pytest.raises(Interrupted):
            train(tiny_cfg(self.algo, *extra), on_iteration=stop_after_three, checkpoint_path=ckpt)
        assert ckpt.is_file()
        resumed = train(tiny_cfg(self.algo, *extra), checkpoint_path=ckpt)
        assert resumed.requeues == 1 and resumed.resumed_at_env_steps == [3 * straight.algo.iteration_env_steps]
        assert resumed.env_steps == straight.env_steps
        assert resumed.learning["curve"]["episode_return"] == straight.learning["curve"]["episode_return"]
        assert resumed.learning["final_return"] == straight.learning["final_return"]
        p0, p1 = params_of(straight.algo), params_of(resumed.algo)
        assert all(torch.equal(p0[k], p1[k]) for k in p0)

    def test_checkpoint_of_another_config_is_ignored(self, tmp_path: Path) -> None:
        ckpt = tmp_path / "checkpoint.pt"
        calls = {"n": 0}

        def stop(row: dict, env_steps: int) -> None:
            calls["n"] += 1
            if calls["n"] == 2:
                os.kill(os.getpid(), signal.SIGINT)

        with pytest.raises(Interrupted):
            train(tiny_cfg(self.algo, "total_env_steps=768"), on_iteration=stop, checkpoint_path=ckpt)
        other = train(tiny_cfg(self.algo, "total_env_steps=768", "seed=5"), checkpoint_path=ckpt)
        assert other.requeues == 0

    @pytest.mark.slow
    def test_learns(self) -> None:
        """The default hyper-parameters reach the bar on at least 2 of 3 seeds."""
        total, bar = self.learning_bar
        finals = []
        for seed in range(3):
            cfg = compose_cfg([f"algo={self.algo}", f"seed={seed}", f"total_env_steps={total}", "progress=false",
                               "logger.mode=disabled", "backend.num_threads=1"])
            finals.append(train(cfg).learning["final_return"])
            if sum(f >= bar for f in finals) >= 2:
                break
        assert sum(f >= bar for f in finals) >= 2, f"final returns {finals} vs bar {bar}"
