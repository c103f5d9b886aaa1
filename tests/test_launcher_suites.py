"""rlsweep's launchers against Hydra's own launcher test suites, as the upstream submitit plugin is tested.

``LauncherTestSuite`` composes Hydra's test configs in this process and launches through the
launcher under test (sweeps of 1 and 2 jobs, config groups, bad keys, resolvers, job names, job
folders); ``IntegrationTestSuite`` writes small Hydra apps and runs them as processes with ``-m``
(custom task names, sweep folders, ``get_original_cwd``, ``to_absolute_path``). The launcher under
test is rlsweep's: its config nodes replace Hydra's ``basic`` and the plugin's ``submitit_local``.
The Slurm launcher runs the same suites against the local cluster in tests/slurm/.
"""

from __future__ import annotations

import pytest
from hydra.core.plugins import Plugins
from hydra.plugins.launcher import Launcher
from hydra.test_utils.launcher_common_tests import IntegrationTestSuite, LauncherTestSuite

from hydra_plugins.rlsweep_launcher import rlsweep_launcher

# Hydra's test apps and configs name no version_base, so Hydra warns that their jobs change directory
pytestmark = [pytest.mark.filterwarnings("ignore:Future Hydra versions will no longer change working directory"),
              pytest.mark.usefixtures("hydra_version_base_unset")]


@pytest.mark.parametrize("cls", [rlsweep_launcher.LocalLauncher, rlsweep_launcher.BasicLauncher,
                                 rlsweep_launcher.SlurmLauncher])
def test_hydra_discovers_the_launchers(cls: type) -> None:
    # by name: Hydra's scan runs the module again, so its classes are other objects of the same name
    assert (cls.__module__, cls.__name__) in {(c.__module__, c.__name__) for c in Plugins.instance().discover(Launcher)}


@pytest.mark.parametrize("launcher_name, overrides", [("basic", [])])
class TestBasicLauncher(LauncherTestSuite):
    """Hydra's ``basic`` launcher node runs rlsweep's (seed-major) basic launcher."""


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/launcher=basic", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled"])])
class TestBasicLauncherIntegration(IntegrationTestSuite):
    pass


# each job is a process of its own (seconds): the slow tier
@pytest.mark.slow
@pytest.mark.parametrize("launcher_name, overrides", [
    ("submitit_local", ["hydra.launcher.timeout_min=2"]),
    ("submitit_local", ["hydra.launcher.timeout_min=2", "hydra.launcher.max_parallel=1"]),
])
class TestSubmititLocalLauncher(LauncherTestSuite):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled", "hydra/launcher=submitit_local",
          "hydra.launcher.gpus_per_node=0", "hydra.launcher.timeout_min=1", "hydra.launcher.max_parallel=1"])])
class TestSubmititLocalLauncherIntegration(IntegrationTestSuite):
    pass
