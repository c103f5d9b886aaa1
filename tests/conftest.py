from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

# tests import their helpers module as `helpers`
sys.path.insert(0, str(Path(__file__).resolve().parent))

# Everything a test run writes to the temporary folder -- pytest's tmp_path folders, the jobs' and
# wandb's scratch files, submitit's, inductor's compile cache -- goes to one folder of this session
# (also in the jobs it starts: TMPDIR is inherited), removed when the session ends: the suite
# leaves nothing behind. Compiles therefore start cold in every session, as on a fresh machine.
_SCRATCH = Path(tempfile.mkdtemp(prefix="rlsweep-tests-"))
os.environ["TMPDIR"] = tempfile.tempdir = str(_SCRATCH)
# compile.cache_dir's default is the user's cache folder (shared by a cluster's nodes); tests keep
# theirs in the scratch folder, as torch's default would: honoured by rlsweep like the config's
os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(_SCRATCH / "torchinductor")


def pytest_sessionfinish(session, exitstatus) -> None:  # noqa: ARG001 - pytest's hook signature
    shutil.rmtree(_SCRATCH, ignore_errors=True)


@pytest.fixture
def hydra_version_base_unset():
    """The suites' apps name no version_base: Hydra's 1.1 defaults (a job changes directory).

    The version base is process-global in Hydra; an earlier in-process app (version_base="1.3", as
    sweeps.train) would leave jobs in the launching folder and fail the suites' folder checks.
    """
    from hydra.core.singleton import Singleton
    from hydra.version import VersionBase

    saved = Singleton._instances.pop(VersionBase, None)
    yield
    if saved is None:
        Singleton._instances.pop(VersionBase, None)
    else:
        Singleton._instances[VersionBase] = saved
