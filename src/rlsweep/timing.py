"""Phase timers: honest per-phase wall times, device-synchronised on CUDA, warm-up excluded.

Usage in a hot loop (two calls per phase, no context manager)::

    t = timer.start()
    ...work...
    timer.stop("act", t)

and ``t = timer.lap("h2d", t)`` between phases that follow each other directly.

Samples are recorded only while ``timer.recording`` is true (the runner switches it on after the
warm-up iterations). On CUDA every boundary synchronises the device, so a phase's time is the
device work it launched, not just the Python time to enqueue it.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

PHASES = ("env_step", "act", "h2d", "d2h", "update")


class PhaseTimer:
    def __init__(self, device: torch.device, phases: tuple[str, ...] = PHASES) -> None:
        self.samples: dict[str, list[float]] = {p: [] for p in phases}
        self.recording = False
        self._sync = torch.cuda.synchronize if device.type == "cuda" else None

    def start(self) -> float:
        if self._sync is not None:
            self._sync()
        return time.perf_counter()

    def stop(self, phase: str, t0: float) -> float:
        if self._sync is not None:
            self._sync()
        dt = time.perf_counter() - t0
        if self.recording:
            self.samples[phase].append(dt)
        return dt

    def lap(self, phase: str, t0: float) -> float:
        """``stop(phase, t0)`` and the next phase's ``start()`` at one clock reading (back-to-back phases)."""
        if self._sync is not None:
            self._sync()
        t = time.perf_counter()
        if self.recording:
            self.samples[phase].append(t - t0)
        return t

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per phase: median, p10, p90 in milliseconds, sample count and total seconds."""
        out: dict[str, dict[str, Any]] = {}
        for phase, values in self.samples.items():
            if not values:
                out[phase] = {"median_ms": None, "p10_ms": None, "p90_ms": None, "count": 0, "total_s": 0.0}
                continue
            a = np.asarray(values) * 1e3
            p10, med, p90 = np.percentile(a, [10, 50, 90])
            out[phase] = {
                "median_ms": round(float(med), 6),
                "p10_ms": round(float(p10), 6),
                "p90_ms": round(float(p90), 6),
                "count": len(values),
                "total_s": round(float(a.sum() / 1e3), 6),
            }
        return out

    def state_dict(self) -> dict[str, Any]:
        return {"samples": {k: list(v) for k, v in self.samples.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for k, v in state["samples"].items():
            self.samples[k] = list(v)
