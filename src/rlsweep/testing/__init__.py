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

Each check composes the real Hydra configs (rlsweep's ``conf/`` plus ``config_dir``) and trains
for real: every phase is timed, the same seed gives the same numbers, every hyper-parameter of
the schema is read by the algorithm's own code while it trains, acting runs on the eval-mode
views, an incompatible env is refused before launch, a non-finite loss stops the job, and a job
stopped by a signal resumes from its checkpoint with exactly the numbers of an uninterrupted run.

The toggle contracts run over the same algorithm (``test_toggle_acts[<toggle>]``,
``test_toggle_keeps_the_numbers[<toggle>]``): each toggle, turned on, visibly acts on your job
(:mod:`rlsweep.testing.toggles` says how each is observed) and leaves its numbers equal to the
all-off job's (bit for bit, or within the toggle's float tolerance). The compiled job lists its
graph breaks and recompiles with dynamo's reasons; with ``compiles_clean`` any one fails. The slow
check (``-m slow``): the algorithm learns.

Installed, this package is a pytest plugin (``pytest11`` entry point): it registers the ``slow``
marker, and pytest rewrites the contract's assertions so that a failed check shows its values.
Importing it is light: the contract (and torch) load when you first name it.
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
