"""No secret from the environment in anything a job writes.

Jobs run through `python -m sweeps.train` with canary credentials in the environment; then every
byte of every file they produced (records, .hydra/, logs, checkpoints, W&B's binary run files,
the sweep's report) and their console output are searched for the canaries.
"""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from helpers import COMMON, TINY, read_wandb_run, run_train

from rlsweep.records import read_result
from rlsweep.tracking import REDACTED, secret_values

_TAG = uuid.uuid4().hex[:12]
CANARIES = {
    "WANDB_API_KEY": f"canary-wandb-{_TAG}",  # W&B's own variable: offline mode must still work
    "AWS_SECRET_ACCESS_KEY": f"canary-aws-{_TAG}",
    "GITHUB_TOKEN": f"canary-github-{_TAG}",
    "MY_SERVICE_TOKEN": f"canary-service-{_TAG}",
    "DB_PASSWORD": f"canary-db-{_TAG}",
}
FAST = [*TINY["ppo"], *COMMON[:-1]]  # without COMMON's logger.mode=disabled: W&B writes here


def _leaks(root: Path, texts: list[str]) -> list[str]:
    """``path: canary`` for every file under ``root`` whose bytes hold a canary."""
    found = []
    files = [p for p in root.rglob("*") if p.is_file() and not p.is_symlink()]
    assert files
    for path in files:
        data = path.read_bytes()
        found += [f"{path}: {name}" for name, value in CANARIES.items() if value.encode() in data]
    for text in texts:
        found += [f"console output: {name}" for name, value in CANARIES.items() if value in text]
    return found


def test_canaries_are_recognised_as_secrets() -> None:
    assert set(secret_values(CANARIES)) == set(CANARIES.values())
    assert secret_values({"PATH": "/usr/bin:/bin", "HOME": "/root", "OMP_NUM_THREADS": "1"}) == []


def test_a_finished_job_writes_no_secret(tmp_path: Path) -> None:
    out = tmp_path / "run"
    proc = run_train([*FAST, "logger.mode=offline", f"hydra.run.dir={out}"], env=CANARIES)
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(out)
    assert record["status"] == "ok" and record["logging"]["errors"] == []  # offline W&B works with a key set
    assert list((out / "wandb").glob("offline-run-*/run-*.wandb"))
    assert _leaks(out, [proc.stdout, proc.stderr]) == []


def test_a_failed_sweep_with_a_checkpoint_writes_no_secret_even_when_the_config_reads_one(tmp_path: Path) -> None:
    """A secret pulled into the config by interpolation is redacted from records and W&B; the job
    crashes after writing checkpoints, so its checkpoint, traceback and the sweep's report are searched too."""
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", *FAST, "logger.mode=offline", "env.id=tests.fault_envs:CrashingCartPole-v0",
                      "checkpoint_interval_s=0.000001", "logger.group=team-${oc.env:MY_SERVICE_TOKEN}",
                      "logger.tags=[${oc.env:GITHUB_TOKEN}]", f"hydra.sweep.dir={sweep}"], env=CANARIES)
    assert proc.returncode != 0
    job = sweep / "0"
    record = read_result(job)
    assert record["status"] == "failed" and "injected fault" in record["error"]
    assert (job / "checkpoint.pt").stat().st_size > 0
    assert (sweep / "multirun.yaml").is_file() and (sweep / "report" / "summary.md").is_file()
    assert record["config"]["logger"]["group"] == f"team-{REDACTED}"
    assert record["config"]["logger"]["tags"] == [REDACTED]
    run = read_wandb_run(record["logging"]["wandb_run_dir"])
    assert run["group"] == f"team-{REDACTED}" and run["config"]["logger.group"] == f"team-{REDACTED}"
    assert REDACTED in run["tags"]
    assert _leaks(sweep, [proc.stdout, proc.stderr]) == []


@pytest.mark.parametrize("name", ["HF_TOKEN", "SOME_API_KEY", "PGPASSWORD", "AWS_SESSION_TOKEN", "CLIENT_SECRET"])
def test_credential_like_names_are_covered(name: str) -> None:
    assert secret_values({name: "s3cr3t-value"}) == ["s3cr3t-value"]
