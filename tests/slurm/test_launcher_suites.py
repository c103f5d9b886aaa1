"""rlsweep's Slurm launcher against Hydra's own launcher test suites, on the local cluster.

As the upstream submitit plugin runs them for its launchers: ``LauncherTestSuite`` (sweeps composed
in this process, each job an array task of the real cluster) and ``IntegrationTestSuite`` (small
Hydra apps run as processes with ``-m``). ``rlsweep_slurm`` is rlsweep's node (it writes the
sweep's job manifest; ``wait`` stays true: the suites read every job's return value), which any Hydra app
may name; rlsweep's own app runs it for ``submitit_slurm`` too.
"""

from __future__ import annotations

import pytest
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

pytestmark = pytest.mark.usefixtures("slurm_cluster", "hydra_version_base_unset")

# a limit well above a job's seconds: USR2 (checkpoint + requeue) comes signal_delay_s (90 s) before it
SLURM = ["hydra.launcher.timeout_min=10", "hydra.launcher.partition=debug"]


@pytest.mark.parametrize("launcher_name, overrides", [("rlsweep_slurm", SLURM)])
class TestSlurmLauncher(LauncherTestSuite):
    pass


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled", "hydra/launcher=rlsweep_slurm",
          "hydra.launcher.gpus_per_node=0", *SLURM])])
class TestSlurmLauncherIntegration(IntegrationTestSuite):
    pass
