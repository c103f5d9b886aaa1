"""Stop requests (preemption, timeout, Ctrl-C) turned into a checkpoint at an iteration boundary.

Signal handlers only set a flag, which the training loop checks after every iteration: it writes the
checkpoint, then hands submitit's SIGUSR2 to submitit (a requeue) or raises :class:`Interrupted`.
Outside Slurm, SIGINT and SIGTERM stop the job so too; a second Ctrl-C stops at once.

Also the rest of a job process's life cycle that is not training: its garbage collector at start-up,
between a sweep's jobs and at exit.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import os
import signal
import threading
from collections.abc import Iterator
from pathlib import Path
from types import FrameType
from typing import Any

#: written in a sweep folder by its stopped launcher (submitit_local): a job process that starts
#: after the stop, or was starting when the stop signal came, sees it and does not train
STOP_MARKER = ".rlsweep-stop"


class Interrupted(Exception):
    """The job was asked to stop; its checkpoint is written."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}; checkpoint written")


def under_submitit() -> bool:
    return bool(os.environ.get("SUBMITIT_EXECUTOR"))


def stop_signals() -> list[int]:
    """The signals that ask this process's job to stop with a checkpoint."""
    if not under_submitit():
        return [signal.SIGINT, signal.SIGTERM]
    if os.environ.get("SUBMITIT_EXECUTOR") == "local":  # a process of this machine, started by the sweep's launcher
        return [signal.SIGUSR2, signal.SIGINT, signal.SIGTERM]
    return [signal.SIGUSR2]


class StopSignals:
    """SIGINT/SIGTERM while a training loop runs: noted, so the loop stops after its iteration with a checkpoint."""

    def __init__(self) -> None:
        self.signum: int | None = None
        self._seen: set[int] = set()
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT and signum in self._seen:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        self._seen.add(signum)
        # the first request names the stop: a Ctrl-C in a terminal reaches a local submitit job
        # directly and again as the SIGTERM its launcher forwards
        if self.signum is None:
            self.signum = signum

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals can only be handled in the main thread
        for sig in stop_signals():
            self._previous[sig] = signal.signal(sig, self._handler)
        if _EARLY.signum is not None:  # asked to stop before this loop ran: stop at its first iteration boundary
            self.signum = _EARLY.signum
            self._seen |= _EARLY._seen

    def uninstall(self) -> None:
        for sig, prev in self._previous.items():
            signal.signal(sig, prev)
        self._previous.clear()

    def act(self) -> None:
        """After the checkpoint is written: requeue through submitit, or raise Interrupted."""
        assert self.signum is not None
        signum = self.signum
        previous = self._previous.get(signum)
        self.uninstall()
        if under_submitit() and signum == signal.SIGUSR2 and callable(previous):
            previous(signum, None)  # submitit: checkpoint the job function, requeue, exit
        raise Interrupted(signum)


#: stop signals a local submitit job received before its training loop took over: the loop stops
#: at its first iteration boundary (a signal is process-wide state, so this is too)
_EARLY = StopSignals()


def stop_before_training(stop_marker: Path) -> None:
    """In a job process of submitit's local executor, before the job's own code runs: from here on
    SIGINT and SIGTERM are remembered (not ignored, as submitit would), so that the training loop
    stops at its first checkpoint and a job not yet training does not start (:func:`stop_requested`).
    A job of a sweep whose launcher wrote ``stop_marker`` before signalling counts as stopped by SIGTERM.
    """
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, _EARLY._handler)
        signal.signal(signal.SIGTERM, _EARLY._handler)
    if stop_marker.exists() and _EARLY.signum is None:
        _EARLY._handler(signal.SIGTERM, None)


def stop_requested() -> int | None:
    """The first stop signal this process got before its training loop ran (see :func:`stop_before_training`)."""
    return _EARLY.signum


@functools.cache  # once per process
def skip_final_gc_at_exit() -> None:
    """At interpreter exit, skip the last garbage collection over the whole heap torch and Hydra leave
    (``gc.freeze``): the other atexit callbacks still run; only finalizers of unreachable cycles do
    not, which Python does not promise at exit either and rlsweep does not rely on."""
    import atexit

    atexit.register(gc.freeze)


#: collection_deferred's state: "deferred" (the collector off, training not begun), "frozen" (resumed on a frozen heap)
_DEFERRAL = [""]


@contextlib.contextmanager
def collection_deferred() -> Iterator[None]:
    """Around the job of a process rlsweep started (a run's command, a launcher's job process, a cold run):
    no cyclic garbage collection until training begins (:func:`resume_collection`); as before after the block.
    Start-up's heap (imports, one composition, the set-up, dynamo) lives as long as the job: collecting over
    it found a few MB and cost ~10% of a warm PPO process (docs/results/sweep_cost.md). Not where a sweep
    launches: its pre-flight and preparation compose every cell (~1.3 MB of cycles each)."""
    if not gc.isenabled():  # the caller's choice
        yield
        return
    gc.disable()
    _DEFERRAL[0] = "deferred"
    try:
        yield
    finally:
        if _DEFERRAL[0] == "deferred":
            gc.enable()
        elif _DEFERRAL[0] == "frozen":
            gc.unfreeze()
        _DEFERRAL[0] = ""


def resume_collection() -> None:
    """Where training begins, inside :func:`collection_deferred`: start-up's heap frozen (out of every later
    collection's way) until the block ends, collection back on."""
    if _DEFERRAL[0] == "deferred":
        _DEFERRAL[0] = "frozen"
        gc.freeze()
        gc.enable()


@contextlib.contextmanager
def frozen_heap() -> Iterator[None]:
    """Around the jobs a sweep runs in its launching process (the basic launcher): its heap (~0.5 M objects
    once torch, inductor and W&B are loaded) frozen after one last collection, so the collection each job makes
    before its clock (:func:`rlsweep.job.train_job`) takes milliseconds, not ~0.25 s; unfrozen after."""
    if gc.get_freeze_count():  # frozen by someone else: theirs to undo
        yield
        return
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
