"""Every toggle has a contract subclass; every toggle is a config key users can set."""

from __future__ import annotations

import importlib
import pkgutil

from rlsweep.toggles import TOGGLES

from . import contract


def test_every_toggle_has_a_contract() -> None:
    import tests.toggles as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"tests.toggles.{mod.name}")
    covered = {cls.toggle.name for cls in contract.ToggleContract.__subclasses__()}
    assert covered == {t.name for t in TOGGLES}
