"""Hydra callback: check every job's config before the first job starts.

``on_run_start`` / ``on_multirun_start`` run in the launching process before Hydra creates any
output folder. For a multirun with the basic sweeper, the sweep is expanded exactly as the
sweeper will expand it and every job's config is composed and validated, so a bad value in the
8th job of a sweep fails before the 1st one runs.
"""

from __future__ import annotations

import sys
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlsweep.config import to_object
from rlsweep.validate import validate

#: set in the launching process by on_multirun_start: where the sweep writes (for the report)
LAST_SWEEP_DIR: list[str] = []


def _fail(lines: list[str], job: str | None = None) -> None:
    where = f" (job with overrides: {job})" if job else ""
    msg = "\n".join(f"  - {line}" for line in lines)
    print(f"rlsweep: invalid configuration{where}:\n{msg}\nNothing was run.", file=sys.stderr)
    raise SystemExit(2)


def _check(cfg: DictConfig, *, check_device: bool, job: str | None = None) -> None:
    try:
        errors = validate(to_object(cfg), check_device=check_device)
    except Exception as exc:  # noqa: BLE001 - e.g. an interpolation that cannot resolve
        errors = [f"{type(exc).__name__}: {exc}"]
    if errors:
        _fail(errors, job)


def _runs_elsewhere(config: DictConfig) -> bool:
    target = str(OmegaConf.select(config, "hydra.launcher._target_", default="") or "")
    return "Slurm" in target


class RLSweepCallback(Callback):
    def on_run_start(self, config: DictConfig, **kwargs: Any) -> None:
        _check(config, check_device=True)

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        LAST_SWEEP_DIR[:] = [str(config.hydra.sweep.dir)]
        check_device = not _runs_elsewhere(config)
        for overrides in _expand_sweep(config):
            cfg = _compose(config, overrides)
            _check(cfg, check_device=check_device, job=" ".join(overrides))


def _expand_sweep(config: DictConfig) -> list[list[str]]:
    """Every job's override list, as Hydra's basic sweeper will produce them."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    task = list(OmegaConf.to_container(config.hydra.overrides.task, resolve=False))
    sweeper_target = str(OmegaConf.select(config, "hydra.sweeper._target_", default=""))
    if not sweeper_target.endswith("BasicSweeper"):
        return [task]  # other sweepers choose jobs as they go: check the base config only
    params = OmegaConf.select(config, "hydra.sweeper.params", default=None) or {}
    extra = [f"{k}={v}" for k, v in params.items()]
    parsed = OverridesParser.create().parse_overrides(extra + task)
    batches = BasicSweeper.split_arguments(parsed, max_batch_size=None)
    return [list(job) for batch in batches for job in batch]


def _compose(config: DictConfig, overrides: list[str]) -> DictConfig:
    from hydra import compose

    return compose(config_name=config.hydra.job.config_name, overrides=overrides)
