"""A sweep's preparation (rlsweep.prepare): every timed job starts in the same process and compile-cache
state whatever the order of the cells, each cell's cold compile is measured apart, and the report
never calls a comparison between different states clean."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from test_report import cell, make_record, write_job

from rlsweep import prepare
from rlsweep import report as rp
from rlsweep.records import write_json_atomic
from rlsweep.report.render import render_markdown


def test_a_cell_is_a_jobs_overrides_without_its_seed_and_invocation_switches() -> None:
    jobs = [["compile=default", "seed=0"], ["compile=none", "seed=0"], ["compile=default", "seed=1", "resume=true"],
            ["compile=none", "seed=1", "hydra.launcher.max_parallel=2"]]
    assert prepare.cells(jobs) == [["compile=default", "seed=0"], ["compile=none", "seed=0"]]
    assert prepare.cell_key(["+algo.lr=1", "seed=3", "prepare=false"]) == ("+algo.lr=1",)


def test_merging_a_cache_copies_what_is_missing_whole_and_leaves_locks_and_existing_files(tmp_path: Path) -> None:
    src, dst = tmp_path / "private", tmp_path / "shared"
    (src / "fxgraph" / "ab").mkdir(parents=True)
    (src / "fxgraph" / "ab" / "entry").write_text("new")
    (src / "locks").mkdir()
    (src / "locks" / "k.lock").write_text("")
    (src / "kernel.so").write_text("built")
    (dst / "fxgraph" / "ab").mkdir(parents=True)
    (dst / "kernel.so").write_text("already there")
    assert prepare.merge_cache(src, dst) == 1
    assert (dst / "fxgraph" / "ab" / "entry").read_text() == "new"
    assert (dst / "kernel.so").read_text() == "already there"
    assert not (dst / "locks").exists()
    assert not [p for p in dst.rglob("*.tmp")]


def test_the_preparation_file_is_read_back_per_cell_and_says_whether_the_cell_is_prepared(tmp_path: Path) -> None:
    record = {"cells": [{"cell": ["compile=default"], "cold": {"status": "ok", "compile_s": 20.0}, "warm": None},
                        {"cell": ["compile=none"], "cold": None, "warm": {"status": "failed", "error": "x"}},
                        {"cell": ["dtype=bfloat16"], "cold": None, "warm": None}]}
    write_json_atomic(tmp_path / prepare.PREPARE_FILE, record)
    back = prepare.read_prepare(tmp_path)
    assert back == record
    assert prepare.was_prepared(prepare.cell_entry(back, ["compile=default", "seed=4"]))
    assert not prepare.was_prepared(prepare.cell_entry(back, ["compile=none", "seed=0"]))
    assert prepare.was_prepared(prepare.cell_entry(back, ["dtype=bfloat16"]))  # nothing needed, nothing failed
    assert prepare.cell_entry(back, ["compile=max-autotune"]) is None
    assert prepare.read_prepare(tmp_path / "nowhere") is None


def test_a_run_until_warm_stops_after_the_warm_up_and_evaluates_one_episode() -> None:
    from helpers import tiny_cfg

    from rlsweep.runner import train

    cfg = tiny_cfg("ppo", "warmup_iters=2", "total_env_steps=100000", "eval_episodes=5")
    out = train(cfg, until_warm=True)
    assert out.env_steps == 2 * out.algo.iteration_env_steps < cfg.total_env_steps
    assert out.learning["eval_episodes"] == 1
    assert train(cfg, until_warm=True).measurement["process"] == "warm"  # the process has trained before


def _record(compile: str, seed: int, process: str, cache: str | None, num: int) -> dict:
    record = make_record(compile=compile, seed=seed, num=num)
    record["measurement"] = {"process": process, "compile_cache": cache, "prepared": True}
    return record


def _sweep(root: Path, states: list[tuple[str, int, str, str | None]], prepared: dict | None = None) -> Path:
    sweep = root / "sweep"
    for num, (comp, seed, process, cache) in enumerate(states):
        write_job(sweep, num, _record(comp, seed, process, cache, num))
    if prepared is not None:
        write_json_atomic(sweep / prepare.PREPARE_FILE, prepared)
    return sweep


def test_jobs_that_started_alike_compare_clean_and_show_the_cells_cold_compile(tmp_path: Path) -> None:
    prepared = {"cells": [{"cell": ["compile=default", "twin_modules=false"],
                           "cold": {"status": "ok", "compile_s": 21.5}, "warm": {"status": "ok"}}]}
    sweep = _sweep(tmp_path, [("none", 0, "warm", None), ("default", 0, "warm", "warm"),
                              ("none", 1, "warm", None), ("default", 1, "warm", "warm")], prepared)
    report = rp.build_report(rp.load_sweep(sweep))
    compiled = cell(report, compile="default")
    assert compiled.cold_compile_s == 21.5 and cell(report, compile="none").cold_compile_s is None
    assert "state_differs" not in compiled.flags and compiled.ratio_clean
    assert compiled.start_states == ["warm process, warm compile cache"]
    table, markdown = rp.render_table(report, color=False), render_markdown(report)
    assert "3.00 (21.5)" in table and "the cell's cold" in table
    assert "- compile=default: jobs started in a warm process, warm compile cache; cold compile 21.50 s" in markdown
    assert "Prepared before the timed jobs" in markdown


@pytest.mark.parametrize("states, flagged", [
    # the basic launcher without preparation: the first job of the process paid its warm-up
    ([("none", 0, "fresh", None), ("default", 0, "warm", "cold"), ("none", 1, "warm", None),
      ("default", 1, "warm", "warm")], {"none", "default"}),
    # fresh processes (submitit) where the first compiled job filled the cache for the next
    ([("none", 0, "fresh", None), ("default", 0, "fresh", "cold"), ("none", 1, "fresh", None),
      ("default", 1, "fresh", "warm")], {"default"}),
])
def test_jobs_that_started_in_different_states_are_never_a_clean_comparison(
        tmp_path: Path, states: list, flagged: set[str]) -> None:
    report = rp.build_report(rp.load_sweep(_sweep(tmp_path, states)))
    for value in ("none", "default"):
        c = cell(report, compile=value)
        assert ("state_differs" in c.flags) == (value in flagged), (value, c.flags)
    compiled = cell(report, compile="default")
    assert not compiled.ratio_clean
    assert any("not prepared" in n for n in compiled.flag_notes)


@pytest.mark.slow  # real sweeps with a cold compile each: minutes on 2 cores
# the in-process launcher in both orders; submitit_local's jobs are fresh processes, one order shows them alike
@pytest.mark.parametrize("launcher, orders", [("basic", ("none,default", "default,none")),
                                              ("submitit_local", ("none,default",))])
def test_every_timed_job_starts_alike_whatever_the_order_of_the_cells(tmp_path: Path, launcher: str,
                                                                       orders: tuple[str, ...],
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The same 2-cell sweep listed in both orders: every job of it starts in the same state (a warm
    process with the basic launcher, a fresh one otherwise; a warm compile cache for compiled jobs),
    each cell's cold compile is measured apart on an empty cache, and nothing compiled lands in /tmp."""
    from helpers import run_train

    states = {}
    for order in orders:
        sweep = tmp_path / order.replace(",", "_")
        tmp = tmp_path / f"tmp_{order.replace(',', '_')}"
        tmp.mkdir()
        env = {**os.environ, "TMPDIR": str(tmp), "XDG_CACHE_HOME": str(tmp_path / f"cache_{order}")}
        # rlsweep's default folder, as for a user: not the session's (conftest), which run_train passes on
        env.pop("TORCHINDUCTOR_CACHE_DIR", None)
        monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
        proc = run_train(["-m", "experiment=smoke", f"compile={order}", "compile.functions=[update]", "seed=0,1",
                          "logger.mode=disabled", f"hydra/launcher={launcher}", f"hydra.sweep.dir={sweep}"], env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/result.json"))]
        assert len(records) == 4 and all(r["status"] == "ok" for r in records)
        states[order] = sorted((r["config"]["compile"]["mode"], r["seed"], r["measurement"]["process"],
                                r["measurement"]["compile_cache"], r["measurement"]["prepared"]) for r in records)
        prepared = prepare.read_prepare(sweep)
        entry = next(e for e in prepared["cells"] if "compile=default" in e["cell"])
        assert entry["cold"]["status"] == "ok" and entry["cold"]["cache"]["state"] == "cold"
        assert entry["cold"]["cache"]["cpp_kernel_builds"] > 0 and entry["cold"]["merged_files"] > 0
        assert (entry["warm"] is not None) == (launcher == "basic")
        assert not list(tmp.glob("torchinductor_*")), "inductor wrote to the node's /tmp"
        report = rp.build_report(rp.load_sweep(sweep))
        assert not any("state_differs" in c.flags for c in report.cells)
        assert cell(report, compile="default").cold_compile_s > 0
    process = "warm" if launcher == "basic" else "fresh"
    expected = sorted([(m, s, process, "warm" if m == "default" else None, True)
                       for m in ("none", "default") for s in (0, 1)])
    assert all(found == expected for found in states.values()), states


def test_each_size_of_a_cells_groups_of_seeds_is_prepared() -> None:
    """seeds_per_job=4 over seeds 0-9: groups of 4, 4 and 2; resumed with seeds 0 and 4 finished: 3, 3 and 2
    seeds trained."""
    from helpers import tiny_cfg

    from rlsweep.launchers import seed_groups

    cfg = tiny_cfg("ppo", "seeds_per_job=4")
    jobs = [[f"seed={s}"] for s in range(10)]
    sizes = [c.seeds_per_job for _, c in prepare.with_group_sizes([(["seed=0"], cfg)], jobs, [False] * 10,
                                                                  seed_groups(jobs, 4))]
    assert sizes == [4, 2]
    finished = [s in (0, 4) for s in range(10)]
    sizes = [c.seeds_per_job for _, c in prepare.with_group_sizes([(["seed=1"], cfg)], jobs, finished,
                                                                  seed_groups(jobs, 4))]
    assert sizes == [3, 2]
    alone = tiny_cfg("ppo")
    assert prepare.with_group_sizes([(["seed=0"], alone)], jobs, [False] * 10, seed_groups(jobs, 1)) == \
        [(["seed=0"], alone)]


@pytest.mark.slow  # a real sweep with two cold compiles: a minute or two on 2 cores
def test_a_cells_smaller_last_group_starts_on_a_warm_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from helpers import run_train

    sweep = tmp_path / "sweep"
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # rlsweep's default folder, not the session's (conftest), which
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # run_train would pass on
    proc = run_train(["-m", "experiment=smoke", "compile=default", "compile.functions=[update]", "seed=0,1,2",
                      "seeds_per_job=2", "logger.mode=disabled", f"hydra.sweep.dir={sweep}"], env=env)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads((sweep / str(n) / "result.json").read_text()) for n in range(3)]
    assert [r["measurement"]["compile_cache"] for r in records] == ["warm"] * 3
    assert sorted(e["seeds"] for e in prepare.read_prepare(sweep)["cells"]) == [1, 2]


