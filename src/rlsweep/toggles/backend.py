"""``backend.*``: TF32 matmul precision, the cuDNN autotuner and intra-op threads.

These are process-global PyTorch settings: they are set for the job and restored afterwards, so
jobs that the basic launcher runs one after another in one process do not inherit them.
"""

from __future__ import annotations

from typing import Any

import torch

from rlsweep.config import TrainConfig
from rlsweep.toggles.base import Runtime, Toggle


def default_num_threads() -> int:
    """The CPUs this job was given.

    Slurm: ``--cpus-per-task`` (else the CPUs allocated on the node). submitit_local starts every job of a sweep at once on the same
    machine, so each gets 1 (threads of side-by-side jobs would fight over the cores).
    Otherwise the process's affinity mask (taskset and cgroups restrict it).
    """
    import os

    # SLURM_CPUS_ON_NODE: what Slurm allocated when no --cpus-per-task was given
    for var in ("RLSWEEP_CPUS_PER_JOB", "SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        if os.environ.get(var, "").isdigit():
            return max(1, int(os.environ[var]))
    if os.environ.get("SUBMITIT_EXECUTOR") == "local":
        return 1
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not Linux
        return max(1, os.cpu_count() or 1)


class BackendToggle(Toggle):
    name = "backend"
    off_value = None  # not a comparison axis by default; the sub-values are

    def __init__(self) -> None:
        self._saved: tuple[str, bool, int] | None = None

    def value(self, cfg: TrainConfig) -> Any:
        b = cfg.backend
        threads = b.num_threads if b.num_threads is not None else default_num_threads()
        return {"matmul_precision": b.matmul_precision, "cudnn_benchmark": b.cudnn_benchmark, "num_threads": threads}

    def not_applicable(self, cfg: TrainConfig, device: torch.device) -> str | None:
        if device.type != "cuda" and (cfg.backend.matmul_precision != "highest" or cfg.backend.cudnn_benchmark):
            return "partly not applicable: TF32 and the cuDNN autotuner act on CUDA only; threads set"
        return None

    def apply(self, rt: Runtime, cfg: TrainConfig) -> None:
        self._saved = (
            torch.get_float32_matmul_precision(),
            torch.backends.cudnn.benchmark,
            torch.get_num_threads(),
        )
        v = self.value(cfg)
        torch.set_float32_matmul_precision(v["matmul_precision"])
        torch.backends.cudnn.benchmark = v["cudnn_benchmark"]
        torch.set_num_threads(v["num_threads"])

    def restore(self) -> None:
        if self._saved is None:
            return
        precision, benchmark, threads = self._saved
        torch.set_float32_matmul_precision(precision)
        torch.backends.cudnn.benchmark = benchmark
        torch.set_num_threads(threads)
        self._saved = None
