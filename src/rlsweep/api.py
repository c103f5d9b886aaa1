"""rlsweep's public API: what an algorithm -- built-in or your own -- is written against.

An algorithm is a subclass of :class:`Algorithm` in your own package, named by ``_target_`` in a
YAML file of your own config directory; its hyper-parameters are a dataclass subclassing
:class:`AlgoConfig` (``config_class``). Every toggle reaches your code through the
:class:`Runtime` you are handed (``self.rt``): act through ``rt.policy`` and take gradient steps
through ``rt.update`` + ``rt.minimize`` (your losses, rlsweep's update); and every phase you time with ``self.timer`` shows up
in the result record, W&B and the report. An algorithm that sets ``seeds_together`` trains several
seeds in one process (``seeds_per_job``; docs/guide/seeds.md). See docs/guide/plugins.md for a walk-through, and
``examples/td3/`` for a complete algorithm written only against this module.

Names here are stable; everything else in rlsweep is internal and may change.
"""

from __future__ import annotations

from rlsweep.algos.base import Algorithm
from rlsweep.buffers import ReplayBuffer, SeedBuffers, replay_buffer
from rlsweep.config import AlgoConfig, ConfigError, TrainConfig, hyper_parameter_errors
from rlsweep.envs import finished_episodes
from rlsweep.nets import layer_init, mlp
from rlsweep.runtime import NonFiniteLossError, Policy, Runtime, check_finite
from rlsweep.seeds import SeedStack
from rlsweep.timing import PHASES, PhaseTimer
from rlsweep.update import Update

__all__ = [
    "PHASES",
    "AlgoConfig",
    "ConfigError",
    "Algorithm",
    "NonFiniteLossError",
    "PhaseTimer",
    "Policy",
    "ReplayBuffer",
    "Runtime",
    "SeedBuffers",
    "SeedStack",
    "TrainConfig",
    "Update",
    "check_finite",
    "finished_episodes",
    "hyper_parameter_errors",
    "layer_init",
    "mlp",
    "replay_buffer",
]
