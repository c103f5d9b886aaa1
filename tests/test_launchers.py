"""Local sweeps: at most ``max_parallel`` jobs at once (default: CPUs // threads per job), seed-major order."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest
from helpers import CONF, run_train
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_class

from rlsweep.config import register_configs
from rlsweep.launchers import default_max_parallel, job_threads, own_nodes, seed_major_order
from rlsweep.records import read_result
from rlsweep.toggles.backend import usable_cpus


@pytest.mark.parametrize(("cpus", "threads", "expected"), [
    (2, 1, 2), (16, 1, 16), (16, 4, 4), (16, 5, 3), (2, 2, 1), (2, 8, 1), (1, 1, 1), (8, 0, 8),
])
def test_default_max_parallel_is_the_cpus_over_each_jobs_threads(cpus: int, threads: int, expected: int) -> None:
    assert default_max_parallel(cpus, threads) == expected


def test_a_jobs_threads_come_from_its_override_else_the_sweeps_config_else_its_environment() -> None:
    local = {"SUBMITIT_EXECUTOR": "local"}
    assert job_threads(["seed=0"], None, local) == 1  # submitit_local's default: 1 per job
    assert job_threads(["seed=0"], None, {**local, "RLSWEEP_CPUS_PER_JOB": "3"}) == 3
    assert job_threads(["seed=0"], 2, {**local, "RLSWEEP_CPUS_PER_JOB": "3"}) == 2
    assert job_threads(["backend.num_threads=4"], 2, local) == 4
    assert job_threads(["+backend.num_threads=null"], 2, local) == 1


def test_jobs_run_seed_major_the_cells_order_alternating_from_seed_to_seed() -> None:
    """Whatever favours a round's first job (a cooler core, a cache) falls on each cell in turn."""
    jobs = [[f"compile={c}", f"seed={s}"] for c in ("none", "default") for s in (0, 1, 2)]
    order = seed_major_order(jobs)
    cells = [("none", "default"), ("default", "none"), ("none", "default")]
    assert [jobs[i] for i in order] == [[f"compile={c}", f"seed={s}"] for s in (0, 1, 2) for c in cells[s]]
    assert seed_major_order([["seed=1", "x=a"], ["seed=0", "x=a"], ["seed=1", "x=b"]]) == [0, 2, 1]  # listed order
    assert seed_major_order([["x=a"], ["x=b"], ["x=c"]]) == [0, 1, 2]  # no seed: as the sweep lists them


def test_seeds_trained_together_run_in_the_round_of_their_middle_seed() -> None:
    """``seeds_per_job=1,4 seed=0,1,2,3``: the four seeds trained in one process run amid the single-seed
    jobs they are compared against (in seed 1's round), not all before them; the report reads it so."""
    from hydra_plugins.rlsweep_launcher.rlsweep_launcher import _leaders_in_order
    from rlsweep.launchers import round_member, seed_groups

    jobs = [[f"seeds_per_job={n}", f"seed={s}"] for n in (4, 1) for s in range(4)]
    groups = seed_groups(jobs, 1)
    assert groups == [[0, 1, 2, 3], [4], [5], [6], [7]]
    # the group in seed 1's round (its cells' order reversed there), not seed 0's: [0, 4, 5, 6, 7] before
    assert _leaders_in_order(groups, jobs) == [4, 5, 0, 6, 7]
    assert [round_member(list(range(n))) for n in (1, 2, 4, 8)] == [0, 0, 1, 3]


def _launcher(*overrides: str):
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", overrides=own_nodes(["hydra/launcher=submitit_local", *overrides]),
                      return_hydra_config=True)
    params = {k: v for k, v in cfg.hydra.launcher.items() if k != "_target_"}
    launcher = get_class(cfg.hydra.launcher._target_)(**params)
    launcher.config = cfg
    return launcher


def test_submitit_local_is_rlsweeps_launcher_with_a_default_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLSWEEP_CPUS_PER_JOB", raising=False)
    for var in ("SLURM_CPUS_PER_TASK", "SLURM_CPUS_ON_NODE"):
        monkeypatch.delenv(var, raising=False)
    launcher = _launcher()
    assert type(launcher).__module__ == "hydra_plugins.rlsweep_launcher.rlsweep_launcher"
    assert type(launcher).__name__ == "LocalLauncher"  # what the sweep's wait for local jobs looks for
    assert launcher._limit([["seed=0"], ["seed=1"]])[0] == usable_cpus()
    assert launcher._limit([["seed=0"], ["seed=1", "backend.num_threads=2"]])[0] == max(1, usable_cpus() // 2)
    assert _launcher("backend.num_threads=64")._limit([["seed=0"]])[0] == 1
    assert _launcher("hydra.launcher.max_parallel=3")._limit([["seed=0"]])[0] == 3


def test_hydras_basic_launcher_is_rlsweeps_seed_major_one() -> None:
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        cfg = compose(config_name="config", return_hydra_config=True)
    assert cfg.hydra.launcher._target_ == "hydra_plugins.rlsweep_launcher.rlsweep_launcher.BasicLauncher"


def _at(stamp: str) -> dt.datetime:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00"))


@pytest.mark.slow  # a real sweep / measurement (tens of seconds): the slow tier
def test_a_local_sweep_runs_at_most_max_parallel_jobs_at_once_seed_major(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "experiment=smoke", "total_env_steps=512", "logger.mode=disabled", "progress=false",
                      "twin_modules=false,true", "seed=0,1", "hydra/launcher=submitit_local",
                      "hydra.launcher.max_parallel=2", "hydra.launcher.timeout_min=10", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [read_result(sweep / str(i)) for i in range(4)]
    assert all(r["status"] == "ok" for r in records)
    for r in records:  # what the report needs to tell overlapping jobs apart
        assert r["job"]["max_parallel"] == 2 and r["job"]["launcher"] == "LocalLauncher"
        assert r["job"]["hostname"] == r["fingerprint"]["hostname"]
        assert r["fingerprint"]["cpu_count"] >= r["fingerprint"]["usable_cpus"] >= 1
        assert r["fingerprint"]["num_threads"] == 1
    spans = [(_at(r["started_at"]), _at(r["finished_at"])) for r in records]
    running_at_each_start = [sum(s <= start < e for s, e in spans) for start, _ in spans]
    assert max(running_at_each_start) == 2, running_at_each_start
    # seed-major: no seed-1 job starts before a seed-0 job has finished
    seed0 = [span for span, r in zip(spans, records) if r["seed"] == 0]
    seed1 = [span for span, r in zip(spans, records) if r["seed"] == 1]
    assert min(s for s, _ in seed1) >= min(e for _, e in seed0)
    assert (sweep / "report" / "report.json").is_file()
