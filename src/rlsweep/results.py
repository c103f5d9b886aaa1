"""What a result record says about where and with which code a job ran (its files: :mod:`rlsweep.records`)."""

from __future__ import annotations

import contextlib
import inspect
import os
import platform
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlsweep.toggles.backend import usable_cpus

if TYPE_CHECKING:
    import torch


def utc_now(timespec: str = "milliseconds") -> str:
    """UTC, ISO 8601, to the millisecond by default: the report orders jobs and finds overlapping ones by these."""
    import datetime as dt

    return dt.datetime.now(dt.timezone.utc).isoformat(timespec=timespec).replace("+00:00", "Z")


def process_age_s() -> float | None:
    """Seconds since this process started (Linux's /proc; None elsewhere): its interpreter, imports and so on."""
    try:
        with open("/proc/self/stat", encoding="utf-8") as f:
            ticks = int(f.read().rpartition(")")[2].split()[19])  # field 22, starttime, after the command's name
        with open("/proc/uptime", encoding="utf-8") as f:
            uptime = float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return round(uptime - ticks / os.sysconf("SC_CLK_TCK"), 3)


def _cpu_model() -> str:
    line = ""
    with contextlib.suppress(OSError), open("/proc/cpuinfo", encoding="utf-8") as f:
        line = next((line for line in f if line.startswith("model name")), "")
    return line.split(":", 1)[1].strip() if line else platform.processor() or platform.machine()


def fingerprint(device: torch.device | None = None) -> dict[str, Any]:
    """Hardware/software identity: ratios are only meaningful between equal fingerprints."""
    import torch  # here: the report and the launching process import this module (utc_now) without torch

    gpu = None
    if torch.cuda.is_available():
        idx = device.index if device is not None and device.type == "cuda" and device.index is not None else 0
        gpu = torch.cuda.get_device_name(idx)
    return {
        "cpu_model": _cpu_model(),
        "cpu_count": os.cpu_count(),  # the host's logical CPUs
        "usable_cpus": usable_cpus(),  # of which this job's process may run on (affinity: taskset, Slurm)
        "num_threads": torch.get_num_threads(),
        "gpu": gpu,
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "hostname": socket.gethostname(),
    }


def git_state(path: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The git commit and dirty flag of the work tree holding ``path``; None outside git (or without git)."""
    import subprocess

    folder = Path(path)
    folder = folder if folder.is_dir() else folder.parent
    try:
        top = subprocess.run(["git", "-C", str(folder), "rev-parse", "--show-toplevel", "HEAD"],
                             capture_output=True, text=True, timeout=10, check=True).stdout.split()
        # tracked files only: untracked scratch (outputs/, wandb/) does not make the code dirty
        status = subprocess.run(["git", "-C", top[0], "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=10, check=True).stdout
    except (OSError, subprocess.SubprocessError, IndexError):
        return None
    return {"repo": top[0], "commit": top[1], "dirty": bool(status.strip())}


def _version(dist: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return None


#: the packages whose version decides what a job measures (the report compares jobs across them)
VERSIONED = ("rlsweep", "torch", "gymnasium", "numpy", "hydra-core", "wandb", "submitit", "ale-py")


def _inside_work_tree(path: Path, top: str) -> bool:
    """Whether git would place ``path`` in the work tree ``top`` (under it, no nearer ``.git``), without
    the two git processes of asking; with GIT_DIR or GIT_WORK_TREE set: no, ask git."""
    if "GIT_DIR" in os.environ or "GIT_WORK_TREE" in os.environ:
        return False
    folder = path if path.is_dir() else path.parent
    root = Path(top)
    if folder != root and root not in folder.parents:
        return False
    while folder != root:
        if (folder / ".git").exists():  # a nested repository or submodule: its own work tree
            return False
        folder = folder.parent
    return True


def source_file(cls: type) -> str | None:
    """The file a class was defined in; None for one without (defined in an interactive session)."""
    try:
        return inspect.getsourcefile(cls)
    except TypeError:
        return None


def provenance(algorithm: type | str | os.PathLike[str] | None = None) -> dict[str, Any]:
    """Which code ran: rlsweep's git state, the algorithm's (its class, or its source file) when it lives in
    another repository, versions."""
    if isinstance(algorithm, type):
        algorithm = source_file(algorithm)
    code = {"rlsweep": git_state(Path(__file__).resolve())}
    if algorithm is not None and not (
            code["rlsweep"] is not None and _inside_work_tree(Path(algorithm).resolve(), code["rlsweep"]["repo"])):
        algo = git_state(Path(algorithm).resolve())
        if algo is not None and (code["rlsweep"] is None or algo["repo"] != code["rlsweep"]["repo"]):
            code["algorithm"] = algo
    return {"code": code, "versions": {name: _version(name) for name in VERSIONED}}
