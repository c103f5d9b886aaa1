"""seeds_per_job: several seeds trained in one process, their networks stacked (rlsweep.seeds).

What must hold: a seed trained beside others is the seed trained alone (same initial networks,
envs, random streams; its numbers equal within float tolerance), one seed's failure stays its own,
and a sweep writes one record and one W&B run per seed, in each seed's own job folder.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest
import torch
from helpers import COMMON, TINY, read_wandb_run, run_train, tiny_cfg

from rlsweep.launchers import seed_groups
from rlsweep.runner import train, train_seeds
from rlsweep.runtime import Runtime

SEEDS = [3, 4, 5]


def _runtime(seeds: list[int]) -> Runtime:
    rt = Runtime(torch.device("cpu"))
    rt.seed_values = tuple(seeds)
    return rt


@pytest.mark.parametrize("seeds", [[7], [0, 1, 2]])
def test_rows_put_each_seeds_envs_together_and_unrows_undoes_it(seeds: list[int]) -> None:
    rt = _runtime(seeds)
    steps, envs_per_seed = 5, 2
    # value = 100 * seed index + 10 * env + step: where every element came from is readable
    x = torch.tensor([[100 * (e // envs_per_seed) + 10 * (e % envs_per_seed) + t
                       for e in range(envs_per_seed * len(seeds))] for t in range(steps)])
    rows = rt.rows(x.unsqueeze(-1), 1)
    assert rows.shape == (len(seeds) * steps * envs_per_seed, 1)
    for k in range(len(seeds)):  # seed k's rows are one block, in the order a job of that seed alone flattens them
        block = rows[k * steps * envs_per_seed:(k + 1) * steps * envs_per_seed, 0]
        assert block.tolist() == [100 * k + 10 * e + t for t in range(steps) for e in range(envs_per_seed)]
    assert torch.equal(rt.unrows(rows, (steps, envs_per_seed * len(seeds))), x.unsqueeze(-1))
    batch = rt.by_seed(x, 1)
    assert batch.shape == ((steps * envs_per_seed,) if len(seeds) == 1 else (len(seeds), steps * envs_per_seed))


def test_each_seeds_random_stream_is_its_own() -> None:
    """A seed's draws are the same beside any other seeds, and differ from its neighbours'."""
    draw = lambda g: torch.rand(4, generator=g)  # noqa: E731
    alone = _runtime([4]).draw(draw)
    together = _runtime([3, 4, 5]).draw(draw).view(3, 4)
    assert torch.equal(together[1], alone)
    assert not torch.equal(together[0], together[1])


def _params(algo: object, name: str, k: int, seeds: int) -> dict[str, torch.Tensor]:
    module = getattr(algo, name)
    return (module.seed_module(k) if seeds > 1 else module).state_dict()


def test_a_continuous_ppo_seed_trained_beside_others_is_the_seed_trained_alone() -> None:
    """As the algorithm contract checks for every algorithm's own env, for PPO's Gaussian policy (its log
    std, a stacked parameter read outside any network's forward): same episodes, and the same networks
    within float tolerance (the grouped step is vectorised autograd, the single one torch.optim's own)."""
    cfg = tiny_cfg("ppo", "env=pendulum", "total_env_steps=128", "eval_episodes=2")
    together = train_seeds(cfg, SEEDS)
    for k, seed in enumerate(SEEDS):
        alone = train(dataclasses.replace(cfg, seed=seed))
        grouped = together[k]
        assert grouped.group == {"seeds": SEEDS, "index": k} and alone.group is None
        assert grouped.env_steps == alone.env_steps and grouped.updates == alone.updates
        assert grouped.learning["curve"]["episode_return"] == alone.learning["curve"]["episode_return"]
        for name in ("actor", "critic", "std"):
            mine, theirs = _params(together[0].algo, name, k, len(SEEDS)), _params(alone.algo, name, 0, 1)
            for key, value in theirs.items():
                torch.testing.assert_close(mine[key], value, rtol=1e-4, atol=1e-5)
        assert grouped.learning["eval_returns"] == pytest.approx(alone.learning["eval_returns"], rel=1e-3)


def test_a_seed_whose_loss_is_not_finite_stops_alone() -> None:
    """One seed's parameters poisoned after the first iteration: it is recorded failed with the reason,
    the others train on, unaffected (their numbers are those of their runs alone)."""
    cfg = tiny_cfg("ppo", "total_env_steps=192", "eval_episodes=1")
    poisoned = 1

    def hook_for(k: int):  # noqa: ANN202
        def hook(row: dict, env_steps: int) -> None:
            if k == poisoned and env_steps == 64:
                with torch.no_grad():
                    holder[0].actor.stack[0].weight[poisoned].fill_(float("nan"))
        return hook

    holder: list = []
    import rlsweep.runner as runner

    real_loop = runner._loop

    def loop(cfg_, algo, *args, **kwargs):  # noqa: ANN001, ANN202 - the algorithm, reachable from the hook
        holder.append(algo)
        return real_loop(cfg_, algo, *args, **kwargs)

    runner._loop = loop
    try:
        outcomes = train_seeds(cfg, SEEDS, [hook_for(k) for k in range(len(SEEDS))])
    finally:
        runner._loop = real_loop
    assert outcomes[poisoned].failed is not None and "non-finite loss" in outcomes[poisoned].failed
    assert "final_return" not in outcomes[poisoned].learning
    for k in (0, 2):
        assert outcomes[k].failed is None and outcomes[k].learning["final_return"] is not None
        alone = train(dataclasses.replace(cfg, seed=SEEDS[k]))
        assert outcomes[k].learning["curve"]["episode_return"] == alone.learning["curve"]["episode_return"]


def test_a_sweeps_seeds_are_grouped_per_cell_in_the_sweeps_order() -> None:
    jobs = [["compile=none", f"seed={s}"] for s in range(5)] + [["compile=default", f"seed={s}"] for s in range(5)]
    assert seed_groups(jobs, 2) == [[0, 1], [2, 3], [4], [5, 6], [7, 8], [9]]
    assert seed_groups(jobs, 1) == [[i] for i in range(10)]
    # a value given per cell, as a swept toggle is: seeds_per_job=1,3 compares them
    swept = [[f"seeds_per_job={n}", f"seed={s}"] for n in (1, 3) for s in range(3)]
    assert seed_groups(swept, 1) == [[0], [1], [2], [3, 4, 5]]
    assert seed_groups([["lr=1"], ["lr=2"]], 8) == [[0], [1]]  # no seed swept: nothing to group


def test_a_sweep_with_seeds_per_job_writes_each_seeds_record_and_run(tmp_path: Path) -> None:
    """The real entry point: 3 seeds, 2 per job: 2 processes' worth of training, 3 records, 3 W&B runs."""
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "algo=ppo", *TINY["ppo"], *COMMON, "logger.mode=offline", "seed=0,1,2",
                      "seeds_per_job=2", f"hydra.sweep.dir={sweep}", "eval_episodes=1"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads((sweep / str(n) / "result.json").read_text()) for n in range(3)]
    assert [r["status"] for r in records] == ["ok"] * 3
    assert [r["seed"] for r in records] == [0, 1, 2]
    assert [r["job"]["num"] for r in records] == [0, 1, 2]
    group = records[0]["group"]
    assert records[1]["group"] == group and {k: group[k] for k in ("seeds", "jobs", "leader")} == {
        "seeds": [0, 1], "jobs": [0, 1], "leader": 0}
    # each seed is charged half the process's time and credited its throughput (both seeds' steps)
    assert records[0]["wall_s"] == records[1]["wall_s"] == pytest.approx(group["wall_s"] / 2, abs=1e-3)
    thr = records[0]["throughput"]
    assert thr == records[1]["throughput"] and thr["steady_iterations"] > 0
    per_iteration = records[0]["env_steps"] // records[0]["iterations"]
    assert thr["env_steps_per_s"] == pytest.approx(2 * per_iteration * thr["steady_iterations"] / thr["steady_s"])
    assert records[2].get("group") is None  # the cell's last seed trained alone
    assert "seed=1" in records[1]["overrides"] and records[1]["config"]["seed"] == 1
    runs = [read_wandb_run(r["logging"]["wandb_run_dir"]) for r in records]
    assert len({r["run_id"] for r in runs}) == 3
    assert [r["config"]["seed"] for r in runs] == [0, 1, 2]
    for run, record in zip(runs, records, strict=True):
        assert run["exit_code"] == 0
        assert run["summary"]["learning/final_return"] == pytest.approx(record["learning"]["final_return"])


def test_an_algorithm_that_cannot_train_seeds_together_is_refused_before_launch(tmp_path: Path) -> None:
    conf = tmp_path / "conf"
    (conf / "algo").mkdir(parents=True)
    (conf / "algo" / "mine.yaml").write_text("# @package _global_\nalgo:\n  _target_: tests.one_seed_plugin.OneSeedTD3\n")
    proc = run_train(["-m", "--config-dir", str(conf), "algo=mine", "env=pendulum", *COMMON, "seed=0,1",
                      "seeds_per_job=2", f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count("OneSeedTD3 cannot train several seeds together") == 1, proc.stderr
    assert not (tmp_path / "sweep").exists()
    proc = run_train(["algo=ppo", *TINY["ppo"], *COMMON, "seeds_per_job=0", f"hydra.run.dir={tmp_path / 'run'}"])
    assert proc.returncode == 2 and "seeds_per_job must be > 0, got 0" in proc.stderr


def test_a_group_stopped_and_resumed_gives_each_seed_the_numbers_of_an_uninterrupted_group(tmp_path: Path) -> None:
    """A stop signal mid-run: one checkpoint for the group (each seed's networks, optimizer state, replay,
    random streams); resumed from it, every seed ends as the group run straight through ends."""
    import os
    import signal

    from rlsweep.signals import Interrupted

    cfg = tiny_cfg("dqn", "total_env_steps=512", "eval_episodes=2")
    straight = train_seeds(cfg, SEEDS)
    ckpt = tmp_path / "checkpoint.pt"

    def stop_at_second_iteration(row: dict, env_steps: int) -> None:
        if env_steps == 2 * straight[0].algo.iteration_env_steps:
            os.kill(os.getpid(), signal.SIGTERM)

    hooks = [stop_at_second_iteration] + [lambda row, steps: None] * (len(SEEDS) - 1)
    with pytest.raises(Interrupted):
        train_seeds(cfg, SEEDS, hooks, checkpoint_path=ckpt)
    assert ckpt.is_file()
    resumed = train_seeds(cfg, SEEDS, checkpoint_path=ckpt)
    for a, b in zip(resumed, straight, strict=True):
        assert a.requeues == 1 and 0 < a.resumed_at_env_steps[0] < b.env_steps
        assert a.learning["curve"] == {**b.learning["curve"], "wall_s": a.learning["curve"]["wall_s"]}
        assert a.learning["eval_returns"] == b.learning["eval_returns"]


def test_a_seed_that_diverges_in_a_group_fails_alone_in_the_sweep_and_its_report(tmp_path: Path) -> None:
    """Seeds 0 and 1000 trained together; only seed 1000's envs give NaN rewards (tests/fault_envs.py)."""
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "algo=ppo", *TINY["ppo"], *COMMON, "env.id=tests.fault_envs:NaNRewardHighSeedCartPole-v0",
                      "seed=0,1000", "seeds_per_job=2", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode != 0, proc.stderr[-3000:]  # as when a job alone fails: the sweep says so
    fine, diverged = (json.loads((sweep / str(n) / "result.json").read_text()) for n in range(2))
    assert fine["status"] == "ok" and fine["learning"]["final_return"] is not None
    assert diverged["status"] == "failed" and diverged["learning"] is None
    assert diverged["error"].startswith("NonFiniteLossError: non-finite loss at update")
    assert fine["group"]["seeds"] == diverged["group"]["seeds"] == [0, 1000]
    summary = (sweep / "report" / "summary.md").read_text()
    assert "1 ok" in summary and "1 failed" in summary and "non-finite loss at update" in summary


@pytest.mark.parametrize(("extra", "message"), [
    (["hydra.sweep.subdir=${hydra.job.override_dirname}"], "hydra.sweep.subdir=${hydra.job.override_dirname} is not "
                                                           "supported with it"),
    (["+logger.name=run-${seed}"], "a value of this config refers to the seed"),
], ids=["job-folders-by-overrides", "config-refers-to-the-seed"])
def test_a_sweep_whose_seeds_cannot_share_a_process_is_refused(tmp_path: Path, extra: list[str], message: str) -> None:
    proc = run_train(["-m", "algo=ppo", *TINY["ppo"], *COMMON, "seed=0,1", "seeds_per_job=2", *extra,
                      f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count(message) == 1, proc.stderr
    assert not (tmp_path / "sweep").exists()


def test_ppo_nature_cnn_seeds_together_are_the_seeds_alone() -> None:
    """The actor and the critic share one encoder: each seed's whole network is stacked (nets.Head reads a
    head of it), so the shared encoder stays shared per seed and apart between seeds."""
    from rlsweep.testing import assert_seeds_together_are_seeds_alone

    cfg = tiny_cfg("atari_ppo", "eval_episodes=1", "env.max_episode_steps=100")
    assert_seeds_together_are_seeds_alone(cfg, [3, 4])


def test_channels_last_is_not_applicable_to_seeds_vectorised_together() -> None:
    from rlsweep.toggles.channels_last import ChannelsLastToggle

    cfg = tiny_cfg("atari_ppo", "backend.channels_last=true")
    assert ChannelsLastToggle().not_applicable(cfg, torch.device("cpu")) is None
    reason = ChannelsLastToggle().not_applicable(dataclasses.replace(cfg, seeds_per_job=2), torch.device("cpu"))
    assert reason.startswith("not applicable: seeds_per_job > 1")


def test_a_grouped_atari_sweep_ends_cleanly(tmp_path: Path) -> None:
    """Both seeds' records ok, and no warnings from ale-py's bindings at exit: closed envs are let go at
    once, not left to a reference cycle that the job's exit does not collect (they printed ~25 lines)."""
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", *TINY["atari_ppo"], *COMMON, "eval_episodes=1", "seed=0,1", "seeds_per_job=2",
                      f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [json.loads((sweep / str(n) / "result.json").read_text())["status"] for n in (0, 1)] == ["ok", "ok"]
    assert "leaked" not in proc.stderr, proc.stderr[-2000:]


class _StartedRun:
    """A seed's W&B run as ``job._tracker`` returns it; its finish is noted in ``finished`` as (seed, failed)."""

    run_dir, errors = None, []

    def __init__(self, seed: int, finished: list[tuple[int, bool]]) -> None:
        self.seed, self.finished = seed, finished

    def summary(self, values: dict) -> None:
        pass

    def finish(self, failed: bool) -> None:
        self.finished.append((self.seed, failed))


def _seats(tmp_path: Path) -> list:
    """The seats of a job training seeds 0 and 1 together, their records started."""
    from rlsweep import checkpoint, job
    from rlsweep.tracking import resolved_logger

    cfg = tiny_cfg("ppo")
    seats = [job._Seat(dataclasses.replace(cfg, seed=seed), {"output_dir": str(tmp_path / str(seed)), "num": seed,
                                                             "sweep_dir": None, "overrides": []},
                       resolved_logger(cfg.logger))
             for seed in (0, 1)]
    for seat in seats:
        seat.record = job._first_record(seat, tmp_path / "checkpoint.pt", checkpoint.Found())
    return seats


def test_a_seeds_w_and_b_run_is_finished_when_the_next_seeds_run_fails_to_start(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A Ctrl-C (or any error) while the second seed's W&B run starts: the first seed's run, started
    already, is still finished (its offline file complete), and every seed's record written."""
    from rlsweep import checkpoint, job

    finished: list[tuple[int, bool]] = []

    def start_run(seat: job._Seat, concurrent: bool = False) -> _StartedRun:
        if seat.cfg.seed == 1:
            raise KeyboardInterrupt("while wandb.init ran")
        return _StartedRun(seat.cfg.seed, finished)

    monkeypatch.setattr(job, "_tracker", start_run)
    seats = _seats(tmp_path)
    with pytest.raises(KeyboardInterrupt):
        try:
            job._train(seats, tmp_path / "checkpoint.pt", checkpoint.Found(), {"start_s": None, "write_s": 0.0})
        finally:
            job._write_records(seats, 0, True, 1.0, [])
    assert finished == [(0, True)]
    assert all(json.loads((tmp_path / str(seed) / "result.json").read_text())["status"] == "failed" for seed in (0, 1))


def test_a_group_resumed_from_its_checkpoint_says_so_in_every_seeds_record(tmp_path: Path) -> None:
    """The group's one checkpoint was written with the first seed's config: every seed's record says the
    job resumed from it (not only the first's, the others' calling it "written for another config")."""
    import os
    import signal

    from rlsweep.signals import Interrupted

    sweep, args = tmp_path / "sweep", [*TINY["ppo"], "seeds_per_job=2", "eval_episodes=1"]
    ckpt = sweep / "0" / "checkpoint-seeds-0-1.pt"
    ckpt.parent.mkdir(parents=True)

    calls = []

    def stop_at_second_iteration(row: dict, env_steps: int) -> None:
        calls.append(env_steps)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)

    with pytest.raises(Interrupted):
        train_seeds(tiny_cfg("ppo", *args[len(TINY["ppo"]):], "seed=0"), [0, 1],
                    [stop_at_second_iteration, lambda row, steps: None], checkpoint_path=ckpt)
    proc = run_train(["-m", "algo=ppo", *args, *COMMON, "seed=0,1", f"hydra.sweep.dir={sweep}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    for n in (0, 1):
        record = json.loads((sweep / str(n) / "result.json").read_text())
        assert record["checkpoint_rejected"] is None and record["requeues"] == 1, record["checkpoint_rejected"]
        assert record["resumed_from"]["env_steps"] == record["resumed_at_env_steps"][0] > 0


def test_one_seeds_record_failing_to_write_does_not_lose_the_next_seeds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A full disk under the first seed's folder: the second seed's record is still written and both W&B
    runs finished; the job then fails with the first seed's error."""
    from rlsweep import job

    finished: list[tuple[int, bool]] = []
    real_write = job.write_result

    def write(out_dir: Path, record: dict) -> None:
        if out_dir == tmp_path / "0":
            raise OSError(28, "No space left on device")
        real_write(out_dir, record)

    monkeypatch.setattr(job, "write_result", write)
    seats = _seats(tmp_path)
    for seat in seats:
        seat.record["status"], seat.tracker = "failed", _StartedRun(seat.cfg.seed, finished)
    with pytest.raises(OSError, match="No space left"):
        job._write_records(seats, 0, True, 1.0, [])
    assert [seed for seed, _ in finished] == [0, 1]
    assert not (tmp_path / "0" / "result.json").exists()
    assert json.loads((tmp_path / "1" / "result.json").read_text())["group"]["seeds"] == [0, 1]


def test_the_contract_kits_initial_parameters_are_those_of_the_configs_seed() -> None:
    # what the toggle contracts compare a job's parameters against: the networks of *its* seed
    from rlsweep.testing.algorithm import initial_parameters

    cfg = dataclasses.replace(tiny_cfg("ppo"), seed=3, total_env_steps=0)
    mine, seed_0 = initial_parameters(cfg), initial_parameters(dataclasses.replace(cfg, seed=0))
    assert any(not torch.equal(mine[k], seed_0[k]) for k in mine)
    assert all(torch.equal(mine[k], v) for k, v in initial_parameters(cfg).items())
