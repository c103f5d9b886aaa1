"""Algorithms: the built-in ones (PPO, DQN, SAC) and the way any algorithm is found.

There is no registry: the ``algo`` node of a job's config names its class with ``_target_``
(``rlsweep.algos.ppo.PPO``, or ``mypkg.td3.TD3`` from a user's own config directory), and
:func:`algorithm_class` imports it.
"""

from __future__ import annotations

import importlib

from rlsweep.algos.base import Algorithm
from rlsweep.config import ConfigError

__all__ = ["Algorithm", "algorithm_class"]


def algorithm_class(target: str | None) -> type[Algorithm]:
    """The :class:`Algorithm` subclass a ``_target_`` names (``package.module.Class``).

    Raises:
        ConfigError: the path is missing or does not import, or names something that is not an
            Algorithm subclass.
    """
    if not target or not isinstance(target, str):
        raise ConfigError("algo._target_ is not set: the algo config must name its Algorithm class, e.g. "
                          "_target_: mypkg.td3.TD3")
    module_name, _, attr = target.rpartition(".")
    if not module_name:
        raise ConfigError(f"algo._target_={target!r} is not a class path: use package.module.Class")
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is a config problem here
        raise ConfigError(f"algo._target_={target!r}: module {module_name!r} cannot be imported "
                          f"({type(exc).__name__}: {exc}); is its package installed or on PYTHONPATH?") from None
    cls = getattr(module, attr, None)
    if cls is None:
        raise ConfigError(f"algo._target_={target!r}: module {module_name!r} has no {attr!r}")
    if not (isinstance(cls, type) and issubclass(cls, Algorithm)):
        raise ConfigError(f"algo._target_={target!r} is not an Algorithm: subclass rlsweep.api.Algorithm "
                          "(see docs/guide/plugins.md)")
    return cls
