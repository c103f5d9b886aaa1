"""``backend.*``: TF32 matmul precision, the cuDNN autotuner and intra-op threads.

These are process-global PyTorch settings: they are set for the job and restored afterwards, so
jobs that the basic launcher runs one after another in one process do not inherit them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional

from rlsweep.toggles.base import Toggle, choice_errors, text

if TYPE_CHECKING:
    import torch

    from rlsweep.config import TrainConfig
    from rlsweep.runtime import Runtime

MATMUL_PRECISIONS = ("highest", "high", "medium")


@dataclass
class BackendConfig:
    """Global PyTorch backend switches (set for the job, restored afterwards)."""

    matmul_precision: str = "highest"  # highest | high (TF32) | medium
    cudnn_benchmark: bool = False  # cuDNN autotuner
    num_threads: Optional[int] = None  # intra-op threads; None: the CPUs this job was given
    channels_last: bool = False  # conv models in NHWC memory format: a toggle of its own (toggles/channels_last.py)


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity mask; taskset, cgroups and Slurm restrict it)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


def default_num_threads(environ: Mapping[str, str] | None = None) -> int:
    """The CPUs this job was given (read from ``environ``, default: this process's environment).

    Slurm: ``--cpus-per-task``, else the CPUs allocated on the node. submitit_local runs a sweep's jobs
    side by side, as many as there are CPUs, so each gets 1. Otherwise the process's affinity mask.
    """
    env = os.environ if environ is None else environ
    for var in ("RLSWEEP_CPUS_PER_JOB", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        if env.get(var, "").isdigit():
            return max(1, int(env[var]))
    if env.get("SUBMITIT_EXECUTOR") == "local":
        return 1
    return usable_cpus()


class BackendToggle(Toggle):
    """``backend.*``: intra-op threads, matmul precision, cuDNN benchmark; set for the job, restored after."""

    name = "backend"
    schema = BackendConfig
    off_value = {"matmul_precision": "highest", "cudnn_benchmark": False}
    on = ("backend.num_threads=1", "backend.matmul_precision=high")

    def __init__(self) -> None:
        self._saved: tuple[str, bool, int] | None = None

    def value(self, cfg: TrainConfig) -> Any:
        b = cfg.backend
        threads = b.num_threads if b.num_threads is not None else default_num_threads()
        return {"matmul_precision": b.matmul_precision, "cudnn_benchmark": b.cudnn_benchmark, "num_threads": threads}

    def validate(self, cfg: TrainConfig) -> list[str]:
        b = cfg.backend
        errors = choice_errors("backend.matmul_precision", b.matmul_precision, MATMUL_PRECISIONS)
        if b.num_threads is not None and b.num_threads <= 0:
            errors.append(f"backend.num_threads must be > 0 (or null for the job's CPUs), got {b.num_threads}")
        if cfg.deterministic and b.cudnn_benchmark:
            errors.append("deterministic=true conflicts with backend.cudnn_benchmark=true: the cuDNN autotuner picks "
                          "algorithms by timing, which is not deterministic; drop one of them")
        return errors

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if device.type != "cuda" and (cfg.backend.matmul_precision != "highest" or cfg.backend.cudnn_benchmark):
            return "partly not applicable: TF32 and the cuDNN autotuner act on CUDA only; threads set"
        return None

    @staticmethod
    def _set(matmul_precision: str, cudnn_benchmark: bool, num_threads: int) -> None:
        import torch

        torch.set_float32_matmul_precision(matmul_precision)
        torch.backends.cudnn.benchmark = cudnn_benchmark
        torch.set_num_threads(num_threads)

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        import torch

        self._saved = (torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark, torch.get_num_threads())
        self._set(**self.value(cfg))

    def restore(self) -> None:
        if self._saved is not None:
            self._set(*self._saved)
            self._saved = None

    # the thread count is the machine's, not a switch: names, tags and baselines leave it out
    def _switches(self, value: Any) -> dict[str, Any]:
        return {k: v for k, v in value.items() if k in self.off_value and v != self.off_value[k]}

    def is_on(self, value: Any) -> bool:
        return bool(self._switches(value))

    def fragment(self, value: Any) -> str | None:
        return "-".join(f"{k}={text(v)}" for k, v in self._switches(value).items()) or None

    def tags(self, value: Any) -> list[str]:
        return [f"backend.{k}={text(v)}" for k, v in value.items() if k in self.off_value]

    @classmethod
    def baseline(cls) -> dict[str, Any]:
        return {f"backend.{k}": v for k, v in cls.off_value.items()}
