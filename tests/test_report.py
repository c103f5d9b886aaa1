"""Tests for rlsweep.report on synthetic sweep directories with known numbers."""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import statistics
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from rlsweep import report as rp
from rlsweep.report.render import render_markdown

REPO_ROOT = Path(__file__).resolve().parents[1]
TRACEBACK = (
    "Traceback (most recent call last):\n"
    '  File "train.py", line 10, in <module>\n'
    "    loss.backward()\n"
    "FloatingPointError: non-finite loss at update 12\n"
)
NA_REASON = "not applicable: no CUDA device (device=cpu)"


def make_record(
    *,
    compile: str = "none",
    twin: bool = False,
    seed: int = 0,
    rate: float = 100.0,
    iterations: list[float] | None = None,
    status: str = "ok",
    error: str | None = None,
    final_return: float | None = 490.0,
    final_return_std: float | None = 10.0,
    cpu_model: str = "Intel Xeon",
    hostname: str = "node1",
    num_threads: int = 1,
    extra_overrides: tuple[str, ...] = (),
    drop: tuple[str, ...] = (),
    num: int | None = None,
) -> dict[str, Any]:
    """A result.json record; ``drop`` removes top-level keys (as a failed job may)."""
    overrides = [
        f"compile={compile}",
        f"twin_modules={str(twin).lower()}",
        *extra_overrides,
        f"seed={seed}",
    ]
    iters = iterations if iterations is not None else [rate * f for f in (0.99, 1.0, 1.01)]
    record: dict[str, Any] = {
        "schema_version": 1,
        "status": status,
        "error": error,
        "overrides": overrides,
        "job": {"num": num, "output_dir": "", "sweep_dir": ""},
        "algo": "ppo",
        "env_id": "CartPole-v1",
        "seed": seed,
        "device": "cpu",
        "config": {},
        "toggles": {
            "compile": {"value": compile, "applied": True, "reason": None},
            "dtype": {"value": "float32", "applied": True, "reason": None},
            "pin_memory": {"value": True, "applied": False, "reason": NA_REASON},
            "non_blocking": {"value": False, "applied": True, "reason": None},
            "twin_modules": {"value": twin, "applied": True, "reason": None},
            "inplace": {"value": False, "applied": True, "reason": None},
            "backend": {
                "value": {
                    "matmul_precision": "highest",
                    "cudnn_benchmark": False,
                    "num_threads": num_threads,
                },
                "applied": True,
                "reason": None,
            },
        },
        "timings": {
            phase: {"median_ms": ms, "p10_ms": ms, "p90_ms": ms, "count": 1000, "total_s": ms}
            for phase, ms in (
                ("env_step", 0.05),
                ("act", 0.2),
                ("h2d", 0.0),
                ("d2h", 0.0),
                ("update", 2.0),
            )
        },
        "throughput": {
            "env_steps_per_s": rate,
            "updates_per_s": rate / 50,
            "per_iteration_env_steps_per_s": iters,
        },
        "compile": {"mode": compile, "compile_s": 0.0 if compile == "none" else 3.0},
        "learning": {
            "final_return": final_return,
            "final_return_std": final_return_std,
            "eval_episodes": 10,
            "curve": {
                "env_steps": [0, 500, 1000],
                "wall_s": [0.0, 5.0, 10.0],
                "episode_return": [20.0, 200.0, final_return or 0.0],
            },
        },
        "fingerprint": {
            "cpu_model": cpu_model,
            "cpu_count": 2,
            "num_threads": 1,
            "gpu": None,
            "torch": "2.13.0",
            "cuda": None,
            "python": "3.11.7",
            "hostname": hostname,
            "platform": "linux",
        },
        "env_steps": 1000,
        "wall_s": 10.0,
    }
    record["compile"].update({"graph_breaks": 0, "recompiles": 1})
    for key in drop:
        record.pop(key, None)
    return record


