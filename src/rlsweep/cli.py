"""Glue for the entry points in ``sweeps/`` (kept out of them so they stay thin)."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger(__name__)


@contextlib.contextmanager
def finish_sweep() -> Iterator[None]:
    """After a multirun -- also one whose jobs failed -- write the comparison report.

    Hydra skips ``on_multirun_end`` when a job failed, so the report runs here, around the whole
    Hydra main, from the sweep folder the callback recorded at ``on_multirun_start``.
    """
    from rlsweep.hydra_callbacks import LAST_SWEEP_DIR

    try:
        yield
    finally:
        if LAST_SWEEP_DIR and Path(LAST_SWEEP_DIR[0]).is_dir():
            try:
                from rlsweep.report import main as report_main

                report_main([LAST_SWEEP_DIR[0]])
            except Exception as exc:  # noqa: BLE001 - the sweep's results are on disk either way
                print(f"rlsweep: the sweep report failed ({type(exc).__name__}: {exc}); "
                      f"run `python -m sweeps.report {LAST_SWEEP_DIR[0]}`", file=sys.stderr)
