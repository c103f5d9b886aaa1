"""Every toggle has a contract subclass; every toggle is a config key users can set."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

from rlsweep.toggles import TOGGLES

from . import contract


def test_every_toggle_has_a_contract() -> None:
    import tests.toggles as pkg

    for mod in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"tests.toggles.{mod.name}")
    covered = {cls.toggle.name for cls in contract.ToggleContract.__subclasses__()}
    assert covered == {t.name for t in TOGGLES}


def test_every_toggle_has_an_effect_the_algorithm_contract_checks() -> None:
    from rlsweep.testing.toggles import EFFECTS

    assert set(EFFECTS) == {t.name for t in TOGGLES}


@pytest.mark.parametrize("doc", ["README.md", "docs/reference/toggles.md"])
def test_the_toggle_tables_list_every_toggle_and_its_values(doc: str) -> None:
    """README's table and the reference's are checked against the toggle classes: a new toggle, or a
    new value, must appear in both."""
    import dataclasses
    import re

    from helpers import ROOT

    from rlsweep.toggles import text

    table = re.search(r"\n(\| key \|.*\n)(\|.*\n)+", (ROOT / doc).read_text()).group(0)
    rows = {m.group(1): m.group(2) for m in re.finditer(r"^\| `([\w.]+)` \| ([^|]*) \|", table, re.M)}
    expected = set()
    for toggle in TOGGLES:
        if toggle.key == toggle.field and dataclasses.is_dataclass(toggle.schema):  # a group of settings
            expected |= {f"{toggle.field}.{f.name}" for f in dataclasses.fields(toggle.schema)}
        else:
            expected.add(toggle.name)
            for value in toggle.values or ():
                assert f"`{text(value)}`" in rows.get(toggle.name, ""), (toggle.name, value)
    assert set(rows) == expected
