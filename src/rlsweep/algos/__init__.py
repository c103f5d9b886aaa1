"""Algorithms: the built-in ones (PPO, DQN, SAC) and the way any algorithm is found.

There is no registry: the ``algo`` node of a job's config names its class with ``_target_``
(``rlsweep.algos.ppo.PPO``, or ``mypkg.td3.TD3`` from a user's own config directory),
:func:`algorithm_class` imports it, and :func:`to_object` types the node with its schema. Importing
this package loads no torch: a config is checked before an algorithm is imported.
"""

from __future__ import annotations

import dataclasses
import importlib
from typing import TYPE_CHECKING, Any

from omegaconf import OmegaConf
from omegaconf.errors import ConfigKeyError, OmegaConfBaseException

from rlsweep.config import ConfigError, TrainConfig, algo_owner, unknown_key_message

if TYPE_CHECKING:
    from rlsweep.algos.base import Algorithm

__all__ = ["algorithm_class", "to_object"]


def algorithm_class(target: str | None) -> type[Algorithm]:
    """The :class:`~rlsweep.algos.base.Algorithm` subclass a ``_target_`` names (``package.module.Class``).

    Raises:
        ConfigError: the path is missing or does not import, or names something that is not an
            Algorithm subclass.
    """
    from rlsweep.algos.base import Algorithm

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


def to_object(cfg: Any) -> TrainConfig:
    """Turn a composed DictConfig into typed dataclasses (read once, before the hot loop).

    The ``algo`` node is typed with the schema of the class its ``_target_`` names. The ``hydra``
    node, present in callbacks, is ignored.

    Raises:
        ConfigError: ``algo._target_`` is not an importable Algorithm, or the node has a
            hyper-parameter that class does not take, or a value of the wrong type.
    """
    body = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"])
    merged = OmegaConf.merge(OmegaConf.structured(TrainConfig), body)
    merged.algo = _typed_algo(merged.algo)
    return OmegaConf.to_object(merged)  # type: ignore[return-value]


def _typed_algo(node: Any) -> Any:
    """The ``algo`` node merged into its class's schema (``Algorithm.config_class``)."""
    target = OmegaConf.select(node, "_target_", default=None) if OmegaConf.is_config(node) else None
    cls = algorithm_class(target)
    schema = cls.config_class
    accepted = [f.name for f in dataclasses.fields(schema)]
    # a key added with `+algo.<key>=...` to a node typed with a built-in's schema survives the merge
    # below, and to_object would then drop it without a word
    extra = [k for k in node.keys() if k not in accepted] if OmegaConf.is_dict(node) else []
    if extra:
        raise ConfigError(unknown_key_message(f"algo.{extra[0]}", accepted, algo_owner(target, schema)))
    try:
        typed = OmegaConf.merge(OmegaConf.structured(schema), node)
    except ConfigKeyError as exc:
        raise ConfigError(unknown_key_message(f"algo.{exc.key}", accepted, algo_owner(target, schema))) from None
    except OmegaConfBaseException as exc:
        message = str(exc).splitlines()[0]
        raise ConfigError(f"algo.{exc.key}: {message} ({schema.__name__} of {target})") from None
    if typed.name is None:
        typed.name = str(getattr(cls, "name", None) or cls.__name__.lower())
    return typed
