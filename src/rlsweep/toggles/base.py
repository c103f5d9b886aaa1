"""The one interface every toggle implements (:class:`Toggle`): a toggle class is the single home of its switch.

No torch import here: a typo on the command line is reported before torch loads.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

if TYPE_CHECKING:
    import torch

    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime


@dataclass
class ToggleState:
    """What a toggle did in one job: its value, and whether it applied (or why not)."""

    value: Any
    applied: bool
    reason: str | None = None


def text(value: Any) -> str:
    """A value as users type it on the command line (``true``, ``none``, ``bfloat16``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    return str(value)


def choice_errors(key: str, value: Any, choices: Iterable[Any]) -> list[str]:
    """The message for ``key=value`` when ``value`` is not one of ``choices`` (empty: it is)."""
    # `1 in (False, True)` holds in Python: compare types too, so pin_memory=1 is refused, not taken as true
    if any(type(value) is type(c) and value == c for c in choices):
        return []
    return [f"{key}={value!r} is not valid; choose one of: {', '.join(map(text, choices))}"]


class Toggle(ABC):
    """One optimisation switch. A subclass sets the class attributes and implements ``apply``.

    A toggle whose config is one scalar (``pin_memory: bool``) sets ``schema`` to that type; a
    toggle with a config group (``compile=default`` selects ``conf/compile/default.yaml``) sets it
    to the group's dataclass, and ``key`` names the field that holds its value (``compile.mode``).
    """

    #: the record's key, the W&B column ``toggle.<name>`` and the tag prefix
    name: ClassVar[str]
    #: the config field the toggle adds to :class:`~rlsweep.config.TrainConfig` (default: ``name``)
    field: ClassVar[str]
    #: that field's type: a scalar type, or a dataclass for a config group
    schema: ClassVar[Any]
    #: the dotted config key holding the toggle's value (default: ``field``)
    key: ClassVar[str]
    #: the values users may set (None: any value of the schema's type)
    values: ClassVar[tuple[Any, ...] | None] = None
    #: the value that means "off": the default in the config and the report's baseline
    off_value: ClassVar[Any]
    #: Hydra overrides that turn the toggle on (the test matrices and the docs use them; a bool: ``<name>=true``)
    on: ClassVar[tuple[str, ...]]
    #: True when it must keep every number on a given device (the same seed trains bit for bit alike, on a CPU):
    #: the report flags such a toggle loudly when a seed's final return changes, and the contract proves it
    keeps_numbers: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "name" not in cls.__dict__:
            return  # an intermediate base class, not a toggle
        if "on" not in cls.__dict__ and getattr(cls, "schema", None) is bool:
            cls.on = (f"{cls.name}=true",)
        for attr in ("name", "schema", "off_value", "on"):
            if not hasattr(cls, attr):
                raise TypeError(f"toggle {cls.__name__} must set {attr}")
        if "field" not in cls.__dict__:
            cls.field = cls.name
        if "key" not in cls.__dict__:
            cls.key = cls.field

    # -- the config ----------------------------------------------------------------------------
    @classmethod
    def config_field(cls) -> tuple[str, Any, dataclasses.Field[Any]]:
        """``(name, type, field)`` of the toggle's field in the job's config schema."""
        if dataclasses.is_dataclass(cls.schema):
            return cls.field, cls.schema, dataclasses.field(default_factory=cls.schema)
        return cls.field, cls.schema, dataclasses.field(default=cls.off_value)

    def value(self, cfg: TrainConfig) -> Any:
        """The toggle's setting in this config (a plain, JSON-able value)."""
        node: Any = cfg
        for part in self.key.split("."):
            node = getattr(node, part)
        return node

    def validate(self, cfg: TrainConfig) -> list[str]:
        """Every reason this toggle's settings cannot run; subclasses add their conflicts."""
        return [] if self.values is None else choice_errors(self.key, self.value(cfg), self.values)

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        """Why this setting cannot act on ``device`` (``"partly ..."``: it acts in part); None when it can."""
        return None

    @abstractmethod
    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        """Switch the toggle's behaviour on ``rt`` (called when it applies, also when off)."""

    def restore(self) -> None:
        """Undo any process-global state ``apply`` changed. Default: nothing to undo."""

    # -- how it reads ------------------------------------------------------------------------
    def is_on(self, value: Any) -> bool:
        return value != self.off_value

    def fragment(self, value: Any) -> str | None:
        """Its part of a run name when on (``compile=default``, ``twin_modules``); None when off."""
        if not self.is_on(value):
            return None
        return self.name if value is True else f"{self.name}={text(value)}"

    def tags(self, value: Any) -> list[str]:
        """Its W&B tags, ``name=value`` as typed on the command line (``twin_modules=true``)."""
        return [f"{self.name}={text(value)}"]

    @classmethod
    def baseline(cls) -> dict[str, Any]:
        """The report's default baseline: report dimension -> off value."""
        return {cls.name: cls.off_value}


class FlagToggle(Toggle):
    """A toggle that sets the runtime attribute named like its key's last part to its value."""

    #: why it cannot act without a CUDA device (None: it can), said when it is on and the device is not CUDA
    cuda_only: ClassVar[str | None] = None

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if self.cuda_only and self.value(cfg) and device.type != "cuda":
            return f"not applicable: {self.cuda_only} (device={device.type})"
        return None

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        setattr(rt.settings, self.key.rpartition(".")[2], self.value(cfg))


class BoolToggle(FlagToggle):
    """A true/false :class:`FlagToggle`, off by default and turned on by ``<name>=true``."""

    schema = bool
    values = (False, True)
    off_value = False
