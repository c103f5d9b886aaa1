"""The algorithm contract, for your own test suite: run it on your algorithm before a sweep.

rlsweep runs this same contract over its built-in algorithms and over ``examples/td3``. Subclass
:class:`AlgorithmContract` in a pytest module (the class name must start with ``Test``)::

    from rlsweep.testing import AlgorithmContract

    class TestMyTD3(AlgorithmContract):
        algo = "my_td3"                      # conf/algo/my_td3.yaml in your config dir
        config_dir = "path/to/myproj/conf"   # what you pass to --config-dir
        tiny = ["algo.learning_starts=32", "algo.batch_size=16", "total_env_steps=160"]
        incompatible_env = "cartpole"        # an env your algorithm cannot drive (None: none)
        learning_bar = (20_000, -300.0)      # slow test: final return >= bar on 2 of 3 seeds
        compiles_clean = True                # compiled: no graph break and no recompile
        bandit = ["total_env_steps=1024"]    # (the default) steps in which the tiny job learns a bandit
        bootstraps = True                    # (the default) its targets bootstrap: truncation is not the end

Each check composes the real Hydra configs (rlsweep's ``conf/`` plus ``config_dir``) and trains for
real; the toggle contracts (``test_toggle_acts[<toggle>]``, ``test_toggle_keeps_the_numbers[<toggle>]``)
run each toggle over the same algorithm (:mod:`rlsweep.testing.toggles`). What each check asserts:
docs/guide/plugins.md. Installed, this package is a pytest plugin (``pytest11`` entry point) that
registers the ``slow`` marker and rewrites the contract's assertions so that a failed check shows its
values; importing it is light (the contract, and torch, load when you first name it).
"""

from __future__ import annotations

from typing import Any

import pytest

pytest.register_assert_rewrite("rlsweep.testing.algorithm", "rlsweep.testing.toggles")

__all__ = ["QUIET", "AlgorithmContract", "assert_seeds_together_are_seeds_alone", "compose", "parameters"]


def pytest_configure(config: pytest.Config) -> None:
    """The contract's marker, registered for every suite that installs rlsweep (``--strict-markers`` too)."""
    config.addinivalue_line("markers", "slow: minutes of training (rlsweep's contract: learning)")


def __getattr__(name: str) -> Any:
    if name in __all__:
        from rlsweep.testing import algorithm

        return getattr(algorithm, name)
    raise AttributeError(f"module 'rlsweep.testing' has no attribute {name!r}")
