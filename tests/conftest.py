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


#: the modules that take longest (seconds in the slow tier's --durations, 2026-12-05: bench 793, prepare 724, the
#: learning tests 463-569, the Slurm sweeps 482 and chaos 372), run first: pytest-xdist's --dist loadscope hands a
#: module to one worker whole, in collection order, so a long module collected last kept one worker busy for
#: minutes while the other had nothing left (CI's slow tier ended so, ~25 minutes on one worker)
LONGEST_FIRST = ("test_bench.py", "test_prepare.py", "algos/test_sac.py", "algos/test_dqn.py", "slurm/test_sweeps.py",
                 "algos/test_td3.py", "slurm/test_chaos.py", "test_gpu_check.py", "toggles/test_compile.py",
                 "test_fuzz_cli.py")
_TESTS = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ARG001 - pytest's hook signature
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}

    def order(item) -> int:
        path = Path(str(item.path)).resolve()
        return rank.get(path.relative_to(_TESTS).as_posix(), len(rank)) if _TESTS in path.parents else len(rank)

    items[:] = sorted(items, key=order)  # stable: the other modules, and each module's tests, keep their order


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
