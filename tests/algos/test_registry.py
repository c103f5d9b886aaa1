from __future__ import annotations

import importlib
import pkgutil

from rlsweep.algos import ALGORITHMS
from rlsweep.config import ALGO_SCHEMAS

from . import contract


def test_every_algorithm_has_a_contract() -> None:
    import tests.algos as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"tests.algos.{mod.name}")
    covered = {cls.algo for cls in contract.AlgorithmContract.__subclasses__()}
    assert covered == set(ALGORITHMS) == set(ALGO_SCHEMAS)
