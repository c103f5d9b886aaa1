"""Every optimisation toggle, one module each, applied in one place.

A toggle is a :class:`Toggle` subclass in a module of this package; :data:`TOGGLES` collects them
(in module-name order), and the config schema, validation, run names, W&B tags, the report's
baselines and the test matrices derive from it.
"""

from __future__ import annotations

import contextlib
import importlib
import pkgutil
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from rlsweep.toggles.base import Toggle, ToggleState, text

if TYPE_CHECKING:
    import torch

    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime


def _discover() -> tuple[type[Toggle], ...]:
    found: list[type[Toggle]] = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name == "base":
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        found += [obj for obj in vars(module).values()
                  if isinstance(obj, type) and issubclass(obj, Toggle) and obj is not Toggle
                  and obj.__module__ == module.__name__]
    names = [t.name for t in found]
    if len(set(names)) != len(names):
        raise TypeError(f"two toggles share a name: {names}")
    return tuple(found)


TOGGLES: tuple[type[Toggle], ...] = _discover()

__all__ = ["TOGGLES", "Toggle", "ToggleState", "applied_toggles", "run_name_fragments", "tags",
           "text", "values"]


def _each(cfg: TrainConfig) -> Iterator[tuple[Toggle, Any]]:
    for t in TOGGLES:
        toggle = t()
        yield toggle, toggle.value(cfg)


def values(cfg: TrainConfig) -> dict[str, Any]:
    """Every toggle's value in ``cfg``, by toggle name."""
    return {toggle.name: value for toggle, value in _each(cfg)}


def run_name_fragments(cfg: TrainConfig) -> list[str]:
    """The run-name parts of the toggles that are on (``compile=default``, ``twin_modules``)."""
    return [f for toggle, value in _each(cfg) if (f := toggle.fragment(value))]


def tags(cfg: TrainConfig) -> list[str]:
    """W&B tags of every toggle's value (``twin_modules=true``)."""
    return [tag for toggle, value in _each(cfg) for tag in toggle.tags(value)]


@contextlib.contextmanager
def applied_toggles(cfg: TrainConfig, device: torch.device) -> Iterator[tuple[Runtime, dict[str, ToggleState]]]:
    """Apply every toggle for one job; yield the runtime and what each toggle did; restore.

    A toggle that cannot act on ``device`` is not applied (the job runs without it) and its
    state says why; one that partly applies is applied and says what it could not do.
    """
    from rlsweep.runtime import Runtime

    rt = Runtime(device)
    toggles = [t() for t in TOGGLES]
    states: dict[str, ToggleState] = {}
    try:
        for toggle in toggles:
            reason = toggle.not_applicable(cfg, device)
            applies = reason is None or reason.startswith("partly")
            if applies:
                toggle.apply(rt, cfg)
            states[toggle.name] = ToggleState(toggle.value(cfg), applied=applies, reason=reason)
        yield rt, states
    finally:
        for toggle in reversed(toggles):
            toggle.restore()
