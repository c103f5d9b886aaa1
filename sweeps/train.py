"""Train one RL job, or a sweep of them with ``-m``.

    python -m sweeps.train                                    # one run, defaults (PPO, CartPole)
    python -m sweeps.train -m compile=none,default twin_modules=false,true
    python -m sweeps.train -m compile=default,max-autotune hydra/launcher=submitit_slurm
    python -m sweeps.train -m ... hydra.sweep.dir=<the sweep's folder> resume=true   # continue a sweep

Each job writes <job dir>/result.json and a W&B run (offline by default); a multirun ends with
the comparison report in <sweep dir>/report/. The task returns the job's objective (default:
steady-state env steps/s), so an optimizing sweeper can search: hydra/sweeper=optuna (the
``optuna`` extra). RLSWEEP_DEBUG=1 shows tracebacks of bad input.
"""

from __future__ import annotations

from rlsweep.commands import train

if __name__ == "__main__":
    # the Hydra main is rlsweep.train.main (shared with the rlsweep-train console script)
    train()