def test_the_local_preparation_sees_the_gpus_the_jobs_see(tmp_path, monkeypatch) -> None:
    # submitit's local executor shows a process only its gpus_per_node GPUs: on the GPU machine a
    # preparation without them failed "No CUDA GPUs are available" and every job compiled cold
    import submitit

    made = []

    class Done:
        def done(self) -> bool:
            return True

        def result(self) -> str:
            return "ok"

    class Executor:
        def __init__(self, folder: str) -> None:
            self.params: dict = {}
            made.append(self)

        def update_parameters(self, **params) -> None:
            self.params.update(params)

        def submit(self, fn, *args) -> Done:
            return Done()

    monkeypatch.setattr(submitit, "LocalExecutor", Executor)
    assert prepare.run_fresh_locally(tmp_path, ["cfg"], 1, 1) == ["ok"]
    assert made[0].params["gpus_per_node"] == 1
    prepare.run_fresh_locally(tmp_path, ["cfg"], 1)
    assert made[1].params["gpus_per_node"] == 0


def test_a_cold_compile_is_keyed_by_what_it_compiles_not_by_budget_seed_or_logging() -> None:
    from helpers import tiny_cfg

    base = tiny_cfg("ppo", "compile=default")
    key = prepare.one_off_key(base)[0]
    for same in ("seed=7", "total_env_steps=4096", "eval_episodes=3", "warmup_iters=5", "logger.mode=offline",
                 "progress=true", "prepare=full", "compile.cache_dir=/elsewhere"):
        assert prepare.one_off_key(tiny_cfg("ppo", "compile=default", same))[0] == key, same
    for other in ("compile=max-autotune", "twin_modules=true", "seeds_per_job=2", "algo.hidden_sizes=[8,8]",
                  "dtype=bfloat16", "compile.functions=[update]"):
        assert prepare.one_off_key(tiny_cfg("ppo", "compile=default", other))[0] != key, other
    depends = prepare.one_off_key(base)[1]
    assert {"torch", "cuda", "cpu", "code", "device"} <= set(depends)


