from __future__ import annotations

import inspect
import os
import re
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


#: what trains, runs a sweep, compiles or benchmarks: a test that reaches one of these (itself, through a
#: function or fixture of the test suite or of rlsweep.testing) is not a unit test
_TRAINS = re.compile(r"\b(run_train|train|train_seeds|train_job|observe|initial_parameters|run_until_warm|cold_run"
                     r"|prepare_sweep|assert_seeds_together_are_seeds_alone)\(|\btorch\.compile\b|sweeps\.(train|bench)"
                     r"|\.compile\(|\btorch\._inductor\b|\bsubprocess\.|\bbenchmarks\b")
#: where the functions a test reaches are followed into
_TEST_LAND = ("tests", "helpers", "conftest", "rlsweep.testing")


def _reaches_training(fn, seen: dict) -> bool:
    """Whether ``fn``'s source, or a function of the test suite it names, reaches what trains."""
    fn = getattr(fn, "__func__", fn)
    if fn in seen:
        return seen[fn]
    seen[fn] = False  # a recursion ends here
    try:
        source = inspect.getsource(fn)
    except (OSError, TypeError):
        return False
    if _TRAINS.search(source):
        seen[fn] = True
        return True
    scope = {**vars(sys.modules.get(fn.__module__, object())), **getattr(fn, "__globals__", {})}
    owner = scope.get(fn.__qualname__.split(".")[0]) if "." in fn.__qualname__ else None
    for name in set(re.findall(r"\b([A-Za-z_]\w*)\b", source)):
        target = scope.get(name, getattr(owner, name, None) if owner is not None else None)
        if target is not None and not inspect.ismodule(target) and callable(target):
            home = getattr(target, "__module__", "") or ""
            if (home.startswith(_TEST_LAND) or home == fn.__module__) and _reaches_training(target, seen):
                seen[fn] = True
                return True
    return False


def _is_unit(item, seen: dict) -> bool:
    """No training, sweep, compile or benchmark in the test, what it calls or its fixtures (a static reading)."""
    fn = getattr(item, "function", None)
    if fn is None:
        return False
    cls = getattr(item, "cls", None)
    if cls is not None and any(_reaches_training(getattr(cls, n), seen) for n in dir(cls)
                               if n.startswith("_") and not n.startswith("__") and callable(getattr(cls, n))):
        return False  # a contract class's private helpers train (self._observed, ...)
    if _reaches_training(fn, seen):
        return False
    defs = item._fixtureinfo.name2fixturedefs if hasattr(item, "_fixtureinfo") else {}
    return not any(_reaches_training(d.func, seen) for fixture_defs in defs.values() for d in fixture_defs)


def pytest_collection_modifyitems(config, items) -> None:
    if "unit" in (config.option.markexpr or ""):  # the inner loop's tier, python -m pytest -m unit: read only then
        seen: dict = {}
        for item in items:
            if _is_unit(item, seen):
                item.add_marker(pytest.mark.unit)
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
