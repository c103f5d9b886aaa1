"""Phase timers: honest per-phase times that do not change what they measure, warm-up excluded.

``t = timer.start()``, the work, ``timer.stop("act", t)``; ``t = timer.lap("h2d", t)`` between phases
that follow each other. The runner calls ``timer.end_iteration()`` after every iteration and sets
``timer.recording`` after the warm-up. Each phase gets host time (``perf_counter``) and device time:
on CUDA, between CUDA events read after the iteration's one synchronisation (no boundary
synchronises: that would remove the overlap ``non_blocking`` creates); on CPU, the host time.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import torch

from rlsweep.records import PHASES  # also rlsweep.api's PHASES


class CudaEvents:
    """Where a :class:`PhaseTimer` gets its device clock on CUDA (a test may pass a fake with these methods)."""

    def event(self) -> Any:
        """A fresh timing event: ``record()`` on the current stream, ``elapsed_time(end)`` in ms."""
        return torch.cuda.Event(enable_timing=True)

    def synchronize(self) -> None:
        """Wait for all work queued on the device (once per iteration)."""
        torch.cuda.synchronize()


class _Stamp(float):
    """A host clock reading that also carries the device event recorded at the same boundary."""

    event: Any


def _summary(values: list[float]) -> dict[str, Any]:
    if not values:
        return {"median_ms": None, "p10_ms": None, "p90_ms": None, "count": 0, "total_s": 0.0}
    a = np.asarray(values) * 1e3
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return {
        "median_ms": round(float(med), 6),
        "p10_ms": round(float(p10), 6),
        "p90_ms": round(float(p90), 6),
        "count": len(values),
        "total_s": round(float(a.sum() / 1e3), 6),
    }


class PhaseTimer:
    """Per-phase device and host times of the steady-state iterations.

    Args:
        device: The job's device; on CUDA the device clock is CUDA events, elsewhere the host clock.
        events: The device-event source (default: :class:`CudaEvents` on CUDA, none elsewhere).

    Attributes:
        samples: Per phase, the device time of each recorded phase, in seconds (on CPU: host time).
        host_samples: Per phase, the host (``perf_counter``) time of each recorded phase, in seconds.
        recording: Whether phases are recorded now (false during warm-up).
    """

    def __init__(self, device: torch.device, events: CudaEvents | None = None) -> None:
        self.samples: dict[str, list[float]] = {p: [] for p in PHASES}
        self.host_samples: dict[str, list[float]] = {p: [] for p in PHASES}
        self.recording = False
        self._events = events if events is not None else (CudaEvents() if device.type == "cuda" else None)
        self._pending: list[tuple[str, Any, Any]] = []  # (phase, start event, end event) not read yet
        self._free: list[Any] = []  # events read already, reused (creating one costs a driver call)

    def _record(self) -> Any:
        ev = self._free.pop() if self._free else self._events.event()
        ev.record()
        return ev

    def start(self) -> float:
        t = time.perf_counter()
        if self._events is None or not self.recording:
            return t
        stamp = _Stamp(t)
        stamp.event = self._record()
        return stamp

    def stop(self, phase: str, t0: float) -> float:
        end = self._record() if self._events is not None and self.recording else None
        dt = time.perf_counter() - t0
        if self.recording:
            self._add(phase, t0, dt, end)
        return dt

    def lap(self, phase: str, t0: float) -> float:
        """``stop(phase, t0)`` and the next phase's ``start()`` at one clock reading (and one device event)."""
        end = self._record() if self._events is not None and self.recording else None
        t = time.perf_counter()
        if self.recording:
            self._add(phase, t0, t - t0, end)
        if end is None:
            return t
        stamp = _Stamp(t)
        stamp.event = end
        return stamp

    def _add(self, phase: str, t0: float, host_dt: float, end: Any) -> None:
        self.host_samples[phase].append(host_dt)
        if end is None:
            self.samples[phase].append(host_dt)
            return
        begin = getattr(t0, "event", None)
        if begin is None:  # started before recording was switched on: no device time for it
            self._free.append(end)
            self.host_samples[phase].pop()
            return
        self._pending.append((phase, begin, end))

    def end_iteration(self) -> None:
        """The iteration's one synchronisation (CUDA, also during warm-up: the runner's wall time then
        includes the device work), then its device times are read; on CPU a no-op."""
        if self._events is None:
            return
        self._events.synchronize()
        for phase, begin, end in self._pending:
            self.samples[phase].append(begin.elapsed_time(end) / 1e3)
        # each event once: a lap's event ends one phase and begins the next
        self._free.extend({id(ev): ev for _, begin, end in self._pending for ev in (begin, end)}.values())
        self._pending.clear()

    def summary(self) -> dict[str, dict[str, Any]]:
        """Per phase: median, p10, p90 in ms, count and total seconds of the device time (on CPU the
        host time), the same of the host time under ``host_*``, and ``clock``, the device clock used."""
        if self._pending:  # a caller without a runner may not have ended the last iteration
            self.end_iteration()
        out: dict[str, dict[str, Any]] = {}
        for phase, values in self.samples.items():
            entry = _summary(values)
            host = _summary(self.host_samples[phase])
            entry.update({f"host_{k}": v for k, v in host.items() if k != "count"})
            entry["clock"] = "perf_counter" if self._events is None else "cuda_events"
            out[phase] = entry
        return out

    def state_dict(self) -> dict[str, Any]:
        if self._pending:
            self.end_iteration()
        return {"samples": {k: list(v) for k, v in self.samples.items()},
                "host_samples": {k: list(v) for k, v in self.host_samples.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.samples.update({k: list(v) for k, v in state["samples"].items()})
        self.host_samples.update({k: list(v) for k, v in state["host_samples"].items()})
