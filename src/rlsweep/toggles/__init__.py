"""Every optimisation toggle, behind one interface (:class:`Toggle`), applied in one place.

Adding a toggle: a module here with a :class:`Toggle` subclass, an entry in :data:`TOGGLES`, a
field in :class:`rlsweep.config.TrainConfig`, and a contract subclass in tests/toggles/.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from rlsweep.config import TrainConfig
from rlsweep.toggles.backend import BackendToggle
from rlsweep.toggles.base import Runtime, Toggle, ToggleState, make_twin
from rlsweep.toggles.compile import CompileToggle
from rlsweep.toggles.dtype import DtypeToggle
from rlsweep.toggles.inplace import InplaceToggle
from rlsweep.toggles.non_blocking import NonBlockingToggle
from rlsweep.toggles.pin_memory import PinMemoryToggle
from rlsweep.toggles.twin_modules import TwinModulesToggle

TOGGLES: tuple[type[Toggle], ...] = (
    CompileToggle,
    DtypeToggle,
    PinMemoryToggle,
    NonBlockingToggle,
    TwinModulesToggle,
    InplaceToggle,
    BackendToggle,
)

__all__ = ["TOGGLES", "Runtime", "Toggle", "ToggleState", "applied_toggles", "make_twin"]


@contextlib.contextmanager
def applied_toggles(cfg: TrainConfig, device: torch.device) -> Iterator[tuple[Runtime, dict[str, ToggleState]]]:
    """Apply every toggle for one job; yield the runtime and what each toggle did; restore.

    A toggle that cannot act on ``device`` is not applied (the job runs without it) and its
    state says why; one that partly applies is applied and says what it could not do.
    """
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
