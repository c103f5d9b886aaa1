"""Train one RL job, or a sweep of them with ``-m``.

    python -m sweeps.train                                    # one run, defaults (PPO, CartPole)
    python -m sweeps.train -m compile=none,default twin_modules=false,true
    python -m sweeps.train -m compile=default,max-autotune hydra/launcher=submitit_slurm
    python -m sweeps.train -m ... hydra.sweep.dir=<the sweep's folder> resume=true   # continue a sweep

Each job writes <job dir>/result.json and a W&B run (offline by default); a multirun ends with
the comparison report in <sweep dir>/report/. RLSWEEP_DEBUG=1 shows tracebacks of bad input.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from rlsweep.cli import train_entry
from rlsweep.config import register_configs

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    # imported here: a typo in the command line is reported before torch is loaded
    from rlsweep.job import format_summary, train_job

    print(format_summary(train_job(cfg)), flush=True)


if __name__ == "__main__":
    with train_entry():
        main()
