"""``compile``: torch.compile with the chosen mode on the acting forward and/or the update step."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import threading
from collections.abc import Mapping
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
    # its guards on each call (torch.compiler.set_stance(skip_guard_eval_unsafe=True)), and a function
    # compiled once and whole runs dynamo's code for it without dynamo's frame hook
    # (CompileStats.calling_directly). Right only when nothing a guard checks changes after warm-up:
    # shapes, dtypes, modules (true of rlsweep's algorithms); a change would then run the old graph
    skip_guards_after_warmup: bool = False
    # where inductor keeps what it compiled, so a later job reuses it. null: $TORCHINDUCTOR_CACHE_DIR
    # when the user set it before starting, else rlsweep_cache_dir(). A sweep may keep its own:
    # compile.cache_dir=${hydra:sweep.dir}/compile_cache
    cache_dir: Optional[str] = None


#: TORCHINDUCTOR_CACHE_DIR at rlsweep's first import: inductor later sets it to its own /tmp default,
#: which the environment alone cannot tell from the user's choice
_CACHE_ENV_AT_IMPORT = os.environ.get("TORCHINDUCTOR_CACHE_DIR")


def rlsweep_cache_dir(environ: Mapping[str, str] | None = None) -> str:
    """rlsweep's compile cache: in the user's cache folder ($XDG_CACHE_HOME or ~/.cache), which a
    cluster's nodes share over the home file system (torch's own default, /tmp, starts cold on every node)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_CACHE_HOME") or str(Path("~/.cache").expanduser())
    return str(Path(base) / "rlsweep" / "torch_compile")


def _set_by_torch(value: str) -> bool:
    """Whether ``value`` of TORCHINDUCTOR_CACHE_DIR is inductor's own default, set by inductor in
    this process (or in the process that started it) rather than by the user before starting."""
    if value == _CACHE_ENV_AT_IMPORT:
        return False
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    return os.path.abspath(value) == os.path.abspath(default_cache_dir())


def compile_cache_dir(configured: str | None, environ: Mapping[str, str] | None = None) -> str:
    """The folder inductor's caches use for a job: the config's, else TORCHINDUCTOR_CACHE_DIR as the
    user set it, else rlsweep's (:func:`rlsweep_cache_dir`)."""
    env = os.environ if environ is None else environ
    if configured:
        return str(Path(configured).expanduser().resolve())
    value = env.get("TORCHINDUCTOR_CACHE_DIR")
    if value and not _set_by_torch(value):
        return value
    return rlsweep_cache_dir(env)


def claim_cache_env() -> None:
    """Set TORCHINDUCTOR_CACHE_DIR to rlsweep's folder when the user has not set it, before anything
    compiles: inductor then never falls back to /tmp in this process, in its compile workers, or in
    the job processes a launcher starts from it (they inherit the environment)."""
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = compile_cache_dir(None)


#: the folder, inside the compile cache, of rlsweep's verdicts on inductor's CPU vector-ISA probe
VEC_ISA_DIR = "rlsweep_vec_isa"


def vec_isa_key() -> str:
    """What inductor's vector-ISA probe depends on: the CPU's flags, the C++ compiler and torch's build."""
    import torch
    from torch._inductor import cpp_builder

    flags = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo") as f:
        flags = next((line for line in f if line.startswith(("flags", "Features"))), "")
    compiler = cpp_builder.get_cpp_compiler()
    with contextlib.suppress(OSError):
        st = Path(compiler).resolve().stat()
        compiler += f" {st.st_size} {st.st_mtime_ns}"
    blob = "\n".join((platform.machine(), " ".join(sorted(flags.split())), compiler, torch.__version__,
                      str(torch.version.git_version)))
    return hashlib.sha256(blob.encode()).hexdigest()[:32]


def prepare_vec_isa(cache_dir: str) -> str:
    """Settle which CPU vector ISAs inductor may use, once per machine kind instead of once per job.

    Inductor's probe builds and loads a test kernel per vector ISA before the first CPU kernel
    (docs/results/compile.md). Its verdict depends only on the CPU, the compiler and torch, so when
    every ISA the CPU reports passed, it is kept beside the compile cache and later jobs with the
    same key trust the CPU's flags; a probe that rejected one leaves no verdict. Leaves no setting changed.

    Returns:
        "user" (``TORCHINDUCTOR_VEC_ISA_OK`` is set: nothing done), "cached" (a verdict is there) or
        "probed" (torch's probe ran; inductor caches its answer for the process).
    """
    from torch._inductor import config as inductor_config
    from torch._inductor import cpu_vec_isa

    if inductor_config.cpp.vec_isa_ok is not None:
        return "user"
    verdict = Path(cache_dir) / VEC_ISA_DIR / f"{vec_isa_key()}.json"
    try:
        cached = json.loads(verdict.read_text()).get("all_reported_isas_usable") is True
    except (OSError, ValueError):
        cached = False
    if cached:
        # trusted, inductor still builds and loads a kernel for some sub-features (AVX-512 VNNI, BF16):
        # here, off the compiling thread; its process-wide caches then answer the compile
        with inductor_config.patch("cpp.vec_isa_ok", True):
            cpu_vec_isa.valid_vec_isa_list()
        return "cached"
    probed = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list()]  # torch's probe: builds and loads
    # the list trusting the CPU's flags alone (uncached: valid_vec_isa_list caches the probed one)
    with inductor_config.patch("cpp.vec_isa_ok", True):
        reported = [str(isa) for isa in cpu_vec_isa.valid_vec_isa_list.__wrapped__()]
    if reported and sorted(probed) == sorted(reported):
        from rlsweep.records import write_json_atomic

        write_json_atomic(verdict, {"all_reported_isas_usable": True, "isas": reported})
    return "probed"


