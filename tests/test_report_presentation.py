"""What a user reads first: the terminal summary, the plots, and the baseline a sweep is compared with."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml
from matplotlib.collections import LineCollection
from matplotlib.colors import to_rgb
from matplotlib.container import ErrorbarContainer
from matplotlib.lines import Line2D
from test_report import TWO_BY_TWO, cell, make_record, make_sweep, write_job

from rlsweep import report as rp
from rlsweep.report.plots import learning_figure, ratio_figure
from rlsweep.report.render import TERMINAL_WIDTH


def two_by_two(root: Path, learning_off: bool = False) -> Path:
    """The 2x2 compile x twin_modules sweep, 2 seeds a cell; ``learning_off``: its fastest cell learns worse."""
    sweep = root / "sweep"
    num = 0
    for (comp, twin), rates in TWO_BY_TWO.items():
        for seed, rate in enumerate(rates):
            worse = learning_off and comp == "default" and twin
            rec = make_record(compile=comp, twin=twin, seed=seed, rate=rate,
                              final_return=200.0 if worse else 490.0)
            rec["wall_s"] = 10.0 * 100 / rate + (3.0 if comp == "default" else 0.0) + 0.5 * seed
            write_job(sweep, num, rec)
            num += 1
    return sweep


def hyper_sweep(root: Path, values: list[str], rates: list[float], default: Any | None,
                key: str = "algo.lr") -> Path:
    """A sweep of a hyper-parameter (no toggle varies): ``multirun.yaml`` as Hydra writes it, the
    swept key holding the config's own value (None: no multirun.yaml)."""
    sweep = root / "sweep"
    for num, (value, rate) in enumerate(zip(values, rates)):
        write_job(sweep, num, make_record(rate=rate, extra_overrides=(f"{key}={value}",), num=num))
    if default is not None:
        section, name = key.split(".")
        cfg = {section: {name: default}, "seed": 0,
               "hydra": {"overrides": {"task": [f"{key}={','.join(values)}"]}, "sweeper": {"params": None},
                         "runtime": {"choices": {"algo": "ppo", "compile": "none"}}}}
        (sweep / "multirun.yaml").write_text(yaml.safe_dump(cfg))
    return sweep


# ------------------------------------------------------------------------- terminal summary


