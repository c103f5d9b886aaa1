"""Weights & Biases, offline-first. Logging never kills a training job.

Every wandb call goes through :class:`Tracker`, which catches its errors, records them in
``errors`` (they end up in the result record) and stops logging for the rest of the job.
"""

from __future__ import annotations

import hashlib
import logging
import netrc
import os
from pathlib import Path
from typing import Any

from rlsweep.config import LoggerConfig

log = logging.getLogger(__name__)


def has_wandb_credentials() -> bool:
    """True when ``wandb login`` or WANDB_API_KEY provides a key (no network involved)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    path = os.environ.get("NETRC", str(Path.home() / ".netrc"))
    try:
        hosts = netrc.netrc(path).hosts
    except (OSError, netrc.NetrcParseError):
        return False
    base = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].rstrip("/")
    return any(base in host for host in hosts)


def stable_run_id(output_dir: Path) -> str:
    """A W&B run id derived from the job's folder: a requeued or resumed job continues the same run."""
    return hashlib.sha1(str(Path(output_dir).resolve()).encode()).hexdigest()[:16]


def flatten(d: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten(v, key + "."))
        else:
            out[key] = v
    return out


class Tracker:
    """One W&B run for one job (or nothing, in ``disabled`` mode)."""

    def __init__(
        self,
        cfg: LoggerConfig,
        output_dir: Path,
        *,
        name: str,
        group: str,
        job_type: str,
        tags: list[str],
        config: dict[str, Any],
        run_id: str,
    ) -> None:
        self.errors: list[str] = []
        self.run: Any = None
        self.run_dir: str | None = None
        self.mode = cfg.mode
        if cfg.mode == "disabled":
            return
        try:
            import wandb

            self.run = wandb.init(
                mode=cfg.mode,
                project=cfg.project,
                entity=cfg.entity,
                group=group,
                job_type=job_type,
                name=name,
                tags=tags,
                config=config,
                id=run_id,
                resume="allow",
                dir=str(output_dir),
                reinit="finish_previous",
                settings=wandb.Settings(
                    console="off",  # the job's output stays in the job's log, not in W&B
                    x_disable_stats=True,  # no sampling thread competing with the timed loop
                    disable_git=True,
                    save_code=False,
                    silent=True,
                ),
            )
            self.run_dir = str(Path(self.run.dir).parent)
        except Exception as exc:  # noqa: BLE001 - logging must never stop training
            self._fail("init", exc)

    def _fail(self, what: str, exc: BaseException) -> None:
        msg = f"wandb {what} failed: {type(exc).__name__}: {exc}"
        log.warning("%s (training continues; W&B logging stopped)", msg)
        self.errors.append(msg)
        self.run = None

    def log(self, metrics: dict[str, Any], step: int) -> None:
        if self.run is None:
            return
        try:
            self.run.log(metrics, step=step)
        except Exception as exc:  # noqa: BLE001
            self._fail("log", exc)

    def summary(self, values: dict[str, Any]) -> None:
        if self.run is None:
            return
        try:
            self.run.summary.update(values)
        except Exception as exc:  # noqa: BLE001
            self._fail("summary", exc)

    def preempted(self) -> None:
        """Flush and close the run now: the job is about to be requeued (the same id continues)."""
        if self.run is None:
            return
        try:
            self.run.mark_preempting()
        except Exception as exc:  # noqa: BLE001
            self._fail("mark_preempting", exc)
        self.finish(failed=True)

    def finish(self, failed: bool) -> None:
        if self.run is None:
            return
        try:
            self.run.finish(exit_code=1 if failed else 0)
        except Exception as exc:  # noqa: BLE001
            self._fail("finish", exc)
        self.run = None
