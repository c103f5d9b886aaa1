"""Where every job of a sweep stands: pending, running (with progress), requeued, ok, failed, ...

Usage:
    python -m sweeps.status <sweep_dir> [--json] [--no-slurm]

Reads the jobs' records and, for a Slurm sweep, Slurm's accounting (sacct). Exit status 0 when
every job is ok, 1 when all finished but some did not end ok, 2 for bad input, 3 while jobs are
still pending, running or requeued. See :mod:`rlsweep.status`.
"""

from __future__ import annotations

import sys

from rlsweep.status import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
