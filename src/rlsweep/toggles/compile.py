"""``compile``: torch.compile with the chosen mode on the acting forward and/or the update step."""

from __future__ import annotations

from typing import Any

import torch

from rlsweep.config import TrainConfig
from rlsweep.toggles.base import Runtime, Toggle

_CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


class CompileToggle(Toggle):
    name = "compile"
    off_value = "none"

    def value(self, cfg: TrainConfig) -> Any:
        return cfg.compile.mode

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        # The mode still compiles on CPU; only its CUDA-graph part cannot act there.
        if cfg.compile.mode in _CUDA_GRAPH_MODES and device.type != "cuda":
            return (
                f"partly not applicable: CUDA graphs of mode '{cfg.compile.mode}' need a CUDA "
                f"device (device={device.type}); compiled without them"
            )
        return None

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        if cfg.compile.mode == "none":
            return
        rt.compile_mode = cfg.compile.mode
        rt.compile_fullgraph = cfg.compile.fullgraph
        rt.compile_dynamic = cfg.compile.dynamic
        rt.compile_functions = tuple(cfg.compile.functions)
        rt.compile_cpp_wrapper = cfg.compile.cpp_wrapper

    def restore(self) -> None:
        # compiled code of one job must not serve (or count toward) the next in-process job
        torch._dynamo.reset()
