"""Each algorithm checks its own hyper-parameters (``Algorithm.validate_config``).

The checks moved from validate.py, which tested field names it found on any algorithm, into each
algorithm's override; the contract only sees the base class's (``algo.lr``). Here one bad value of
every kind each algorithm adds is named, so an override that drops its own checks fails.
"""

from __future__ import annotations

import copy
import functools
from typing import Any

import pytest
from helpers import tiny_cfg

from rlsweep.algos import algorithm_class
from rlsweep.config import TrainConfig

CASES = [
    ("ppo", "clip_coef", 0.0, "algo.clip_coef must be > 0"),
    ("ppo", "gae_lambda", 1.5, "algo.gae_lambda must be in [0.0, 1.0]"),
    ("ppo", "vf_coef", -1.0, "algo.vf_coef must be >= 0"),
    ("dqn", "target_update_interval", 0, "algo.target_update_interval must be > 0"),
    ("dqn", "tau", 0.0, "algo.tau must be in (0, 1]"),
    ("dqn", "end_eps", 2.0, "algo.end_eps must be in [0.0, 1.0]"),
    ("dqn", "learning_starts", -1, "algo.learning_starts must be >= 0"),
    ("sac", "alpha", 0.0, "algo.alpha must be > 0"),
    ("sac", "gradient_steps", 0, "algo.gradient_steps must be > 0"),
    ("sac", "tau", 1.5, "algo.tau must be in (0, 1]"),
    ("sac", "learning_starts", -1, "algo.learning_starts must be >= 0"),
    ("td3", "buffer_size", 0, "algo.buffer_size must be > 0"),
    ("td3", "tau", 0.0, "algo.tau must be in (0, 1]"),
    ("td3", "policy_noise", -0.1, "algo.policy_noise must be >= 0"),
    ("td3", "policy_frequency", 0, "algo.policy_frequency must be >= 1"),
]


@functools.cache
def _tiny(algo: str) -> TrainConfig:
    return tiny_cfg(algo)


def _errors(algo: str, **values: Any) -> list[str]:
    cfg = copy.deepcopy(_tiny(algo))
    for key, value in values.items():
        setattr(cfg.algo, key, value)
    return algorithm_class(cfg.algo._target_).validate_config(cfg)


@pytest.mark.parametrize(("algo", "key", "value", "message"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_each_algorithm_names_a_bad_value_of_its_own(algo: str, key: str, value: Any, message: str) -> None:
    assert _errors(algo) == []
    errors = _errors(algo, **{key: value})
    assert any(e.startswith(message) for e in errors), errors