def test_a_cold_compile_is_reused_only_while_the_files_it_built_are_in_the_cache(tmp_path: Path) -> None:
    from helpers import tiny_cfg

    cfg = tiny_cfg("ppo", "compile=default", f"compile.cache_dir={tmp_path}")
    key, depends = prepare.one_off_key(cfg)
    assert prepare.known_cold(cfg, key)[0] is None
    (tmp_path / "fxgraph").mkdir()
    (tmp_path / "fxgraph" / "entry").write_text("graph")
    measured = {"compile_s": 21.5, "wall_s": 30.0, "files": ["fxgraph/entry"], "cache": {"state": "cold"}}
    said = prepare._remember_cold(cfg, key, depends, measured, tmp_path / "sweep_a", ["compile=default"])
    assert said["source"] == "measured" and "files" not in said
    assert prepare.cold_source(said) == "measured by this sweep"
    known, why = prepare.known_cold(cfg, key)
    assert known["compile_s"] == 21.5 and "sweep_a" in why
    reused = {**known, "source": "reused"}
    assert prepare.cold_source(reused).startswith(f"reused from {tmp_path / 'sweep_a'} (")
    assert prepare._cold_estimate(cfg, key) == ", about 30 s"
    (tmp_path / "fxgraph" / "entry").unlink()  # the cache was cleared: the jobs would compile cold
    known, why = prepare.known_cold(cfg, key)
    assert known is None and "1 file(s) it built left the compile cache" in why


