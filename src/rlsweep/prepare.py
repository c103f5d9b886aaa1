"""A sweep's preparation: every cell's one-off costs paid, and measured, before the first timed job
(docs/guide/measuring.md), so that a sweep does not measure the order of its jobs.

* **cold run** (compiled cells): a fresh process trains the cell until warm on an empty private compile
  cache (its cold compile), then merges what it built into ``compile.cache_dir``.
* **warm pass** (the basic launcher only): the launching process trains each cell until warm once.

What it measured goes to the sweep's ``prepare.json`` (this module is its one reader and writer).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import shutil
import tempfile
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlsweep import records
from rlsweep.launchers import run_limited
from rlsweep.records import override_key, read_json, write_json_atomic
from rlsweep.results import utc_now

if TYPE_CHECKING:
    from rlsweep.config import TrainConfig

log = logging.getLogger(__name__)

PREPARE_FILE = "prepare.json"
#: where, in the sweep folder, submitit keeps the preparation's processes (logs, pickles)
SUBMITIT_FOLDER = ".submitit_prepare"
#: the config key that turns the preparation off (``prepare=false``)
PREPARE_KEY = "prepare"
#: keys of a job's overrides that do not make another cell: the repeat, switches of one invocation
_NOT_CELL_KEYS = ("seed", "resume", PREPARE_KEY)


def cell_key(overrides: Sequence[str]) -> tuple[str, ...]:
    """A job's cell: its overrides without the seed, invocation switches and ``hydra.*`` settings."""
    return tuple(o for o in records.cell_key(overrides, _NOT_CELL_KEYS) if not override_key(o).startswith("hydra."))


def cells(job_overrides: Sequence[Sequence[str]]) -> list[list[str]]:
    """The first job's overrides of each cell, in the sweep's order."""
    first: dict[tuple[str, ...], list[str]] = {}
    for overrides in job_overrides:
        first.setdefault(cell_key(overrides), list(overrides))
    return list(first.values())


def with_group_sizes(cell_configs: list[tuple[list[str], TrainConfig]], job_overrides: Sequence[Sequence[str]],
                     finished: Sequence[bool], groups: list[list[int]]) -> list[tuple[list[str], TrainConfig]]:
    """``cell_configs``, each cell once for every number of seeds one of its process ``groups`` trains, largest first
    (a cell's last group may be smaller, a resumed one's lose their finished seeds): compiled shapes have the seeds."""
    sizes: dict[tuple[str, ...], set[int]] = {}
    for group in groups:
        trained = sum(1 for i in group if not finished[i])
        if trained:
            sizes.setdefault(cell_key(job_overrides[group[0]]), set()).add(trained)
    out = []
    for overrides, cfg in cell_configs:
        trained = sorted(sizes.get(cell_key(overrides)) or {cfg.seeds_per_job}, reverse=True)
        out += [(overrides, cfg if n == cfg.seeds_per_job else dataclasses.replace(cfg, seeds_per_job=n))
                for n in trained]
    return out


def compiles(cfg: TrainConfig) -> bool:
    return cfg.compile.mode != "none"


def run_until_warm(cfg: TrainConfig) -> dict[str, Any]:
    """Train ``cfg`` in this process until its one-off costs are paid; what that took."""
    from rlsweep.runner import train_seeds

    quiet = dataclasses.replace(cfg, progress=False)
    t0 = time.perf_counter()
    # as many seeds as the cell's jobs train together: their compiled shapes have the seeds in them
    outcome = train_seeds(quiet, [cfg.seed + i for i in range(cfg.seeds_per_job)], until_warm=True)[0]
    return {"wall_s": round(time.perf_counter() - t0, 3), "env_steps": outcome.env_steps,
            "compile_s": outcome.compile.get("compile_s"), "cache": outcome.compile.get("cache")}


def cold_run(cfg: TrainConfig) -> dict[str, Any]:
    """In a fresh process: run ``cfg`` until warm on an empty compile cache beside the job's (with the
    machine's CPU vector-ISA verdict copied in), then merge what it built into the job's cache."""
    from rlsweep.toggles.compile import VEC_ISA_DIR, compile_cache_dir

    shared = Path(compile_cache_dir(cfg.compile.cache_dir))
    shared.mkdir(parents=True, exist_ok=True)
    private = Path(tempfile.mkdtemp(prefix=".cold-", dir=shared.parent))
    try:
        if (shared / VEC_ISA_DIR).is_dir():
            shutil.copytree(shared / VEC_ISA_DIR, private / VEC_ISA_DIR)
        entry = run_until_warm(dataclasses.replace(cfg, compile=dataclasses.replace(cfg.compile,
                                                                                   cache_dir=str(private))))
        entry["merged_files"] = merge_cache(private, shared)
        entry["cache_dir"] = str(shared)
        return entry
    finally:
        shutil.rmtree(private, ignore_errors=True)


def merge_cache(source: Path, target: Path) -> int:
    """Copy every file of compile cache ``source`` missing from ``target`` (content-addressed: a file
    there is the same file), each renamed into place; returns how many. Lock files stay behind."""
    copied = 0
    for dirpath, dirnames, filenames in os.walk(source):
        dirnames[:] = [d for d in dirnames if d != "locks"]
        rel = Path(dirpath).relative_to(source)
        for name in filenames:
            if name.endswith(".lock"):
                continue
            dst = target / rel / name
            if dst.exists():
                continue
            dst.parent.mkdir(parents=True, exist_ok=True)
            tmp = dst.with_name(f".{name}.{uuid.uuid4().hex}.tmp")
            shutil.copy2(Path(dirpath) / name, tmp)
            os.replace(tmp, dst)
            copied += 1
    return copied


