"""The Hydra main of ``python -m sweeps.train`` and ``rlsweep-train``: one training job.

It lives in the package, not in ``sweeps/``, so that the console script of an installed rlsweep
runs the same function with the same configs (:data:`rlsweep.resources.CONF_DIR`) from any folder.
The module's name is Hydra's job name (``hydra.job.name``: ``train``; each job logs to ``train.log``).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from rlsweep.config import register_configs
from rlsweep.resources import CONF_DIR

if __name__ != "__main__":  # run as a script, this module is imported again below, and registers then
    register_configs()


@hydra.main(version_base="1.3", config_path=str(CONF_DIR), config_name="config")
def main(cfg: DictConfig) -> float | None:
    """One job; returns its objective for Hydra's sweeper (``objective.metric``, None below the guard)."""
    # imported here: a typo in the command line is reported before torch is loaded
    from rlsweep.job import format_summary, train_job

    record = train_job(cfg)
    print(format_summary(record), flush=True)
    return record["objective"]["value"]


if __name__ == "__main__":  # python -m rlsweep.train: what the bench runs, from a checkout or an installed wheel
    from rlsweep.cli import train_entry
    from rlsweep.train import main as registered_main  # this module under its own name: its import registers

    with train_entry():
        registered_main()