@pytest.mark.slow  # two real sweeps and a cold compile: a minute or two on 2 cores
def test_a_repeated_sweep_reuses_the_cold_compile_and_its_jobs_still_start_alike(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The second run of a sweep in the same cache home measures no cold compile: it reuses the first's,
    says so in prepare.json and the report, and its jobs find the same warm cache; prepare=full measures again."""
    from helpers import run_train

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path / "cache")}
    env.pop("TORCHINDUCTOR_CACHE_DIR", None)  # rlsweep's default folder, not the session's (conftest), which
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)  # run_train would pass on
    args = ["-m", "experiment=smoke", "compile=none,default", "compile.functions=[update]", "seed=0",
            "logger.mode=disabled"]
    cold = {}
    for run, extra in (("first", []), ("second", []), ("full", ["prepare=full"])):
        sweep = tmp_path / run
        proc = run_train([*args, *extra, f"hydra.sweep.dir={sweep}"], env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        cold[run] = next(e for e in prepare.read_prepare(sweep)["cells"] if "compile=default" in e["cell"])["cold"]
        cold[run]["log"] = [line for line in (proc.stdout + proc.stderr).splitlines() if "cold compile" in line]
        records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/result.json"))]
        assert [r["measurement"]["compile_cache"] for r in records if r["config"]["compile"]["mode"] != "none"] \
            == ["warm"]
        assert all(r["fixed_cost"]["warmup_s"] > 0 and r["fixed_cost"]["eval_s"] >= 0 for r in records)
        assert "Wall time" in proc.stdout and "the timed jobs" in proc.stdout
        assert "preparing 2 cell(s)" in proc.stderr + proc.stdout
    assert cold["first"]["source"] == "measured" and cold["full"]["source"] == "measured", cold
    assert cold["second"]["source"] == "reused" and cold["second"]["compile_s"] == cold["first"]["compile_s"]
    assert cold["second"]["measured_by"]["sweep_dir"] == str(tmp_path / "first")
    markdown = (tmp_path / "second" / "report" / "summary.md").read_text()
    assert f"reused from {tmp_path / 'first'}" in markdown and "## Fixed cost per job" in markdown


def test_a_sweeps_last_line_says_where_its_wall_time_went(tmp_path: Path) -> None:
    """Jobs one after another: their wall_s summed; side by side: their span; an earlier run's preparation
    (a resumed sweep) is not this command's."""
    from rlsweep.cli import wall_time_line
    from rlsweep.results import process_age_s

    def stamp(seconds_ago: float) -> str:
        import datetime as dt

        when = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=seconds_ago)
        return when.isoformat(timespec="milliseconds").replace("+00:00", "Z")

    age = process_age_s()
    assert age is not None and age > 0
    sweep = tmp_path / "sweep"
    for num, (start, end) in enumerate([(0.5, 0.3), (0.3, 0.1)]):  # seconds ago: one after the other
        write_job(sweep, num, {**make_record(compile="none", seed=num, num=num), "wall_s": 0.2,
                               "started_at": stamp(start), "finished_at": stamp(end)})
    write_json_atomic(sweep / prepare.PREPARE_FILE, {"prepare_s": 0.1, "written_at": stamp(0.55), "cells": []})
    line = wall_time_line(sweep, report_s=0.05)
    assert "the 2 timed jobs 0.4 s (the sum of their wall_s), preparation 0.1 s" in line, line
    assert "report 0.1 s" in line or "report 0.0 s" in line
    write_json_atomic(sweep / prepare.PREPARE_FILE, {"prepare_s": 0.1, "written_at": "2000-01-01T00:00:00.000Z"})
    assert "preparation 0.0 s" in wall_time_line(sweep, report_s=0.05)
    for num in (0, 1):  # side by side
        write_job(sweep, num, {**make_record(compile="none", seed=num, num=num), "wall_s": 0.4,
                               "started_at": stamp(0.5), "finished_at": stamp(0.1)})
    assert "0.4 s (side by side: 0.8 s of wall_s in all)" in wall_time_line(sweep, report_s=0.0)
