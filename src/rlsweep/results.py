"""The per-job result record: built by the runner, written atomically, read back by the report."""

from __future__ import annotations

import json
import math
import os
import platform
import socket
import tempfile
from pathlib import Path
from typing import Any

import torch

from rlsweep.launchers import usable_cpus

SCHEMA_VERSION = 1
RESULT_FILE = "result.json"


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def fingerprint(device: torch.device | None = None) -> dict[str, Any]:
    """Hardware/software identity: ratios are only meaningful between equal fingerprints."""
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


def _jsonable(value: Any) -> Any:
    """Replace non-finite floats (invalid JSON) by None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    return value


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temp file in the same folder, fsync and rename (all or nothing)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        umask = os.umask(0)
        os.umask(umask)
        os.fchmod(fd, 0o666 & ~umask)  # mkstemp's 0600 would hide results from other users
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    """Write JSON to ``path`` atomically (see :func:`write_bytes_atomic`)."""
    text = json.dumps(_jsonable(data), indent=2, allow_nan=False)
    write_bytes_atomic(path, text.encode("utf-8"))


def write_result(output_dir: Path, record: dict[str, Any]) -> Path:
    path = Path(output_dir) / RESULT_FILE
    write_json_atomic(path, {"schema_version": SCHEMA_VERSION, **record})
    return path


def read_result(output_dir: Path) -> dict[str, Any]:
    with open(Path(output_dir) / RESULT_FILE, encoding="utf-8") as f:
        return json.load(f)
