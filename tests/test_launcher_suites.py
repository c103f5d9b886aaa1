"""rlsweep's launchers against Hydra's own launcher test suites, as the upstream submitit plugin is tested.

``LauncherTestSuite`` composes Hydra's test configs in this process and launches through the
launcher under test (sweeps of 1 and 2 jobs, config groups, bad keys, resolvers, job names, job
folders); ``IntegrationTestSuite`` writes small Hydra apps and runs them as processes with ``-m``
(custom task names, sweep folders, ``get_original_cwd``, ``to_absolute_path``). The launcher under
test is rlsweep's, by its own names (``rlsweep_basic``, ``rlsweep_local``), which any Hydra app may use; the
plain names stay Hydra's and the plugin's for every app but rlsweep's. The Slurm launcher runs the same
suites against the local cluster in tests/slurm/.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT
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


@pytest.mark.parametrize("launcher_name, overrides", [("rlsweep_basic", [])])
class TestBasicLauncher(LauncherTestSuite):
    """rlsweep's (seed-major) basic launcher, as any Hydra app may name it."""


@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/launcher=rlsweep_basic", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled"])])
class TestBasicLauncherIntegration(IntegrationTestSuite):
    pass


# each job is a process of its own (seconds): the slow tier
@pytest.mark.slow
@pytest.mark.parametrize("launcher_name, overrides", [
    ("rlsweep_local", ["hydra.launcher.timeout_min=2"]),
    ("rlsweep_local", ["hydra.launcher.timeout_min=2", "hydra.launcher.max_parallel=1"]),
])
class TestSubmititLocalLauncher(LauncherTestSuite):
    pass


@pytest.mark.slow
@pytest.mark.parametrize("task_launcher_cfg, extra_flags", [
    ({}, ["-m", "hydra/hydra_logging=disabled", "hydra/job_logging=disabled", "hydra/launcher=rlsweep_local",
          "hydra.launcher.gpus_per_node=0", "hydra.launcher.timeout_min=1", "hydra.launcher.max_parallel=1"])])
class TestSubmititLocalLauncherIntegration(IntegrationTestSuite):
    pass


FIVE_LINE_APP = """
import hydra
from hydra.core.hydra_config import HydraConfig
@hydra.main(version_base=None, config_path=None)
def main(cfg): print(HydraConfig.get().launcher._target_, HydraConfig.get().sweeper._target_)
main()
"""


@pytest.mark.parametrize("launcher, expected", [
    ([], "hydra._internal.core_plugins.basic_launcher.BasicLauncher"),
    (["hydra/launcher=submitit_local"], "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"),
    (["hydra/launcher=submitit_slurm"], "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"),
    (["hydra/launcher=rlsweep_local"], "hydra_plugins.rlsweep_launcher.rlsweep_launcher.LocalLauncher"),
])
def test_another_hydra_app_keeps_hydras_and_the_plugins_launchers(tmp_path: Path, launcher: list[str],
                                                                  expected: str) -> None:
    """rlsweep installed beside a five-line Hydra app changes nothing for it; rlsweep's launchers are there
    by their own names for an app that asks."""
    (tmp_path / "app.py").write_text(FIVE_LINE_APP)
    proc = subprocess.run([sys.executable, "app.py", *launcher, "hydra.run.dir=out"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == [expected, "hydra._internal.core_plugins.basic_sweeper.BasicSweeper"]


def test_rlsweeps_app_reads_the_plain_names_as_its_own_launchers() -> None:
    """The card's command (``hydra/launcher=submitit_slurm``) still gets rlsweep's Slurm launcher."""
    own = "hydra_plugins.rlsweep_launcher.rlsweep_launcher."
    for given, cls in ((None, "BasicLauncher"), ("basic", "BasicLauncher"), ("submitit_local", "LocalLauncher"),
                       ("submitit_slurm", "SlurmLauncher"), ("slurm_cpu", "SlurmLauncher")):
        proc = subprocess.run([sys.executable, "-m", "sweeps.train", "--cfg", "hydra", "--package", "hydra.launcher",
                               *([f"hydra/launcher={given}"] if given else [])], cwd=ROOT, capture_output=True,
                              text=True, timeout=120, check=False)
        assert proc.returncode == 0 and f"_target_: {own}{cls}" in proc.stdout, (given, proc.stdout + proc.stderr)