def _import_probe_modules() -> None:
    """Import, in the calling thread, every module the probe would import in its own: setuptools (via
    ``torch.utils.cpp_extension``) adds and removes a ``sys.meta_path`` finder, which can make an
    import running at the same time in the job's thread fail."""
    import torch._inductor.codecache
    import torch._inductor.config
    import torch._inductor.cpp_builder
    import torch._inductor.cpu_vec_isa
    import torch.utils.cpp_extension  # noqa: F401 -- setuptools, and its import-machinery hooks

    import rlsweep.records  # noqa: F401 -- the verdict's writer


class VecIsaProbe:
    """:func:`prepare_vec_isa` in a background thread, overlapping the job's start-up.

    The first compiled call waits for what is left of it (:meth:`ready`, counted as compile time).
    Its answers reach the compile through inductor's process-wide caches; no setting changes in the
    compiling thread (that would change every compiled graph's cache key).
    """

    def __init__(self, cache_dir: str) -> None:
        self.outcome: str | None = None
        self.error: BaseException | None = None
        _import_probe_modules()
        self._thread = threading.Thread(target=self._run, args=(cache_dir,), name="rlsweep-vec-isa", daemon=True)
        self._thread.start()

    def _run(self, cache_dir: str) -> None:
        try:
            self.outcome = prepare_vec_isa(cache_dir)
        except Exception as e:  # noqa: BLE001 -- inductor then probes by itself, as without rlsweep
            self.error = e

    def ready(self) -> str:
        """Wait for the probe; what happened ("probed", "cached", "user" or why it failed)."""
        self._thread.join()
        return f"probe failed: {self.error!r}" if self.error is not None else str(self.outcome)


class CompileToggle(Toggle):
    """``compile``: torch.compile of the acting forward and the gradient step, in the mode chosen."""

    name = "compile"
    schema = CompileConfig
    key = "compile.mode"
    values = COMPILE_MODES
    off_value = "none"
    on = ("compile=default",)

    def validate(self, cfg: TrainConfig) -> list[str]:
        errors = super().validate(cfg)
        c = cfg.compile
        if c.mode == "none":
            hint = " (choose a compile mode, e.g. compile=default)"
            why = {"fullgraph": "fullgraph only means something when compiling",
                   "dynamic": "dynamic shapes only mean something when compiling",
                   "cpp_wrapper": "the C++ wrapper is part of a compiled graph" + hint,
                   "skip_guards_after_warmup": "there are no compiled guards to skip" + hint}
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
        rt.settings.compile_config = cfg.compile
        cache_dir = compile_cache_dir(cfg.compile.cache_dir)
        # every file inductor writes goes under it, until restore(): TORCHINDUCTOR_CACHE_DIR, and the
        # precompiled C++ headers' folder (cpp_wrapper), which inductor fixes at import, under /tmp
        from torch._inductor import codecache

        self._saved_cache = (os.environ.get("TORCHINDUCTOR_CACHE_DIR"), codecache._HEADER_DIR,
                             codecache._HEADER_LOCK_DIR)
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
        codecache._HEADER_DIR = os.path.join(cache_dir, "precompiled_headers")
        codecache._HEADER_LOCK_DIR = os.path.join(codecache._HEADER_DIR, "locks")
        if rt.device.type == "cpu":  # CPU kernels are C++: settle the vector ISA while the job starts
            rt.settings.compile_vec_isa = self._vec_isa = VecIsaProbe(cache_dir)

    def restore(self) -> None:
        # compiled code of one job must not serve (or count toward) the next in-process job;
        # torch is already loaded here (a job ran), so this import costs nothing
        import torch

        torch._dynamo.reset()
        if (probe := getattr(self, "_vec_isa", None)) is not None:  # not left running into the next job
            probe.ready()
            self._vec_isa = None
        if (saved := getattr(self, "_saved_cache", None)) is not None:
            from torch._inductor import codecache

            self._saved_cache = None
            env, codecache._HEADER_DIR, codecache._HEADER_LOCK_DIR = saved
            if env is None:
                os.environ.pop("TORCHINDUCTOR_CACHE_DIR", None)
            else:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = env

