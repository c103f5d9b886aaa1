"""rlsweep's public API: what an algorithm -- built-in or your own -- is written against.

An algorithm is a subclass of :class:`Algorithm` in your own package, named by ``_target_`` in a
YAML file of your own config directory; its hyper-parameters are a dataclass subclassing
:class:`AlgoConfig` (``config_class``). Every toggle reaches your code through the
:class:`Runtime` you are handed (``self.rt``): act through ``rt.policy`` and take gradient steps
through ``rt.update`` + ``rt.minimize`` (your losses, rlsweep's update); and every phase you time with ``self.timer`` shows up
in the result record, W&B and the report. An algorithm that sets ``seeds_together`` trains several
seeds in one process (``seeds_per_job``; docs/guide/seeds.md). See docs/guide/plugins.md for a walk-through, and
``examples/td3/`` for a complete algorithm written only against this module.

Names here are stable; everything else in rlsweep is internal and may change. What a plugin is handed
rather than builds (the policy ``rt.policy`` returns, the step ``rt.update`` returns, the seed stacks of
``rt.per_seed``) is used through the Runtime's methods and documented there.
"""

from __future__ import annotations

from rlsweep.algos.base import Algorithm
from rlsweep.buffers import replay_buffer
from rlsweep.config import AlgoConfig, ConfigError, TrainConfig, hyper_parameter_errors
from rlsweep.envs import finished_episodes
from rlsweep.nets import layer_init, mlp
from rlsweep.runtime import NonFiniteLossError, Runtime
from rlsweep.timing import PHASES, PhaseTimer

__all__ = [
    "PHASES",
    "AlgoConfig",
    "ConfigError",
    "Algorithm",
    "NonFiniteLossError",
    "PhaseTimer",
    "Runtime",
    "TrainConfig",
    "finished_episodes",
    "hyper_parameter_errors",
    "layer_init",
    "mlp",
    "replay_buffer",
]
