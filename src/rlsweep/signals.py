"""Stop requests (preemption, timeout, Ctrl-C) turned into a checkpoint at an iteration boundary.

Signal handlers only set a flag; the training loop checks it after every iteration, writes the
checkpoint, and then either hands the signal to submitit (which requeues the job) or raises
:class:`Interrupted`. Saving inside the handler itself could catch an iteration half done.

- Under submitit (Slurm or local executor): SIGUSR2, submitit's timeout/preemption signal, is
  chained to submitit's own handler after the checkpoint; SIGTERM stays with submitit.
- Elsewhere: SIGINT and SIGTERM stop the job with a checkpoint and an ``interrupted`` record;
  a second Ctrl-C stops at once.
"""

from __future__ import annotations

import os
import signal
import threading
from types import FrameType
from typing import Any


class Interrupted(Exception):
    """The job was asked to stop; its checkpoint is written."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}; checkpoint written")


def under_submitit() -> bool:
    return bool(os.environ.get("SUBMITIT_EXECUTOR"))


class StopSignals:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._previous: dict[int, Any] = {}

    def _handler(self, signum: int, frame: FrameType | None) -> None:
        if self.signum == signal.SIGINT and signum == signal.SIGINT:
            raise KeyboardInterrupt  # second Ctrl-C: stop now
        self.signum = signum

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return  # signals can only be handled in the main thread
        sigs = [signal.SIGUSR2] if under_submitit() else [signal.SIGINT, signal.SIGTERM]
        for sig in sigs:
            self._previous[sig] = signal.signal(sig, self._handler)

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
