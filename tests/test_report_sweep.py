"""A real local sweep through ``python -m sweeps.train -m``, then its report.

One 8-job sweep (twin_modules x inplace x 2 seeds, smoke budget, W&B offline) is shared by the
tests below: the report it ends with (files, numbers, the W&B report run) and a second report
with another baseline. ``inplace``/``twin_modules`` rather than ``compile`` keep it to 10-45 s on
2 CPU cores (compile would add a cold inductor cache's minutes).
"""

from __future__ import annotations

import csv
import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT, read_wandb_run, run_train
from matplotlib.image import imread

pytestmark = pytest.mark.slow

REPORT_FILES = {
    "summary.csv",
    "summary.md",
    "report.json",
    "ratio.png",
    "phases.png",
    "learning_curves.png",
}


@pytest.fixture(scope="module")
def sweep(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # a sweep folder shaped like Hydra's default: the W&B group is its last two components
    sweep_dir = tmp_path_factory.mktemp("sweep") / "multirun" / "2026-11-29" / "21-00-00"
    proc = run_train(
        [
            "-m",
            "experiment=smoke",
            "progress=false",
            "algo.update_epochs=2",
            "twin_modules=false,true",
            "inplace=false,true",
            "seed=0,1",
            "logger.mode=offline",
            f"hydra.sweep.dir={sweep_dir}",
        ]
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert "W&B (offline) report run in group 2026-11-29/21-00-00" in proc.stdout
    return sweep_dir


def job_records(sweep: Path) -> list[dict]:
    records = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/result.json"))]
    assert len(records) == 8 and all(r["status"] == "ok" for r in records)
    return records


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as fh:
        return list(csv.DictReader(fh))


def test_report_files_and_ratios(sweep: Path) -> None:
    out = sweep / "report"
    assert REPORT_FILES <= {p.name for p in out.iterdir()}
    for name in ("ratio.png", "phases.png", "learning_curves.png"):
        height, width = imread(out / name).shape[:2]  # decodes the whole PNG
        assert width >= 300 and height >= 200, (name, width, height)
    rows = read_csv(out / "summary.csv")
    assert len(rows) == 4
    assert {(r["twin_modules"], r["inplace"]) for r in rows} == {
        (t, i) for t in ("false", "true") for i in ("false", "true")
    }
    data = json.loads((out / "report.json").read_text())
    assert data["counts"] == {"ok": 8, "failed": 0, "interrupted": 0, "missing": 0}
    others = [c for c in data["cells"] if not c["is_baseline"]]
    assert len(others) == 3
    for cell in others:
        assert cell["ratio"] > 0 and cell["ci_method"] == "paired by seed", cell["label"]
        assert cell["ci_low"] <= cell["ratio"] <= cell["ci_high"], cell["label"]
    assert {m["toggle"] for m in data["marginal_effects"]} == {"twin_modules", "inplace"}


def test_the_basic_launcher_ran_the_cells_interleaved_seed_major(sweep: Path) -> None:
    """Every cell's seed 0 ran before any seed 1 (drift spreads over all cells); numbers and folders stay."""
    records = job_records(sweep)
    ran = sorted(records, key=lambda r: r["started_at"])
    assert [r["seed"] for r in ran] == [0] * 4 + [1] * 4
    cells = [(r["config"]["twin_modules"], r["config"]["inplace"]) for r in ran]
    assert cells[4:] == cells[:4][::-1]  # the cells' order alternates from one seed to the next
    assert sorted(r["job"]["num"] for r in records) == list(range(8))
    assert all(Path(r["job"]["output_dir"]).name == str(r["job"]["num"]) for r in records)
    assert {r["job"]["launcher"] for r in records} == {"BasicLauncher"}


def test_the_report_says_the_run_order_and_both_ratios(sweep: Path) -> None:
    """Seed-major, one job at a time (so no oversubscription flag); each cell's end-to-end ratio is the
    geometric mean over seeds of the baseline's wall_s over its own, seed by seed, with an interval."""
    data = json.loads((sweep / "report" / "report.json").read_text())
    assert data["run_order"]["order"] == "seed-major" and data["run_order"]["max_concurrent"] == 1
    md = (sweep / "report" / "summary.md").read_text()
    assert "Run order: interleaved, seed-major" in md and "## Steady state and end to end" in md
    assert "the cells' order alternating from one seed to the next" in md
    walls: dict[tuple[str, str], dict[int, float]] = {}
    for rec in job_records(sweep):
        key = (str(rec["config"]["twin_modules"]).lower(), str(rec["config"]["inplace"]).lower())
        walls.setdefault(key, {})[rec["seed"]] = rec["wall_s"]
    cells = {(c["key"]["twin_modules"], c["key"]["inplace"]): c for c in data["cells"]}
    base = next(c for c in data["cells"] if c["is_baseline"])
    base_walls = walls[base["key"]["twin_modules"], base["key"]["inplace"]]
    for key, c in cells.items():
        assert "oversubscribed" not in c["flags"], c["label"]
        assert c["wall_s"] == statistics.median(walls[key].values())
        assert c["end_to_end_ratio"] == pytest.approx(statistics.geometric_mean(
            base_walls[s] / w for s, w in walls[key].items()), rel=1e-9)
        if not c["is_baseline"]:
            assert c["end_to_end_ci_method"] == "paired by seed"
            assert c["end_to_end_ci_low"] <= c["end_to_end_ratio"] <= c["end_to_end_ci_high"]
        assert len(c["job_drift"]) == 2  # the smoke budget's 7 steady iterations: 2 per third


def test_summary_numbers_are_medians_of_job_results(sweep: Path) -> None:
    rates: dict[tuple[str, str], dict[int, float]] = {}
    for rec in job_records(sweep):
        key = (str(rec["config"]["twin_modules"]).lower(), str(rec["config"]["inplace"]).lower())
        rates.setdefault(key, {})[rec["seed"]] = rec["throughput"]["env_steps_per_s"]
    rows = read_csv(sweep / "report" / "summary.csv")
    for row in rows:
        seeds = list(rates[(row["twin_modules"], row["inplace"])].values())
        assert len(seeds) == 2 and row["n_ok"] == "2"
        assert float(row["env_steps_per_s"]) == statistics.median(seeds), row["cell"]
        assert sorted(map(float, row["env_steps_per_s_seeds"].split(";"))) == sorted(seeds)
    base = next(r for r in rows if r["is_baseline"] == "True")
    base_rates = rates[(base["twin_modules"], base["inplace"])]
    for row in rows:  # the ratio: the geometric mean over seeds of each seed's rate over the baseline's same seed
        own = rates[(row["twin_modules"], row["inplace"])]
        assert float(row["ratio"]) == pytest.approx(
            statistics.geometric_mean(own[s] / base_rates[s] for s in own), rel=1e-9)


def test_wandb_report_run_in_the_sweeps_group(sweep: Path) -> None:
    (run_dir,) = (sweep / "report" / "wandb").glob("offline-run-*")
    run = read_wandb_run(run_dir)
    job_run = read_wandb_run(job_records(sweep)[0]["logging"]["wandb_run_dir"])
    assert run["group"] == job_run["group"] == "2026-11-29/21-00-00"
    assert (run["job_type"], run["name"], run["exit_code"]) == ("report", "report", 0)
    summary = run["summary"]
    header = next(csv.reader((sweep / "report" / "summary.csv").open()))
    cells, effects = summary["report/cells"], summary["report/marginal_effects"]
    assert cells["_type"] == effects["_type"] == "table-file"
    assert (cells["nrows"], cells["ncols"], effects["nrows"]) == (4, len(header), 2)
    table = json.loads((run_dir / "files" / cells["path"]).read_text())
    assert table["columns"] == header
    for name in ("ratio", "phases", "learning_curves"):
        image = summary[f"plots/{name}"]
        assert image["_type"] == "image-file" and image["width"] >= 300, name
    assert summary["report/n_ok"] == 8
    assert run["history"] and "report/cells._type" in run["history"][0]


def test_report_again_with_another_baseline(sweep: Path) -> None:
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sweeps.report",
            str(sweep),
            "--baseline",
            "twin_modules=true",
            "--no-wandb",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert "W&B" not in proc.stdout
    data = json.loads((sweep / "report" / "report.json").read_text())
    assert data["baseline"]["spec"] == {"twin_modules": "true", "inplace": "false"}
    assert data["baseline"]["cells"] == ["inplace=false twin_modules=true"]  # toggles in TOGGLES order
    assert len(list((sweep / "report" / "wandb").glob("offline-run-*"))) == 1
