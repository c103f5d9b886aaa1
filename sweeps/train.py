"""Train one RL job, or a sweep of them with ``-m``.

    python -m sweeps.train                                    # one run, defaults (PPO, CartPole)
    python -m sweeps.train -m compile=none,default twin_modules=false,true
    python -m sweeps.train -m compile=default,max-autotune hydra/launcher=submitit_slurm

Each job writes <job dir>/result.json and a W&B run (offline by default); a multirun ends with
the comparison report in <sweep dir>/report/.
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig

from rlsweep.cli import finish_sweep
from rlsweep.config import register_configs
from rlsweep.job import format_summary, train_job

register_configs()


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def main(cfg: DictConfig) -> None:
    print(format_summary(train_job(cfg)), flush=True)


if __name__ == "__main__":
    with finish_sweep():
        main()