def warm_wandb(cfg: TrainConfig) -> None:
    """Start W&B's helper process with an offline run in a scratch folder, then delete it: the first
    ``wandb.init`` of a process costs more than later ones, which the basic launcher's first job would carry."""
    from rlsweep.tracking import init_run, resolved_logger

    if resolved_logger(cfg.logger).mode == "disabled":
        return
    scratch = tempfile.mkdtemp(prefix="rlsweep-wandb-warm-")
    try:  # through the jobs' own start, so that the warm-up is the same call
        init_run(uuid.uuid4().hex, scratch, save_code=False, mode="offline", project="rlsweep-warm-up").finish()
    except Exception as exc:  # noqa: BLE001 - the jobs log (or say why not) on their own
        log.warning("warming W&B up failed: %s", exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def run_fresh_locally(folder: Path, configs: list[TrainConfig], limit: int, gpus_per_node: int = 0) -> list[Any]:
    """Each config's :func:`cold_run` in a process of its own, started by submitit's local executor (its files in
    ``folder``), at most ``limit`` at once, seeing the GPUs the sweep's jobs see (submitit's local executor shows
    a process only its ``gpus_per_node`` GPUs); each one's entry or the exception it raised."""
    import submitit

    executor = submitit.LocalExecutor(folder=str(folder / "%j"))
    executor.update_parameters(timeout_min=24 * 60, gpus_per_node=gpus_per_node)

    def outcome(i: int, job: Any) -> Any:
        try:
            return job.result()
        except Exception as exc:  # noqa: BLE001 - recorded in prepare.json; the cell's jobs still run
            return exc

    return list(run_limited(range(len(configs)), limit, lambda i: executor.submit(cold_run, configs[i]), outcome,
                            lambda running, _pending: [job.cancel() for job in running]).values())


def prepare_sweep(sweep_dir: Path, cell_configs: Sequence[tuple[list[str], TrainConfig]], *, in_process: bool,
                  launcher: str, limit: int = 1, gpus_per_node: int = 0) -> None:
    """Prepare every cell (``cell_configs``: its overrides and first job's config); write ``prepare.json``.

    Args:
        in_process: also run the warm pass in this process (the timed jobs will run here).
        limit, gpus_per_node: of the cold runs (:func:`run_fresh_locally`); Slurm runs them one after
            another on the node of a job of their own, which the sweep's jobs wait for (a dependency).
    """
    if not cell_configs:  # nothing to prepare (prepare=false, or a resumed sweep with every job done)
        return
    t0 = time.perf_counter()
    compiled = [(o, c) for o, c in cell_configs if compiles(c)]
    if compiled:
        log.info("preparing the sweep: %d compiled cell(s) compile once each, untimed, on an empty cache",
                 len(compiled))
    # one outcome per compiled cell, in their order
    outcomes = iter(run_fresh_locally(Path(sweep_dir) / SUBMITIT_FOLDER, [c for _, c in compiled], limit,
                                      gpus_per_node) if compiled else [])
    if in_process:
        warm_wandb(cell_configs[0][1])
    entries = []
    for overrides, cfg in cell_configs:
        entry: dict[str, Any] = {"cell": list(cell_key(overrides)), "seeds": cfg.seeds_per_job,
                                 "compiled": compiles(cfg), "cold": None, "warm": None}
        parts = {"cold": next(outcomes)} if entry["compiled"] else {}  # each: what it measured, or why it failed
        if in_process:
            log.info("preparing the sweep: cell %s, untimed", " ".join(cell_key(overrides)) or "(no overrides)")
            try:
                parts["warm"] = run_until_warm(cfg)
            except Exception as exc:  # noqa: BLE001 - the cell's jobs run and record their own failure
                log.warning("preparing cell %s (warm pass) failed: %s: %s", " ".join(overrides) or "(no overrides)",
                            type(exc).__name__, exc)
                parts["warm"] = exc
        for part, out in parts.items():
            entry[part] = ({"status": "failed", "error": f"{type(out).__name__}: {out}"}
                           if isinstance(out, BaseException) else {"status": "ok", **out})
        entries.append(entry)
    # a resumed sweep prepares only its unfinished cells: the others keep what was measured before
    done = {tuple(e["cell"]) for e in entries}
    kept = [e for e in (read_prepare(sweep_dir) or {}).get("cells") or [] if tuple(e.get("cell") or ()) not in done]
    record = {"launcher": launcher, "in_process": in_process, "written_at": utc_now(),
              "prepare_s": round(time.perf_counter() - t0, 3), "cells": kept + entries}
    write_json_atomic(Path(sweep_dir) / PREPARE_FILE, record)


def read_prepare(sweep_dir: Path | str | None) -> dict[str, Any] | None:
    """The sweep's ``prepare.json``; None when it has none (not prepared, or not a sweep)."""
    return read_json(Path(sweep_dir) / PREPARE_FILE) if sweep_dir else None


def cell_entry(prepared: dict[str, Any] | None, overrides: Sequence[str]) -> dict[str, Any] | None:
    """The preparation's entry of the cell a job with ``overrides`` belongs to (None: not prepared)."""
    key = list(cell_key(overrides))
    for entry in (prepared or {}).get("cells") or []:
        if entry.get("cell") == key:
            return entry
    return None


def was_prepared(entry: dict[str, Any] | None) -> bool:
    """Whether a cell's preparation went through: each part it needed ended ``ok`` (an eager cell
    whose jobs are fresh processes needs none)."""
    if entry is None:
        return False
    return all(p.get("status") == "ok" for p in (entry.get("cold"), entry.get("warm")) if p is not None)
