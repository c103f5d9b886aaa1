"""``compile``: torch.compile with the chosen mode on the acting forward and/or the update step."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from rlsweep.toggles.base import Toggle

if TYPE_CHECKING:
    import torch

    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime

COMPILE_MODES = ("none", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
#: the functions an algorithm hands to ``rt.compile``: its acting forward and its gradient step
COMPILED_FUNCTIONS = ("act", "update")
_CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


@dataclass
class CompileConfig:
    """torch.compile settings (mode "none" = eager)."""

    mode: str = "none"
    fullgraph: bool = False  # fail on graph breaks instead of splitting
    dynamic: Optional[bool] = False  # False: specialise shapes (sizes are fixed in RL loops)
    # which of the algorithm's functions to compile: the acting forward ("act", once per env step)
    # and/or the gradient step ("update"); on a CPU a compiled call can cost more than a tiny
    # eager forward, so compiling only the update is often fastest there
    functions: list[str] = field(default_factory=lambda: list(COMPILED_FUNCTIONS))
    # inductor's C++ wrapper: the compiled graph calls its kernels from C++ instead of one Python
    # call per kernel (a real share of a small network's step); compiling takes longer
    cpp_wrapper: bool = False
    # UNSAFE, opt-in: once the warm-up iterations have compiled everything, dynamo stops checking
    # its guards on each call (torch.compiler.set_stance(skip_guard_eval_unsafe=True)). Right only
    # when nothing a guard checks changes after warm-up: shapes, dtypes, modules (true of
    # rlsweep's algorithms); a change would then run the old graph instead of recompiling
    skip_guards_after_warmup: bool = False
    # where inductor keeps what it compiled (FX graphs, AOT-autograd graphs, built kernels), so a
    # later job reuses it instead of compiling again. null: $TORCHINDUCTOR_CACHE_DIR when set, else
    # rlsweep's folder in the user's cache directory ($XDG_CACHE_HOME or ~/.cache), which a
    # cluster's nodes share over the home file system (torch's own default, /tmp, starts cold on
    # every node). A sweep may keep its own: compile.cache_dir=${hydra:sweep.dir}/compile_cache
    cache_dir: Optional[str] = None


def compile_cache_dir(configured: str | None, environ: dict[str, str] | None = None) -> str:
    """The folder inductor's caches use for a job: the config's, else TORCHINDUCTOR_CACHE_DIR, else rlsweep's."""
    env = os.environ if environ is None else environ
    if configured:
        return str(Path(configured).expanduser().resolve())
    if env.get("TORCHINDUCTOR_CACHE_DIR"):
        return env["TORCHINDUCTOR_CACHE_DIR"]
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return str(Path(base) / "rlsweep" / "torch_compile")


class CompileToggle(Toggle):
    name = "compile"
    schema = CompileConfig
    key = "compile.mode"
    values = COMPILE_MODES
    off_value = "none"
    on = ("compile=default",)
    doc = "torch.compile with that mode on the acting forward (act) and/or the whole update step (update)"

    def validate(self, cfg: TrainConfig) -> list[str]:
        errors = super().validate(cfg)
        c = cfg.compile
        if c.mode == "none":
            why = {"fullgraph": "fullgraph only means something when compiling",
                   "dynamic": "dynamic shapes only mean something when compiling",
                   "cpp_wrapper": "the C++ wrapper is part of a compiled graph (choose a compile mode, e.g. "
                                  "compile=default)",
                   "skip_guards_after_warmup": "there are no compiled guards to skip (choose a compile mode, e.g. "
                                               "compile=default)"}
            errors += [f"compile.{key}=true conflicts with compile=none: {reason}"
                       for key, reason in why.items() if getattr(c, key)]
        unknown = [f for f in c.functions if f not in COMPILED_FUNCTIONS]
        if unknown or not c.functions or len(set(c.functions)) != len(c.functions):
            errors.append(f"compile.functions must be a non-empty list of distinct names from "
                          f"{list(COMPILED_FUNCTIONS)}, got {list(c.functions)}")
        return errors

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
        # inductor reads the variable whenever it opens its caches (and sets it itself on first use)
        self._cache_env = os.environ.get("TORCHINDUCTOR_CACHE_DIR")
        rt.compile_cache_dir = os.environ["TORCHINDUCTOR_CACHE_DIR"] = compile_cache_dir(cfg.compile.cache_dir)

    def restore(self) -> None:
        # compiled code of one job must not serve (or count toward) the next in-process job;
        # torch is already loaded here (a job ran), so this import costs nothing
        import torch

        torch._dynamo.reset()
        if hasattr(self, "_cache_env"):
            if self._cache_env is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = self._cache_env

