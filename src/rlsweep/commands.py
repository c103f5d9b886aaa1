"""The console scripts of an installed rlsweep; ``python -m sweeps.<name>`` runs the same functions.

    rlsweep-train  ...                 # = python -m sweeps.train ...   (Hydra: -m, --help, -sc install=bash)
    rlsweep-report <sweep_dir> ...     # = python -m sweeps.report ...
    rlsweep-status <sweep_dir> ...     # = python -m sweeps.status ...

Each returns the exit status (pip's console-script wrapper passes it to ``sys.exit``).
"""

from __future__ import annotations

import sys


def train() -> None:
    """One job, or a sweep with ``-m``: Hydra's command line (see :mod:`rlsweep.train` and :func:`rlsweep.cli.train_entry`)."""
    from rlsweep.cli import train_entry
    from rlsweep.config import register_configs

    imported_before = "rlsweep.train" in sys.modules
    from rlsweep.train import main  # a first import registers the configs (tens of ms per call)

    if imported_before:
        register_configs()  # again: a caller may have cleared Hydra's ConfigStore since that import
    with train_entry():
        main()


def report() -> int:
    """The comparison report of a sweep folder (see :mod:`rlsweep.report`)."""
    from rlsweep.report import main

    return main(sys.argv[1:])


def status() -> int:
    """Where every job of a sweep stands (see :mod:`rlsweep.status`)."""
    from rlsweep.status import main

    return main(sys.argv[1:])