def write_job(sweep: Path, num: int | str, record: dict[str, Any] | None, **kw: Any) -> Path:
    """Write a Hydra job folder; ``record=None`` leaves out result.json (kw: overrides)."""
    job_dir = sweep / str(num)
    (job_dir / ".hydra").mkdir(parents=True, exist_ok=True)
    overrides = record["overrides"] if record else kw["overrides"]
    (job_dir / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
    if record is not None:
        (job_dir / "result.json").write_text(json.dumps(record))
    return job_dir


def write_multirun(sweep: Path, task: list[str]) -> None:
    sweep.mkdir(parents=True, exist_ok=True)
    cfg = {"seed": 0, "hydra": {"overrides": {"task": task}, "sweeper": {"params": None}}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(cfg))


def make_sweep(root: Path, cells: dict[tuple[str, bool], list[float]], **kw: Any) -> Path:
    """One job per (compile, twin) cell and seed, with the given env_steps_per_s."""
    sweep = root / "sweep"
    num = 0
    for (comp, twin), rates in cells.items():
        for seed, rate in enumerate(rates):
            write_job(sweep, num, make_record(compile=comp, twin=twin, seed=seed, rate=rate, **kw))
            num += 1
    return sweep


def cell(report: rp.Report, **key: str) -> rp.CellSummary:
    matches = [c for c in report.cells if all(c.key.get(k) == v for k, v in key.items())]
    assert len(matches) == 1, [c.label for c in report.cells]
    return matches[0]


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


TWO_BY_TWO = {
    ("none", False): [100.0, 100.0],
    ("none", True): [120.0, 120.0],
    ("default", False): [150.0, 150.0],
    ("default", True): [165.0, 165.0],
}


# ---------------------------------------------------------------------------- numbers


def test_ratio_and_its_interval_over_seeds(tmp_path: Path) -> None:
    """The ratio is the geometric mean of the seeds' own ratios; its interval Student's t over them (paired by
    seed: drift shared by a round cancels), as wide as three seeds make it."""
    sweep = make_sweep(
        tmp_path, {("none", False): [100, 102, 98], ("default", False): [150, 163, 137]}
    )
    report = rp.build_report(rp.load_sweep(sweep))
    assert report.varied_dims == ["compile"]
    base = cell(report, compile="none")
    fast = cell(report, compile="default")
    assert base.is_baseline and not fast.is_baseline
    assert report.cells[0] is base
    assert base.env_steps_per_s == 100.0
    logs = [math.log(150 / 100), math.log(163 / 102), math.log(137 / 98)]
    mean, half = statistics.mean(logs), 4.303 * statistics.stdev(logs) / math.sqrt(3)
    assert fast.ratio == pytest.approx(math.exp(mean))
    assert fast.ci_method == "paired by seed" and fast.ci_n == 3
    assert (fast.ci_low, fast.ci_high) == pytest.approx((math.exp(mean - half), math.exp(mean + half)))
    assert fast.phase_median_ms["update"] == pytest.approx(2.0)
    assert fast.compile_s == 3.0 and fast.graph_breaks == 0 and fast.recompiles == 1


def test_marginal_effects_from_pairs_and_ranking(tmp_path: Path) -> None:
    report = rp.build_report(rp.load_sweep(make_sweep(tmp_path, TWO_BY_TWO)))
    effects = {m.toggle: m for m in report.marginal_effects}
    twin = effects["twin_modules"]
    assert (twin.from_value, twin.to_value, twin.n_pairs) == ("false", "true", 2)
    assert twin.effect == pytest.approx(math.sqrt(1.2 * 1.1))
    assert sorted(p.ratio for p in twin.pairs) == pytest.approx([1.1, 1.2])
    assert twin.ci_method == "paired by seed"
    assert twin.ci_low <= twin.effect <= twin.ci_high
    comp = effects["compile"]
    assert comp.effect == pytest.approx(math.sqrt(1.5 * 165 / 120))
    assert [m.toggle for m in report.marginal_effects] == ["compile", "twin_modules"]
    assert (comp.rank, twin.rank) == (1, 2)
    assert cell(report, compile="default", twin_modules="true").ratio == pytest.approx(1.65)


def test_one_seed_gives_no_interval_and_says_so(tmp_path: Path) -> None:
    """A job's own iterations say nothing of how the next job will run: one seed, no interval, said plainly."""
    sweep = tmp_path / "sweep"
    write_job(sweep, 0, make_record(rate=100, iterations=[98, 99, 100, 101, 102]))
    write_job(
        sweep, 1, make_record(compile="default", rate=150, iterations=[147, 149, 150, 151, 153])
    )
    report = rp.build_report(rp.load_sweep(sweep))
    fast = cell(report, compile="default")
    assert fast.ratio == pytest.approx(1.5)
    assert fast.ci_low is None and fast.ci_high is None and fast.ci_method == "none"
    text = rp.render_table(report, color=False)
    assert "1.50x steady (no interval (1 seed; 3 or more give one)" in text


def test_failed_jobs_excluded_and_error_line_shown(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for seed, rate in enumerate([100, 102, 98]):
        write_job(sweep, seed, make_record(seed=seed, rate=rate))
    write_job(sweep, 3, make_record(compile="default", seed=0, rate=150))
    write_job(sweep, 4, make_record(compile="default", seed=1, rate=152))
    # a failed job whose (bogus) throughput must not count, and one without any numbers
    write_job(
        sweep, 5, make_record(compile="default", seed=2, rate=1e9, status="failed", error=TRACEBACK)
    )
    write_job(
        sweep,
        6,
        make_record(
            compile="max-autotune",
            seed=0,
            status="failed",
            error=TRACEBACK,
            drop=("timings", "throughput", "learning", "compile"),
        ),
    )
    rec = make_record(compile="max-autotune", seed=1, status="failed", error=TRACEBACK)
    rec.update(timings=None, throughput=None, learning=None)
    write_job(sweep, 7, rec)
    write_job(sweep, 8, make_record(compile="max-autotune", seed=2, status="interrupted"))
    report = rp.build_report(rp.load_sweep(sweep))
    partial = cell(report, compile="default")
    assert (partial.n_ok, partial.n_failed) == (2, 1)
    assert partial.env_steps_per_s == pytest.approx(151.0)
    assert partial.ratio == pytest.approx(math.sqrt(150 / 100 * 152 / 102))  # the seeds both cells ran
    dead = cell(report, compile="max-autotune")
    assert (dead.n_ok, dead.n_failed, dead.n_interrupted, dead.ratio) == (0, 3, 1, None)
    assert "no ok jobs" in dead.ratio_note
    assert all(m.effect is None or m.to_value != "max-autotune" for m in report.marginal_effects)
    table = rp.render_table(report, color=False)
    assert "failed: FloatingPointError: non-finite loss at update 12" in table
    assert [c.status for c in report.casualties] == ["failed", "failed", "failed", "interrupted"]
    assert {c.detail for c in report.casualties[:3]} == {
        "FloatingPointError: non-finite loss at update 12"
    }


def test_not_applicable_toggle_reason_shown(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {("none", False): [100], ("default", False): [150]})
    report = rp.build_report(rp.load_sweep(sweep))
    assert cell(report, compile="default").not_applicable == [f"pin_memory: {NA_REASON}"]
    assert f"pin_memory n/a: {NA_REASON}" in rp.render_table(report, color=False)
    out = rp.write_report(report, tmp_path / "out", plots=False)
    md = (tmp_path / "out" / "summary.md").read_text()
    assert f"pin_memory n/a: {NA_REASON}" in md
    assert {p.name for p in out} == {"summary.csv", "summary.md", "report.json"}


@pytest.mark.parametrize("with_twin", [True, False], ids=["exact", "job-has-extra-override"])
def test_missing_jobs_from_multirun_and_job_folders(tmp_path: Path, with_twin: bool) -> None:
    sweep = tmp_path / "sweep"
    # Hydra rewrites 3e-4 as 0.0003 and range(0,2) as 0,1 in the job overrides.
    task = ["compile=none,default,max-autotune", "algo.lr=3e-4", "seed=range(0,2)"]
    write_multirun(sweep, task + (["twin_modules=false"] if with_twin else []))
    lr = ("algo.lr=0.0003",)
    write_job(sweep, 0, make_record(seed=0, rate=100, extra_overrides=lr))
    write_job(sweep, 1, make_record(seed=1, rate=100, extra_overrides=lr))
    write_job(sweep, 2, make_record(compile="default", seed=0, rate=150, extra_overrides=lr))
    # job 3 started (folder + .hydra) but wrote no result.json; jobs 4, 5 never started
    job3 = ["compile=default", "twin_modules=false", "algo.lr=0.0003", "seed=1"]
    write_job(sweep, 3, None, overrides=job3)
    sw = rp.load_sweep(sweep)
    assert sw.expected_jobs == 6 and len(sw.jobs) == 6
    report = rp.build_report(sw)
    assert report.varied_dims == ["compile"]
    started = cell(report, compile="default")
    assert (started.n_ok, started.n_missing) == (1, 1)
    never = cell(report, compile="max-autotune")
    assert (never.n_ok, never.n_missing) == (0, 2)
    assert never.ratio is None
    missing = sorted((c.cell, c.seed) for c in report.casualties if c.status == "missing")
    assert missing == [
        ("compile=default", "1"),
        ("compile=max-autotune", "0"),
        ("compile=max-autotune", "1"),
    ]
    assert report.n_jobs == 6 and not report.notes
    table = rp.render_table(report, color=False)
    assert "compile=max-autotune" in table and "missing" in table


def test_a_sweep_of_no_swept_key_expects_its_one_job_as_the_status_does(tmp_path: Path) -> None:
    # ``python -m sweeps.train -m`` with no override: Hydra runs one job (0), which never started here
    sweep = tmp_path / "sweep"
    write_multirun(sweep, [])
    from rlsweep.status import sweep_status

    assert [(j.num, j.state) for j in sweep_status(sweep).jobs] == [(0, "pending")]
    sw = rp.load_sweep(sweep)
    assert sw.expected_jobs == 1 and [(j.num, j.status) for j in sw.jobs] == [(0, "missing")]


def test_a_search_is_not_read_as_a_grid_of_its_choices(tmp_path: Path) -> None:
    # Optuna's choice(...) params are lists too; its trials are the jobs it chose, none "missing"
    sweep = tmp_path / "sweep"
    write_multirun(sweep, ["seed=0"])
    cfg = yaml.safe_load((sweep / "multirun.yaml").read_text())
    cfg["hydra"]["sweeper"] = {"_target_": "hydra_plugins.hydra_optuna_sweeper.optuna_sweeper.OptunaSweeper",
                               "params": {"compile": "choice(none,default,max-autotune)", "twin_modules": "choice(false,true)"}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(cfg))
    write_job(sweep, 0, make_record(seed=0, rate=100))
    write_job(sweep, 1, make_record(compile="default", seed=0, rate=150))
    sw = rp.load_sweep(sweep)
    assert sw.expected_jobs is None and len(sw.jobs) == 2
    report = rp.build_report(sw)
    assert not [c for c in report.casualties if c.status == "missing"]
    assert any("OptunaSweeper chooses its jobs as it goes" in n for n in report.notes)


def test_fingerprints(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_job(sweep, 0, make_record(seed=0, rate=100, hostname="a"))
    write_job(sweep, 1, make_record(seed=1, rate=100, hostname="b"))
    # hostname differs only: still comparable
    write_job(sweep, 2, make_record(compile="default", seed=0, rate=150, hostname="c"))
    # other CPU model: no ratio
    write_job(sweep, 3, make_record(compile="max-autotune", seed=0, rate=300, cpu_model="AMD EPYC"))
    # mixed within a cell
    write_job(sweep, 4, make_record(compile="reduce-overhead", seed=0, rate=120))
    write_job(
        sweep, 5, make_record(compile="reduce-overhead", seed=1, rate=120, cpu_model="AMD EPYC")
    )
    report = rp.build_report(rp.load_sweep(sweep))
    assert cell(report, compile="default").ratio == pytest.approx(1.5)
    other = cell(report, compile="max-autotune")
    assert other.ratio is None
    assert other.ratio_note == "fingerprint differs: cpu_model AMD EPYC vs Intel Xeon"
    mixed = cell(report, compile="reduce-overhead")
    assert mixed.ratio is None and mixed.fingerprint_mixed
    assert "mixed fingerprints within cell: cpu_model Intel Xeon vs AMD EPYC" in mixed.ratio_note
    assert any("mixed fingerprints" in n for n in report.notes)
    md_text = render_markdown(report)
    assert "fingerprint differs: cpu_model AMD EPYC vs Intel Xeon" in md_text


@pytest.mark.parametrize(
    ("returns", "stds", "flag"),
    [
        ([20, 25, 22], [5, 5, 5], True),
        ([480, 500, 490], [10, 10, 10], False),
        ([300], [10], True),  # single seeds: eval-episode std decides
        ([485], [10], False),
    ],
)
def test_learning_check(
    tmp_path: Path, returns: list[float], stds: list[float], flag: bool
) -> None:
    sweep = tmp_path / "sweep"
    base_returns = [480, 500, 490][: len(returns)]
    num = 0
    for seed, ret in enumerate(base_returns):
        write_job(sweep, num, make_record(seed=seed, final_return=ret))
        num += 1
    for seed, (ret, std) in enumerate(zip(returns, stds)):
        write_job(
            sweep,
            num,
            make_record(compile="default", seed=seed, final_return=ret, final_return_std=std),
        )
        num += 1
    report = rp.build_report(rp.load_sweep(sweep))
    assert cell(report, compile="default").learning_flag is flag
    assert cell(report, compile="none").learning_flag is None
    table = rp.render_table(report, color=False)
    assert ("LEARNING" in table) is flag


def test_baseline_selection_and_errors(tmp_path: Path) -> None:
    sw = rp.load_sweep(make_sweep(tmp_path, TWO_BY_TWO))
    report = rp.build_report(sw, {"twin_modules": "True"})
    assert report.baseline_labels == ["compile=none twin_modules=true"]
    assert cell(report, compile="default", twin_modules="true").ratio == pytest.approx(165 / 120)
    twin = next(m for m in report.marginal_effects if m.toggle == "twin_modules")
    assert (twin.from_value, twin.to_value) == ("true", "false")
    assert twin.effect == pytest.approx(1 / math.sqrt(1.2 * 1.1))
    with pytest.raises(rp.ReportInputError, match="no cell matches baseline"):
        rp.build_report(sw, {"compile": "max-autotune"})
    with pytest.raises(rp.ReportInputError, match="unknown baseline key"):
        rp.build_report(sw, {"nonsense": "1"})


def test_a_toggle_without_an_off_value_gets_a_stated_baseline(tmp_path: Path) -> None:
    # backend.num_threads has no "off" value: its first value run is the baseline, and the report says so
    sweep = tmp_path / "sweep"
    write_job(sweep, 0, make_record(rate=100, num_threads=4))
    write_job(sweep, 1, make_record(rate=180, num_threads=1))
    write_job(sweep, 2, make_record(compile="default", rate=150, num_threads=4))
    sw = rp.load_sweep(sweep)
    report = rp.build_report(sw)
    assert report.baseline_labels == ["backend.num_threads=4 compile=none"]
    assert report.baseline_reasons["backend.num_threads"].startswith("the value of the sweep's first job")
    assert "backend.num_threads=4 (the value of the sweep's first job" in report.baseline_why
    threads = next(m for m in report.marginal_effects if m.toggle == "backend.num_threads")
    assert threads.effect == pytest.approx(1.8) and threads.n_pairs == 1
    report = rp.build_report(sw, {"backend.num_threads": "1"})
    assert report.baseline_reasons["backend.num_threads"] == "chosen with --baseline"
    threads = next(m for m in report.marginal_effects if m.toggle == "backend.num_threads")
    assert threads.effect == pytest.approx(1 / 1.8) and threads.n_pairs == 1


def test_an_unswept_off_value_falls_back_to_the_toggles_first_value(tmp_path: Path) -> None:
    # compile=max-autotune,default: "none" was not run, so the baseline is compile's first value in the
    # toggle's own order (default), not the sweep's first job (max-autotune), and the report says why
    sweep = make_sweep(tmp_path, {("max-autotune", False): [200, 210], ("default", False): [100, 105]})
    report = rp.build_report(rp.load_sweep(sweep))
    assert report.baseline_labels == ["compile=default"]
    assert report.baseline_reasons["compile"] == "the off value was not swept: the toggle's first value in the sweep"
    assert cell(report, compile="max-autotune").ratio == pytest.approx(2.0, rel=0.03)


def test_unknown_toggle_is_a_toggle_not_a_context(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for num, (comp, graphs, rate) in enumerate(
        [("none", False, 100), ("none", True, 130), ("default", False, 150), ("default", True, 180)]
    ):
        rec = make_record(compile=comp, rate=rate, extra_overrides=(f"cuda_graphs={graphs}",))
        rec["toggles"]["cuda_graphs"] = {"value": graphs, "applied": True, "reason": None}
        write_job(sweep, num, rec)
    report = rp.build_report(rp.load_sweep(sweep))
    assert report.baseline_labels == ["compile=none cuda_graphs=false"]
    assert "compile=none (toggle off); cuda_graphs=false (the value of the sweep's first job" in report.baseline_why
    report = rp.build_report(rp.load_sweep(sweep), {"cuda_graphs": "false"})
    assert report.baseline_labels == ["compile=none cuda_graphs=false"]
    graphs = next(m for m in report.marginal_effects if m.toggle == "cuda_graphs")
    assert graphs.effect == pytest.approx(math.sqrt(1.3 * 1.2)) and graphs.n_pairs == 2
    assert graphs.ci_method is None and graphs.why == "1 seed"


def test_nested_jobs_skip_submitit_and_unreadable_results(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_job(sweep / "a", 0, make_record(rate=100))
    write_job(sweep / "b" / "deeper", 1, make_record(compile="default", rate=150))
    junk = sweep / ".submitit" / "123_0"
    junk.mkdir(parents=True)
    (junk / "result.json").write_text("{not json")
    bad = write_job(sweep, 2, make_record(compile="max-autotune"))
    (bad / "result.json").write_text("{truncated")
    report = rp.build_report(rp.load_sweep(sweep))
    assert cell(report, compile="default").ratio == pytest.approx(1.5)
    assert len(report.casualties) == 1
    cas = report.casualties[0]
    assert cas.cell == "compile=max-autotune" and cas.status == "failed"
    assert cas.detail.startswith("unreadable result.json")


def test_wandb_folders_are_not_read_and_hydra_overrides_fill_a_record_without_any(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    job = write_job(sweep, 0, make_record(rate=100))
    stray = job / "wandb" / "offline-run-1" / "files"  # W&B's run folder: never a job of the sweep
    stray.mkdir(parents=True)
    (stray / "result.json").write_text(json.dumps(make_record(compile="default", rate=1)))
    record = make_record(compile="default", rate=150)
    no_overrides = {k: v for k, v in record.items() if k != "overrides"}
    (write_job(sweep, 1, record) / "result.json").write_text(json.dumps(no_overrides))
    sweep_ = rp.load_sweep(sweep)
    assert len(sweep_.jobs) == 2
    assert sweep_.jobs[1].overrides == record["overrides"]  # from .hydra/overrides.yaml
    assert cell(rp.build_report(sweep_), compile="default").ratio == pytest.approx(1.5)


def test_the_report_does_not_import_torch() -> None:
    """Importing torch is seconds of a report that reads JSON and draws PNGs."""
    code = "import sys, rlsweep.report; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False, timeout=120).returncode == 0


# ---------------------------------------------------------------------------- outputs


def test_write_report_files_plots_and_atomicity(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    report = rp.build_report(rp.load_sweep(make_sweep(tmp_path, TWO_BY_TWO)))
    replaced: list[tuple[Path, Path]] = []
    real_replace = os.replace

    def spy(src: Any, dst: Any) -> None:
        replaced.append((Path(src), Path(dst)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    out = tmp_path / "out"
    written = rp.write_report(report, out)
    names = {
        "summary.csv",
        "summary.md",
        "report.json",
        "ratio.png",
        "phases.png",
        "learning_curves.png",
    }
    assert {p.name for p in written} == names
    assert {p.name for p in out.iterdir()} == names  # no leftover temp files
    assert {dst.name for _, dst in replaced} == names
    assert all(src.parent == dst.parent == out and src != dst for src, dst in replaced)
    for name in ("ratio.png", "phases.png", "learning_curves.png"):
        width, height = png_size(out / name)
        assert width >= 300 and height >= 300

    with (out / "summary.csv").open(newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == len(report.cells) == 4
    by_cell = {r["cell"]: r for r in rows}
    assert float(by_cell["compile=default twin_modules=false"]["ratio"]) == pytest.approx(1.5)
    assert by_cell["compile=none twin_modules=false"]["is_baseline"] == "True"
    assert rows[0]["compile"] == "none"

    data = json.loads((out / "report.json").read_text())
    assert data["baseline"]["cells"] == ["compile=none twin_modules=false"]
    assert len(data["cells"]) == 4
    assert data["marginal_effects"][0]["toggle"] == "compile"
    assert data["marginal_effects"][1]["effect"] == pytest.approx(math.sqrt(1.32))
    md = (out / "summary.md").read_text()
    assert "## Each toggle on its own" in md and "twin_modules: false -> true" in md


BREAK = {
    "reason": "Call to `torch._dynamo.graph_break()` Explanation: User-inserted graph break.",
    "file": "/home/me/algo.py",
    "line": 42,
    "function": "loss_fn",
    "stack": ["/home/me/algo.py:30 in step", "/home/me/algo.py:42 in loss_fn"],
}
PRINT_BREAK = {
    "reason": "Failed to trace builtin operator Explanation: builtin operator `print` with "
    "argument types [<class 'ConstantVariable'>]",
    "file": "/home/me/algo.py",
    "line": 50,
    "function": "step",
}
CUDAGRAPH_SKIP = {"reason": "skipping cudagraphs due to mutated inputs (2 instances)"}
RECOMPILE = {"reason": "tensor 'obs' size mismatch at index 0. expected 64, actual 32", "frame": "step (/home/me/algo.py:28)"}


def test_compile_reasons_listed_per_cell(tmp_path: Path) -> None:
    """Graph-break and recompile reasons of compile.per_function, merged per cell with counts."""
    sweep = tmp_path / "sweep"
    for seed, breaks in enumerate(([{**BREAK, "count": 2}], [{**BREAK, "count": 1}, {**PRINT_BREAK, "count": 1}])):
        rec = make_record(compile="default", seed=seed)
        rec["compile"]["per_function"] = {
            "update": {
                "compile_s": 3.0, "compilations": 3, "recompiles": 1, "graph_breaks": 3,
                "graph_break_reasons": breaks,
                "recompile_reasons": [{**RECOMPILE, "count": 1}],
                "reasons_dropped": 2 if seed else 0,
                **({} if seed else {"cudagraph_skips": 1, "cudagraph_skip_reasons": [{**CUDAGRAPH_SKIP, "count": 1}]}),
            },
            "act": {"compile_s": 0.5, "compilations": 1, "recompiles": 0, "graph_breaks": 0,
                    "graph_break_reasons": [], "recompile_reasons": [], "reasons_dropped": 0},
        }
        write_job(sweep, seed, rec)
    for seed in range(2):  # eager cell: nothing compiled
        write_job(sweep, 2 + seed, make_record(compile="none", seed=seed))
    report = rp.build_report(rp.load_sweep(sweep))
    assert cell(report, compile="none").compile_reasons == {}
    reasons = cell(report, compile="default").compile_reasons
    assert set(reasons) == {"update"}  # functions without any reason are left out
    update = reasons["update"]
    assert update["graph_breaks"] == [
        {**BREAK, "count": 3, "jobs": 2},
        {**PRINT_BREAK, "count": 1, "jobs": 1},
    ]
    assert update["recompiles"] == [{**RECOMPILE, "count": 2, "jobs": 2}]
    assert update["reasons_dropped"] == 2
    assert update["cudagraph_skips"] == [{**CUDAGRAPH_SKIP, "count": 1, "jobs": 1}]
    assert update["cudagraph_skip_count"] == 1

    out = tmp_path / "out"
    rp.write_report(report, out, plots=False, log_wandb=False)
    data = json.loads((out / "report.json").read_text())
    by_label = {c["label"]: c for c in data["cells"]}
    assert by_label["compile=default"]["compile_reasons"]["update"]["recompiles"][0]["count"] == 2
    assert by_label["compile=none"]["compile_reasons"] == {}
    md = (out / "summary.md").read_text()
    section = md.split("## Graph breaks, recompiles and CUDA-graph skips", 1)[1].split("\n## ", 1)[0]
    assert "### compile=default" in section and "### compile=none" not in section
    lines = section.splitlines()
    assert (
        "- `update`: graph break ×3 (2 jobs) at `/home/me/algo.py:42` in `loss_fn`: "
        "Call to `torch._dynamo.graph_break()` Explanation: User-inserted graph break."
    ) in lines
    assert "  - call chain: `/home/me/algo.py:30 in step` → `/home/me/algo.py:42 in loss_fn`" in lines
    assert any(line.startswith("- `update`: graph break ×1 (1 job) at `/home/me/algo.py:50` in `step`: ")
               and "[\\<class 'ConstantVariable'>]" in line for line in lines)
    assert (
        "- `update`: recompile ×2 (2 jobs) of `step (/home/me/algo.py:28)`, guard failed: "
        "tensor 'obs' size mismatch at index 0. expected 64, actual 32"
    ) in lines
    assert "- `update`: 2 more occurrence(s) of reasons not kept" in lines
    assert "- `update`: 1 graph(s) ran without CUDA graphs" in lines
    assert "  - ×1 (1 job): skipping cudagraphs due to mutated inputs (2 instances)" in lines

    # a sweep without any reasons says so
    plain = rp.build_report(rp.load_sweep(make_sweep(tmp_path / "plain", TWO_BY_TWO)))
    md = render_markdown(plain)
    assert md.split("## Graph breaks, recompiles and CUDA-graph skips", 1)[1].split("\n## ", 1)[0].strip() == "None recorded."


def test_all_failed_writes_text_but_no_plots(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for seed in range(2):
        write_job(
            sweep,
            seed,
            make_record(
                seed=seed,
                status="failed",
                error=TRACEBACK,
                drop=("throughput", "timings", "learning"),
            ),
        )
    out = tmp_path / "out"
    assert rp.main([str(sweep), "--out", str(out)]) == 0
    assert {p.name for p in out.iterdir()} == {"summary.csv", "summary.md", "report.json"}
    assert "non-finite loss at update 12" in (out / "summary.md").read_text()


def test_render_table_color(tmp_path: Path) -> None:
    sweep = make_sweep(
        tmp_path,
        {("none", False): [100, 100], ("default", False): [150, 150], ("none", True): [80, 80]},
    )
    report = rp.build_report(rp.load_sweep(sweep))
    plain = rp.render_table(report, color=False)
    assert "\x1b" not in plain
    colored = rp.render_table(report, color=True)
    rows = [line for line in colored.splitlines() if "2/2" in line]  # the table, not the verdict
    best = next(line for line in rows if "compile=default" in line)
    worst = next(line for line in rows if "twin_modules=true" in line)
    assert "\x1b[1;32m" in best and "1.50 [" in best
    assert "\x1b[1;31m" in worst and "0.80 [" in worst


# -------------------------------------------------------------------------------- CLI


def test_cli_bad_input_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert rp.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err
    assert "sweep dir not found" in err and "Traceback" not in err
    (tmp_path / "empty").mkdir()
    assert rp.main([str(tmp_path / "empty")]) == 2
    assert "no jobs found" in capsys.readouterr().err
    sweep = make_sweep(tmp_path, {("none", False): [100], ("default", False): [150]})
    assert rp.main([str(sweep), "--baseline", "compile=max-autotune"]) == 2
    err = capsys.readouterr().err
    assert "no cell matches baseline compile=max-autotune" in err and "Traceback" not in err
    assert rp.main([str(sweep), "--baseline", "compile"]) == 2
    assert "expected key=value" in capsys.readouterr().err
    assert not (sweep / "report").exists()


def test_cli_baseline_option(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sweep = make_sweep(tmp_path, TWO_BY_TWO)
    code = rp.main([str(sweep), "--baseline", "compile=default", "twin_modules=true", "--no-plots"])
    assert code == 0
    out = capsys.readouterr().out
    assert "Baseline: compile=default twin_modules=true" in out
    data = json.loads((sweep / "report" / "report.json").read_text())
    assert data["baseline"]["cells"] == ["compile=default twin_modules=true"]
    ratios = {c["label"]: c["ratio"] for c in data["cells"]}
    assert ratios["compile=none twin_modules=false"] == pytest.approx(100 / 165)
    assert not list((sweep / "report").glob("*.png"))


def test_module_entry_point(tmp_path: Path) -> None:
    sweep = make_sweep(tmp_path, {("none", False): [100], ("default", False): [150]})
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.report", str(sweep), "--no-plots"],
        cwd=REPO_ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "compile=default" in proc.stdout and "\x1b" not in proc.stdout
    assert (sweep / "report" / "summary.csv").is_file()
    proc = subprocess.run(
        [sys.executable, "-m", "sweeps.report", str(tmp_path / "missing")],
        cwd=REPO_ROOT,
        check=False,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr and "sweep dir not found" in proc.stderr


# ------------------------------------------------------------------------------- W&B


def logged_sweep(root: Path, mode: str, group: str | None = None) -> Path:
    """A 2-cell sweep whose jobs say they logged to W&B with ``mode`` (and ``group``)."""
    sweep = root / "multirun" / "2026-11-29" / "21-00-00"
    for num, (comp, rate) in enumerate([("none", 100.0), ("default", 150.0)]):
        rec = make_record(compile=comp, rate=rate, num=num)
        rec["config"] = {
            "logger": {
                "mode": mode,
                "project": "proj",
                "entity": "team",
                "group": group,
                "tags": [],
            }
        }
        rec["job"]["sweep_dir"] = str(sweep)
        write_job(sweep, num, rec)
    return sweep


def test_wandb_group_and_target(tmp_path: Path) -> None:
    from rlsweep.tracking import run_group  # the report's run joins its jobs' group: the jobs' own rule

    assert run_group(None, "/x/multirun/2026-11-29/21-00-00", Path("/x")) == "2026-11-29/21-00-00"
    assert run_group("mine", "/x/multirun/2026-11-29/21-00-00", Path("/x")) == "mine"
    target = rp.load_sweep(logged_sweep(tmp_path / "a", "offline")).wandb
    assert target == rp.WandbTarget("offline", "proj", "team", "2026-11-29/21-00-00")
    assert rp.load_sweep(logged_sweep(tmp_path / "b", "online", "g")).wandb.group == "g"
    assert rp.load_sweep(logged_sweep(tmp_path / "c", "disabled")).wandb is None
    assert rp.load_sweep(make_sweep(tmp_path / "d", TWO_BY_TWO)).wandb is None  # no logger


def test_wandb_failure_only_warns(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import wandb

    calls: list[dict[str, Any]] = []

    def broken_init(**kwargs: Any) -> None:
        calls.append(kwargs)
        raise RuntimeError("wandb service unreachable\nsecond line")

    monkeypatch.setattr(wandb, "init", broken_init)
    sweep = logged_sweep(tmp_path, "offline")
    assert rp.main([str(sweep), "--no-plots", "--no-wandb"]) == 0
    assert calls == [] and "W&B" not in capsys.readouterr().err
    assert rp.main([str(sweep), "--no-plots"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        (
            "rlsweep report: W&B logging failed (RuntimeError: wandb service unreachable); "
            "the report files are written"
        )
    ]
    (kwargs,) = calls
    assert {k: kwargs[k] for k in ("mode", "project", "entity", "group", "job_type", "name")} == {
        "mode": "offline",
        "project": "proj",
        "entity": "team",
        "group": "2026-11-29/21-00-00",
        "job_type": "report",
        "name": "report",
    }
    assert kwargs["dir"] == str(sweep / "report")
    assert {p.name for p in (sweep / "report").iterdir()} == {
        "summary.csv",
        "summary.md",
        "report.json",
        "wandb_workspace.json",  # a local file: written although the W&B run failed
    }
    # write_report logs too, unless told not to
    rp.write_report(rp.build_report(rp.load_sweep(sweep)), tmp_path / "out", plots=False)
    assert len(calls) == 2 and "W&B logging failed" in capsys.readouterr().err
    rp.write_report(
        rp.build_report(rp.load_sweep(sweep)), tmp_path / "out", plots=False, log_wandb=False
    )
    assert len(calls) == 2


def test_report_again_updates_its_one_wandb_run(tmp_path: Path) -> None:
    """Real offline W&B: making a sweep's report twice leaves one report run (same id), not two."""
    from helpers import read_wandb_run

    sweep = logged_sweep(tmp_path, "offline")
    assert rp.main([str(sweep), "--no-plots"]) == 0
    (first,) = (sweep / "report" / "wandb").glob("offline-run-*")
    first_id = read_wandb_run(first)["run_id"]
    assert first.name.endswith(f"-{first_id}")
    # a copy that wandb suffixed because another of that second existed (seen in CI) is superseded too
    shutil.copytree(first, first.with_name("offline-run-20260101_000000-" + first_id + "-1"))
    assert rp.main([str(sweep), "--no-plots", "--baseline", "compile=default"]) == 0
    (second,) = (sweep / "report" / "wandb").glob("offline-run-*")
    run = read_wandb_run(second)
    assert run["run_id"] == first_id
    assert (run["job_type"], run["exit_code"]) == ("report", 0)
    assert run["summary"]["report/n_ok"] == 2


def test_the_report_says_which_code_each_job_ran_on(tmp_path: Path) -> None:
    """Jobs on different commits, a job resumed on other code, and a rejected checkpoint are each noted."""
    sweep = tmp_path / "sweep"
    old, new = "a" * 40, "b" * 40
    num = 0
    for comp in ("none", "default"):
        for seed in range(2):
            rec = make_record(compile=comp, seed=seed)
            rec["provenance"] = {"code": {"rlsweep": {"commit": new, "dirty": False}}, "versions": {}}
            if comp == "default" and seed == 1:  # stopped on the old commit, resumed on the new one, edited
                rec["code_history"] = [{"attempt": 0, "from_env_steps": 0, "commit": old, "dirty": False},
                                       {"attempt": 1, "from_env_steps": 512, "commit": new, "dirty": True}]
            if comp == "none" and seed == 1:
                rec["provenance"]["code"]["rlsweep"]["commit"] = old
                rec["checkpoint_rejected"] = "checksum mismatch (the file is damaged)"
            write_job(sweep, num, rec)
            num += 1
    notes = rp.build_report(rp.load_sweep(sweep)).notes
    assert "compile=default seed 1: resumed on other code: aaaaaaa → bbbbbbb+dirty" in notes
    assert ("compile=none seed 1: its checkpoint was not used (checksum mismatch (the file is damaged)); "
            "it started afresh") in notes
    code = [n for n in notes if n.startswith("jobs ran on different code")]
    assert code == ["jobs ran on different code, so ratios between them include the code change: "
                    "bbbbbbb: compile=none seed 0, compile=default seed 0; aaaaaaa: compile=none seed 1; "
                    "bbbbbbb+dirty: compile=default seed 1"]
    # one commit for every job: nothing to say
    plain = rp.build_report(rp.load_sweep(make_sweep(tmp_path / "plain", TWO_BY_TWO))).notes
    assert not [n for n in plain if "code" in n]
