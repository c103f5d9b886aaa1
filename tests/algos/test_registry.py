from __future__ import annotations

import importlib
import pkgutil

from helpers import CONF

from . import contract


def test_every_algorithm_config_has_a_contract() -> None:
    """Every option of conf/algo/ (rlsweep's built-ins) runs the algorithm contract, and so do the example plugins."""
    import tests.algos as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"tests.algos.{mod.name}")
    covered = {cls.algo for cls in contract.Contract.__subclasses__()}
    assert covered == {p.stem for p in (CONF / "algo").glob("*.yaml")} | {"td3", "a2c"}
