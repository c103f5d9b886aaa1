"""Fixtures for tests against the local Slurm cluster started by slurm/local_cluster.sh.

Every test under tests/slurm is marked `slurm`: deselect them with `-m "not slurm"`.
Without a running cluster they are skipped, unless RLSWEEP_REQUIRE_SLURM=1 (CI), which turns the
skip into a failure.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
CLUSTER_SCRIPT = REPO_ROOT / "slurm" / "local_cluster.sh"
HERE = Path(__file__).resolve().parent
SKIP_REASON = 'local Slurm cluster not running: eval "$(slurm/local_cluster.sh up)"'


@dataclasses.dataclass(frozen=True)
class SlurmCluster:
    state_dir: Path
    slurm_conf: Path
    partition: str = "debug"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.slurm)


def _status() -> tuple[bool, str]:
    try:
        proc = subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "status"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, f"{CLUSTER_SCRIPT} status failed: {exc!r}"
    return proc.returncode == 0, (proc.stdout + proc.stderr).strip()


@pytest.fixture(scope="session")
def slurm_cluster() -> SlurmCluster:
    """The running local cluster; exports SLURM_CONF for the whole session."""
    state_dir = Path(os.environ.get("RLSWEEP_SLURM_DIR", "/tmp/rlsweep-slurm"))
    slurm_conf = state_dir / "etc" / "slurm.conf"
    up, report = _status()
    if not up or not slurm_conf.is_file():
        if os.environ.get("RLSWEEP_REQUIRE_SLURM") == "1":
            pytest.fail(
                "RLSWEEP_REQUIRE_SLURM=1 but the local Slurm cluster is not up "
                f"(state dir {state_dir}). Start it with: "
                'eval "$(slurm/local_cluster.sh up)"\n' + report,
                pytrace=False,
            )
        pytest.skip(SKIP_REASON)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SLURM_CONF", str(slurm_conf))
        yield SlurmCluster(state_dir=state_dir, slurm_conf=slurm_conf)
