"""scripts/gpu_check.sh, the prepared device check: ready to run when a GPU is lent.

Here there is no GPU: the script must parse, refuse to pretend on a CPU, and (slow tier) run
every step on the CPU when asked to, producing the archive the device run would bring back.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
import torch
from helpers import ROOT

SCRIPT = ROOT / "scripts" / "gpu_check.sh"


def test_the_script_parses() -> None:
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)


@pytest.mark.skipif(torch.cuda.is_available(), reason="there is a GPU: the script would run")
def test_without_a_gpu_it_says_so_and_runs_nothing(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "GPU_CHECK_ALLOW_CPU"}
    proc = subprocess.run(["bash", str(SCRIPT)], env={**env, "OUT": str(tmp_path)}, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 2
    assert "no CUDA device: nothing to check" in proc.stdout
    assert not (tmp_path / "gpu_results" / "sweeps").exists()


@pytest.mark.slow
@pytest.mark.timeout(1700)  # the script's own CPU deadline is 1500 s
@pytest.mark.skipif(torch.cuda.is_available(), reason="there is a GPU: run the real check instead")
def test_the_cpu_fallback_runs_every_step_and_packs_the_tables(tmp_path: Path) -> None:
    proc = subprocess.run(["bash", str(SCRIPT)], env={**os.environ, "OUT": str(tmp_path), "GPU_CHECK_ALLOW_CPU": "1"},
                          capture_output=True, text=True, timeout=1600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    dest = tmp_path / "gpu_results"
    steps = dict(line.split("\t")[:2] for line in (dest / "steps.tsv").read_text().splitlines()[1:])
    sweeps = ("ppo_seeds", "ppo_seeds_many", "dqn_seeds", "sac_seeds", "ppo_compile", "sac_copies", "atari_ppo")
    assert {"fingerprint", "cuda_tests", "claims", *(f"sweep_{name}" for name in sweeps)} == set(steps), steps
    # pytest -m cuda: every test skipped here, which pytest reports as exit 0 (5 when none is collected)
    failed = {name: rc for name, rc in steps.items() if rc != "0" and name != "cuda_tests"}
    assert not failed, f"{failed}\n" + (dest / "gpu_check.log").read_text()[-6000:]
    assert steps["cuda_tests"] in ("0", "5"), steps
    for name in sweeps:  # every job left its record: the reports are made from them afterwards
        jobs = [d for d in (dest / "sweeps" / name).iterdir() if d.name.isdigit()]
        assert jobs and all((d / "result.json").is_file() for d in jobs), name
    with tarfile.open(tmp_path / "gpu_results.tgz") as tar:
        names = tar.getnames()
    assert "gpu_results/fingerprint.json" in names and "gpu_results/claims.json" in names
    assert all(f"gpu_results/sweeps/{name}/0/result.json" in names for name in sweeps), names
