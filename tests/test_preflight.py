"""Pre-flight of a large sweep: jobs that differ only in ``seed`` share one composition and validation.

What must not change with the sharing: a bad value in any one job still ends the command with that
job's message before anything runs, and a shared job's config (compared with the finished record
of a resumed sweep) is the one its own composition gives.
"""

from __future__ import annotations

import dataclasses
import json
import traceback
from pathlib import Path

import pytest
from helpers import CONF, compose_cfg, run_train
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from rlsweep import hydra_callbacks as hc
from rlsweep.algos import to_object
from rlsweep.config import TrainConfig, config_values, register_configs
from rlsweep.launchers import own_nodes
from rlsweep.validate import validate

BASE = ["prepare=false", "experiment=smoke", "eval_episodes=0", "warmup_iters=0", "logger.mode=disabled", "progress=false"]


@pytest.fixture
def sweep_config():
    """The sweep's config as ``on_multirun_start`` gets it (with its ``hydra`` node)."""
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        yield hydra_compose(config_name="config", overrides=BASE, return_hydra_config=True)


@pytest.fixture
def composed(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The override lists the pre-flight composes with Hydra, in order."""
    calls: list[list[str]] = []
    real = hc._compose

    def counting(config, overrides):
        calls.append(list(overrides))
        return real(config, overrides)

    monkeypatch.setattr(hc, "_compose", counting)
    return calls


def _refused(sweep_config, sweep: list[list[str]], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exc:
        hc._check_jobs(sweep_config, sweep, check_device=True)
    assert exc.value.code == 2
    return capsys.readouterr().err


def test_the_seeds_of_a_cell_are_composed_once(sweep_config, composed: list[list[str]]) -> None:
    sweep = [[*BASE, f"algo.lr={lr}", f"seed={s}"] for lr in ("0.001", "0.01") for s in range(40)]
    jobs = hc._check_jobs(sweep_config, sweep, check_device=True)
    assert composed == [sweep[0], sweep[40]]
    assert [job.overrides for job in jobs] == sweep
    assert [job.config()["seed"] for job in jobs] == [*range(40), *range(40)]
    assert {job.config()["algo"]["lr"] for job in jobs[40:]} == {0.01}


def test_a_shared_job_has_the_config_of_its_own_composition(sweep_config) -> None:
    sweep = [[*BASE, f"seed={s}"] for s in (3, 7, 4294967295)]
    jobs = hc._check_jobs(sweep_config, sweep, check_device=True)
    assert [job.seed for job in jobs] == [None, 7, 4294967295]  # the last two shared the first's composition
    for job in jobs:
        own = hc._compose(sweep_config, job.overrides)
        assert job.config() == config_values(to_object(own))
        # the typed config's values are Hydra's resolved config, key for key and in order: the records
        # a job wrote before it recorded config_values compare equal, and resume keeps them
        resolved = OmegaConf.to_container(OmegaConf.masked_copy(own, [k for k in own if k != "hydra"]), resolve=True)
        assert json.dumps(job.config()) == json.dumps(resolved)


@pytest.mark.parametrize(("bad", "message"), [
    ("4294967296", "seed must be in [0, 4294967295], got 4294967296"),
    ("-1", "seed must be in [0, 4294967295], got -1"),
    ("abc", "Value 'abc' of type 'str' could not be converted to Integer"),
    ("1.5", "Value '1.5' of type 'float' could not be converted to Integer"),
])
def test_a_bad_seed_deep_in_a_cell_gets_its_own_message(sweep_config, composed: list[list[str]],
                                                        capsys: pytest.CaptureFixture[str], bad: str,
                                                        message: str) -> None:
    seeds = [str(s) for s in range(30)]
    seeds[23] = bad
    err = _refused(sweep_config, [[*BASE, f"seed={s}"] for s in seeds], capsys)
    assert err.count(message) == 1, err
    assert f"(job with overrides: {' '.join(BASE)} seed={bad})" in err
    assert len(composed) == 2  # the cell once; the bad job on its own, for its message
    assert "Nothing was run." in err


def test_a_bad_value_in_one_cell_of_many(sweep_config, composed: list[list[str]],
                                         capsys: pytest.CaptureFixture[str]) -> None:
    sweep = [[*BASE, f"algo.lr={lr}", f"seed={s}"] for lr in ("0.001", "0.01", "-1") for s in range(20)]
    err = _refused(sweep_config, sweep, capsys)
    assert err.count("algo.lr must be > 0, got -1.0") == 1, err
    assert f"{' '.join(BASE)} algo.lr=-1 seed=0)" in err  # the cell's first job
    assert len(composed) == 3


def test_a_config_that_reads_the_seed_checks_every_job_on_its_own(sweep_config, composed: list[list[str]],
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """``total_env_steps=${seed}``: seed 0 leaves no budget, which only that job's own config shows."""
    sweep = [[*BASE, "total_env_steps=${seed}", f"seed={s}"] for s in (5, 6, 0, 7)]
    err = _refused(sweep_config, sweep, capsys)
    assert err.count("total_env_steps must be > 0, got 0") == 1, err
    assert "seed=0)" in err
    assert len(composed) == 3


def test_an_unusual_seed_override_is_not_split_off() -> None:
    assert hc._without_seed(["a=1", "seed=3", "b=2"]) == (("a=1", "b=2"), "seed=3")
    for overrides in (["+seed=3"], ["++seed=3"], ["seed=1", "seed=2"], ["seeds=1"], ["algo.seed=1"]):
        assert hc._without_seed(overrides) == (tuple(overrides), None)


def test_a_glob_sweep_expands_to_its_groups_options_as_hydras_sweeper_does(sweep_config) -> None:
    """``glob(...)`` lists a config group's options, which only Hydra's config loader knows: without it the
    pre-flight refused every glob sweep (``ConfigLoader is not set``) that Hydra's BasicSweeper runs."""
    from omegaconf import open_dict, read_write

    with read_write(sweep_config), open_dict(sweep_config):
        sweep_config.hydra.overrides.task = ["env=glob(cart*)", "seed=0,1"]
    assert hc._expand_sweep(sweep_config) == [["env=cartpole", "seed=0"], ["env=cartpole", "seed=1"]]


def test_the_sweeper_composes_only_the_jobs_the_preflight_did_not_check(sweep_config,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """Hydra's sweeper composes every job once more before launching (~0.15 s a job); rlsweep's skips the checked ones."""
    from hydra._internal.callbacks import Callbacks
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper as HydraBasicSweeper
    from hydra.types import HydraContext

    from hydra_plugins.rlsweep_launcher.rlsweep_launcher import BasicSweeper

    assert sweep_config.hydra.sweeper._target_ == f"{BasicSweeper.__module__}.BasicSweeper"
    composed: list[list[str]] = []
    monkeypatch.setattr(HydraBasicSweeper, "validate_batch_is_legal", lambda self, batch: composed.extend(batch))
    callback = hc.RLSweepCallback()
    callback.session.checked_jobs.update({("seed=0",), ("seed=1",)})
    sweeper = BasicSweeper(max_batch_size=None)
    sweeper.hydra_context = HydraContext(config_loader=None, callbacks=Callbacks())  # Hydra's, as its setup sets it
    sweeper.hydra_context.callbacks.callbacks.append(callback)
    sweeper.validate_batch_is_legal([["seed=0"], ["seed=1"], ["seed=2"]])
    assert composed == [["seed=2"]]


@pytest.mark.parametrize("algo", ["ppo", "dqn", "sac"])
def test_validation_reads_the_seed_only_in_seed_errors(algo: str) -> None:
    """What lets a sweep's jobs that differ only in seed share their validation."""
    cfg = compose_cfg([f"algo={algo}", *(["env=pendulum"] if algo == "sac" else [])])
    reads: list[str] = []

    class Watched(TrainConfig):
        def __getattribute__(self, name: str):
            if name == "seed":
                reads.append(traceback.extract_stack(limit=2)[0].line or "")
            return super().__getattribute__(name)

    watched = Watched(**{f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)})
    assert validate(watched, check_device=True) == []
    assert reads == ["errors += seed_errors(cfg.seed)"]


# ---------------------------------------------------------------------------------------------- the CLI


def _sweep(*args: str, sweep: Path) -> list[str]:
    return ["-m", *BASE, "total_env_steps=256", *args, f"hydra.sweep.dir={sweep}"]


@pytest.mark.slow
def test_a_bad_seed_in_the_last_of_201_jobs_stops_the_sweep_before_it_starts(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    proc = run_train(_sweep("seed=range(4294967096,4294967297)", sweep=sweep), timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("seed must be in [0, 4294967295], got 4294967296") == 1, proc.stderr[-3000:]
    assert "seed=4294967296)" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not sweep.exists()


@pytest.mark.slow
def test_a_resumed_200_job_sweep_compares_each_finished_job_with_its_own_config(tmp_path: Path) -> None:
    """Job 150's record matches (its config from its own composition); job 170's is another run's."""
    sweep = tmp_path / "sweep"
    register_configs()
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        for num, seed in ((150, 150), (170, 9999)):
            cfg = hydra_compose(config_name="config", overrides=[*BASE, "total_env_steps=256", f"seed={seed}"],
                                return_hydra_config=True)
            (sweep / str(num)).mkdir(parents=True)
            (sweep / str(num) / "result.json").write_text(json.dumps(
                {"status": "ok", "config": config_values(to_object(cfg)), "overrides": [f"seed={seed}"]}))
    proc = run_train(_sweep("seed=range(200)", "resume=true", sweep=sweep), timeout=600)
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count("holds a finished job with another config") == 1, proc.stderr[-3000:]
    assert "job 170 (" in proc.stderr and " experiment=smoke " in proc.stderr and " seed=170 " in proc.stderr
    assert "job 150" not in proc.stderr
    assert sorted(p.name for p in sweep.iterdir()) == ["150", "170"]


@pytest.mark.parametrize(("launcher", "device", "gpus", "cuda_here", "refused"), [
    ("submitit_local", "cuda", None, True, True),
    ("submitit_local", "cuda:1", 1, True, True),  # CUDA_VISIBLE_DEVICES=0: no cuda:1 in the job
    ("submitit_local", "auto", None, True, True),  # would train on the CPU without a word
    ("submitit_local", "cuda", 1, True, False),
    ("submitit_local", "auto", None, False, False),
    ("submitit_local", "cpu", None, True, False),
    ("basic", "cuda", None, True, False),  # the job is this process: it sees what this one sees
])
def test_a_submitit_local_job_is_not_sent_to_a_gpu_it_cannot_see(monkeypatch, launcher, device, gpus, cuda_here,
                                                                   refused) -> None:
    # submitit's local executor sets each job's CUDA_VISIBLE_DEVICES to its gpus_per_node GPUs (none
    # by default): on the GPU machine every device=cuda job failed inside its process, recordless
    import torch

    register_configs()
    GlobalHydra.instance().clear()
    over = own_nodes([*BASE, f"hydra/launcher={launcher}", f"device={device}"])  # as rlsweep's command line reads it
    if gpus is not None:
        over.append(f"hydra.launcher.gpus_per_node={gpus}")
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        config = hydra_compose(config_name="config", overrides=over, return_hydra_config=True)
    GlobalHydra.instance().clear()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda_here)
    error = hc._local_gpu_error(config, config)
    assert (error is not None) == refused, error
    if refused:
        assert "hydra.launcher.gpus_per_node=" in error and "device=cpu" in error
