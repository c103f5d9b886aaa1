"""rlsweep's public API: what an algorithm -- built-in or your own -- is written against.

An algorithm is a subclass of :class:`Algorithm` in your own package, named by ``_target_`` in a
YAML file of your own config directory; its hyper-parameters are a dataclass subclassing
:class:`AlgoConfig` (``config_class``). Every toggle reaches your code through the
:class:`Runtime` you are handed (``self.rt``), and every phase you time with ``self.timer`` shows up
in the result record, W&B and the report. See docs/plugins.md for a walk-through, and
``examples/td3/`` for a complete algorithm written only against this module.

Names here are stable; everything else in rlsweep is internal and may change.
"""

from __future__ import annotations

from rlsweep.algos.base import Algorithm, NonFiniteLossError, check_finite
from rlsweep.algos.functional import AdamState, adam_state, adam_step_, clip_grad_norm, functional_forward
from rlsweep.buffers import ReplayBuffer
from rlsweep.config import AlgoConfig, ConfigError, TrainConfig
from rlsweep.envs import finished_episodes
from rlsweep.nets import layer_init, mlp
from rlsweep.runtime import Runtime
from rlsweep.timing import PHASES, PhaseTimer

__all__ = [
    "PHASES",
    "AdamState",
    "AlgoConfig",
    "ConfigError",
    "Algorithm",
    "NonFiniteLossError",
    "PhaseTimer",
    "ReplayBuffer",
    "Runtime",
    "TrainConfig",
    "adam_state",
    "adam_step_",
    "check_finite",
    "clip_grad_norm",
    "finished_episodes",
    "functional_forward",
    "layer_init",
    "mlp",
]