def test_terminal_summary_fits_120_columns_and_leads_with_the_toggle_that_paid(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # as a user runs it: from the project, on the folder Hydra named
    sweep = two_by_two(Path("multirun") / "2026-12-02" / "14-56-18")
    assert rp.main([str(sweep), "--no-plots", "--no-wandb"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= TERMINAL_WIDTH, max(lines, key=len)
    # first each toggle's own effect, then the best combination
    assert lines[0].startswith("Each toggle on its own")
    assert lines[1].startswith("  compile: none -> default: 1.44x [") and "end to end" in lines[1]
    verdict = " ".join(out.split("\n\n")[0].split())
    assert "twin_modules: false -> true: 1.15x [" in verdict
    best = verdict[verdict.index("Best combination: "):]
    assert best.startswith("Best combination: compile=default twin_modules=true: 1.65x [")
    assert "steady" in best and "end to end" in best and best.endswith("; clean")
    # the table's row of each cell, with both ratios on it
    row = next(line for line in lines if line.startswith("  compile=default twin_modules=true ") and "2/2" in line)
    assert "1.65 [" in row and "165.0" in row
    # the wide table stays in summary.md
    md = (sweep / "report" / "summary.md").read_text()
    assert "graph_breaks" in md and "update median_ms" in md
    assert max(len(line) for line in md.splitlines()) > TERMINAL_WIDTH
    assert "Best combination: compile=default twin_modules=true" in md and "## Each toggle on its own" in md


def test_the_verdict_says_when_the_best_cell_is_not_clean(tmp_path: Path) -> None:
    report = rp.build_report(rp.load_sweep(two_by_two(tmp_path, learning_off=True)))
    verdict = " ".join(rp.render_table(report, color=False).split("\n\n")[0].split())
    assert "Best combination: compile=default twin_modules=true:" in verdict and verdict.endswith("LEARNING differs")
    best = cell(report, compile="default", twin_modules="true")
    best.flags.append("drift")
    text = rp.render_table(report, color=False)
    verdict = " ".join(text.split("\n\n")[0].split())  # the verdict wraps onto a second line
    assert "Best combination: compile=default twin_modules=true: 1.65x" in verdict
    assert "end to end; NOT CLEAN (drift), LEARNING differs" in verdict
    assert "compile=default twin_modules=true: NOT CLEAN: drift" in text
    assert all(len(line) <= TERMINAL_WIDTH for line in text.splitlines())


def test_long_cell_labels_wrap_inside_their_column(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    num = 0
    for comp, rate in (("none", 100.0), ("max-autotune-no-cudagraphs", 130.0)):
        for dt in ("float32", "bfloat16"):
            rec = make_record(compile=comp, rate=rate * (1.1 if dt == "bfloat16" else 1.0),
                              extra_overrides=(f"dtype={dt}", "backend.matmul_precision=highest"))
            rec["toggles"]["dtype"]["value"] = dt
            write_job(sweep, num, rec)
            num += 1
    report = rp.build_report(rp.load_sweep(sweep))
    text = rp.render_table(report, color=True)
    visible = [line.replace("\x1b[1;32m", "").replace("\x1b[1;31m", "").replace("\x1b[0m", "")
               for line in text.splitlines()]
    assert max(len(line) for line in visible) <= TERMINAL_WIDTH
    verdict = " ".join(" ".join(visible).split("  ")).split("Best combination: ")[1]
    assert verdict.startswith("compile=max-autotune-no-cudagraphs dtype=bfloat16: 1.43x")


def test_a_sweep_without_a_comparison_says_so(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    write_job(sweep, 0, make_record(rate=100))
    report = rp.build_report(rp.load_sweep(sweep))
    assert rp.render_table(report, color=False).splitlines()[0].startswith("Verdict: no comparison:")


# ------------------------------------------------------------------- sweeps of a hyper-parameter


def test_a_hyper_parameter_sweep_compares_with_the_configs_default(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = hyper_sweep(tmp_path, ["0.001", "0.0003"], [150.0, 100.0], default=0.0003)
    assert rp.main([str(sweep), "--no-plots", "--no-wandb"]) == 0
    out = capsys.readouterr().out
    assert "Baseline: algo.lr=0.0003 (the config's default)" in out
    assert out.splitlines()[0].startswith("Best cell: algo.lr=0.001: 1.50x steady (no interval (1 seed; 3 or more give one)")
    report = rp.build_report(rp.load_sweep(sweep))
    assert report.baseline_labels == ["algo.lr=0.0003"]
    assert cell(report, **{"algo.lr": "0.001"}).ratio == pytest.approx(1.5)
    assert "the config's default" in (sweep / "report" / "summary.md").read_text()


def test_a_hyper_parameter_sweep_without_its_default_compares_with_the_first_value_listed(tmp_path: Path) -> None:
    # listed 0.001 first though its job ran second: the listing, not the run order, decides
    sweep = hyper_sweep(tmp_path, ["0.0003", "0.001"], [100.0, 150.0], default=0.01)
    (sweep / "multirun.yaml").write_text((sweep / "multirun.yaml").read_text().replace(
        "algo.lr=0.0003,0.001", "algo.lr=0.001,0.0003"))
    report = rp.build_report(rp.load_sweep(sweep))
    assert report.baseline_labels == ["algo.lr=0.001"]
    assert report.baseline_why == (
        "algo.lr=0.001 (the first value listed; the config's default algo.lr=0.01 was not swept)")
    assert cell(report, **{"algo.lr": "0.0003"}).ratio == pytest.approx(100 / 150)
    # without multirun.yaml: the value of the sweep's first job
    report = rp.build_report(rp.load_sweep(hyper_sweep(tmp_path / "bare", ["0.0003", "0.001"], [100.0, 150.0],
                                                       default=None)))
    assert report.baseline_labels == ["algo.lr=0.0003"]
    assert "the value of the sweep's first job" in report.baseline_why


def test_a_swept_config_group_compares_with_the_default_choice(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    for num, (algo, rate) in enumerate((("dqn", 80.0), ("ppo", 100.0))):
        rec = make_record(rate=rate, extra_overrides=(f"algo={algo}",))
        rec["algo"] = algo
        write_job(sweep, num, rec)
    cfg = {"algo": {"name": "ppo", "lr": 0.001}, "hydra": {
        "overrides": {"task": ["algo=dqn,ppo"]}, "sweeper": {"params": None},
        "runtime": {"choices": {"algo": "ppo"}}}}
    (sweep / "multirun.yaml").write_text(yaml.safe_dump(cfg))
    report = rp.build_report(rp.load_sweep(sweep))
    assert report.baseline_labels == ["algo=ppo"] and report.baseline_reasons == {"algo": "the config's default"}
    assert cell(report, algo="dqn").ratio == pytest.approx(0.8)


def test_toggles_keep_hyper_parameters_as_context(tmp_path: Path) -> None:
    """With a toggle swept, each value of a hyper-parameter keeps its own toggles-off baseline."""
    sweep = tmp_path / "sweep"
    num = 0
    for lr, scale in (("0.001", 1.0), ("0.0003", 2.0)):
        for comp, rate in (("none", 100.0), ("default", 150.0)):
            write_job(sweep, num, make_record(compile=comp, rate=rate * scale, extra_overrides=(f"algo.lr={lr}",)))
            num += 1
    report = rp.build_report(rp.load_sweep(sweep))
    assert sorted(report.baseline_labels) == ["algo.lr=0.0003 compile=none", "algo.lr=0.001 compile=none"]
    assert all(c.ratio == pytest.approx(1.5) for c in report.cells if not c.is_baseline)


def test_a_report_that_cannot_be_written_says_why_and_exits_non_zero(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sweep = make_sweep(tmp_path, {("none", False): [100], ("default", False): [150]})
    blocked = tmp_path / "a-file"
    blocked.write_text("not a folder")
    assert rp.main([str(sweep), "--out", str(blocked), "--no-wandb"]) != 0
    err = capsys.readouterr().err
    assert "cannot write report" in err and "Traceback" not in err
    assert rp.main([str(sweep), "--baseline", "compile=reduce-overhead"]) != 0
    assert "no cell matches baseline compile=reduce-overhead" in capsys.readouterr().err


# ---------------------------------------------------------------------------------- plots


def test_ratio_plot_shows_each_toggle_then_each_cell_both_ratios_their_intervals_and_the_tables_marks(
        tmp_path: Path) -> None:
    report = rp.build_report(rp.load_sweep(two_by_two(tmp_path, learning_off=True)))
    flagged = cell(report, compile="none", twin_modules="true")
    flagged.flags.append("drift")
    fig = ratio_figure(report)
    ax = fig.axes[0]
    steady, e2e = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    rows = [e for e in report.marginal_effects] + [c for c in report.cells if c.ratio is not None]
    assert list(steady.lines[0].get_xdata()) == pytest.approx(
        [e.effect for e in report.marginal_effects] + [c.ratio for c in report.cells])
    assert list(e2e.lines[0].get_xdata()) == pytest.approx(
        [e.end_to_end for e in report.marginal_effects] + [c.end_to_end_ratio for c in report.cells])
    assert steady.lines[0].get_color() != e2e.lines[0].get_color()
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[:2] == ["compile: none -> default (own effect)", "twin_modules: false -> true (own effect)"]
    assert len(labels) == len(rows)
    # the end-to-end points carry their interval: the best cell's spans [ci_low, ci_high]
    best = cell(report, compile="default", twin_modules="true")
    assert best.end_to_end_ci_low < best.end_to_end_ratio < best.end_to_end_ci_high
    spans = [tuple(sorted(seg[:, 0])) for seg in e2e.lines[2][0].get_segments()]
    assert (pytest.approx(best.end_to_end_ci_low), pytest.approx(best.end_to_end_ci_high)) in [
        (pytest.approx(lo), pytest.approx(hi)) for lo, hi in spans]
    # a log axis fitted to the data: from just below the lowest interval to just above the highest
    assert ax.get_xscale() == "log"
    low, high = ax.get_xlim()
    assert 0.8 < low < 1.0 and 1.65 < high < 2.2
    legend = [t.get_text() for t in ax.get_legend().get_texts()]
    assert any("steady state" in t for t in legend) and any("end to end" in t for t in legend)
    assert any("NOT CLEAN" in t for t in legend) and any("LEARNING" in t for t in legend)
    marks = {t.get_text(): t.get_position()[1] for t in ax.texts}
    ticks = {t.get_text(): y for t, y in zip(ax.get_yticklabels(), ax.get_yticks())}
    assert abs(marks["NOT CLEAN (drift)"] - ticks[flagged.label]) < 0.5
    assert abs(marks["LEARNING"] - ticks[best.label]) < 0.5
    assert len(ax.texts) == 3  # only the rows the tables flag are marked (twin_modules changed the numbers too)


def test_learning_curves_tell_identical_cells_apart(tmp_path: Path) -> None:
    report = rp.build_report(rp.load_sweep(make_sweep(tmp_path, TWO_BY_TWO)))  # identical curves
    fig = learning_figure(report)
    ax = fig.axes[0]
    bold = [line for line in ax.get_lines() if line.get_linewidth() > 1.0]
    assert len(bold) == len(report.cells)
    for attribute in (lambda line: to_rgb(line.get_color()), Line2D.get_linestyle, Line2D.get_marker):
        assert len({attribute(line) for line in bold}) == len(report.cells)
    # same data: told apart by style, not by moving a curve
    assert all(np.array_equal(line.get_ydata(), bold[0].get_ydata()) for line in bold)
    # each cell's seed lines are drawn in that cell's colour
    seed_colors = [tuple(coll.get_colors()[0][:3]) for coll in ax.collections if isinstance(coll, LineCollection)]
    expected = [to_rgb(line.get_color()) for line in bold]
    assert len(seed_colors) == len(expected)
    assert all(np.allclose(got, want) for got, want in zip(seed_colors, expected))
    legend = [t.get_text() for t in fig.axes[2].get_legend().get_texts()]
    assert all(any(c.label in t for t in legend) for c in report.cells)


def test_report_files_and_terminal_summary_match_the_golden_copies(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Byte for byte: a refactor of the report keeps what a user reads (regenerate the copies in
    tests/golden/ only for an intended change of output)."""
    golden = Path(__file__).parent / "golden"
    monkeypatch.chdir(tmp_path)
    sweep = two_by_two(Path("multirun") / "x" / "y", learning_off=True)
    assert rp.main([str(sweep), "--no-plots", "--no-wandb"]) == 0
    assert capsys.readouterr().out == (golden / "report_2x2_terminal.txt").read_text()
    for name in ("summary.md", "summary.csv"):
        assert (sweep / "report" / name).read_bytes() == (golden / f"report_2x2_{name}").read_bytes(), name
