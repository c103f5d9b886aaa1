from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from helpers import read_wandb_run, run_train

from rlsweep.records import read_result
from rlsweep.toggles import TOGGLES

#: every toggle on at once, in one real job (python -m sweeps.train, W&B offline)
ALL_ON = [override for toggle in TOGGLES for override in toggle.on]


@pytest.fixture(scope="session")
def all_toggles_job(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    out = tmp_path_factory.mktemp("all_toggles")
    proc = run_train([*ALL_ON, "experiment=smoke", "logger.mode=offline", "progress=false",
                      f"hydra.run.dir={out}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(out)
    run_dir = record["logging"]["wandb_run_dir"]
    assert run_dir and Path(run_dir).is_dir()
    return {"record": record, **read_wandb_run(run_dir)}
