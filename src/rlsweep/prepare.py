"""A sweep's preparation: every cell's one-off costs paid, and measured, before the first timed job
(docs/guide/measuring.md), so that a sweep does not measure the order of its jobs.

* **cold run** (compiled cells): a fresh process trains the cell until warm on an empty private compile
  cache (its cold compile), then merges what it built into ``compile.cache_dir``. A cold compile belongs
  to what is compiled, not to the sweep: it is kept in the cache's ledger (:data:`LEDGER_DIR`), keyed by
  everything it depends on (:func:`one_off_key`), and reused by later sweeps while the files it built
  are still in the cache (``prepare=full`` measures it again).
* **warm pass** (the basic launcher only): the launching process trains each cell until warm once.

What it measured goes to the sweep's ``prepare.json``, and each cold compile to the ledger (this
module is the one reader and writer of both).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
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
from rlsweep.signals import collection_deferred

if TYPE_CHECKING:
    from rlsweep.config import TrainConfig

log = logging.getLogger(__name__)

PREPARE_FILE = "prepare.json"
#: where, in the sweep folder, submitit keeps the preparation's processes (logs, pickles)
SUBMITIT_FOLDER = ".submitit_prepare"
#: the config key that turns the preparation off (``prepare=false``) or measures everything again (``full``)
PREPARE_KEY = "prepare"
#: the folder, inside the compile cache, of the cold compiles measured on it (one JSON file per key)
LEDGER_DIR = "rlsweep_cold_compiles"


def cell_key(overrides: Sequence[str]) -> tuple[str, ...]:
    """A job's cell: its overrides without the seed, invocation switches and ``hydra.*`` settings."""
    return tuple(o for o in records.cell_key(overrides, records.NOT_CELL) if not override_key(o).startswith("hydra."))


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


def mode(value: Any) -> str:
    """``prepare``'s value as one of :data:`rlsweep.config.PREPARE_MODES` (the command line's false is "False")."""
    return str(value).lower()


@functools.cache
def _code_digest(*files: str) -> str:
    """A digest of rlsweep's source and the given files (an algorithm's module): the code that is compiled."""
    package = Path(__file__).resolve().parent
    h = hashlib.sha256()
    for path in [*sorted(package.rglob("*.py")), *map(Path, files)]:
        with contextlib.suppress(OSError):
            h.update(str(path.relative_to(package) if package in path.parents else path).encode())
            h.update(path.read_bytes())
    return h.hexdigest()[:32]


def one_off_key(cfg: TrainConfig) -> tuple[str, dict[str, Any]]:
    """What a cell's cold compile depends on, and its digest: the cell's config but the keys that change no
    compiled graph (:data:`rlsweep.records.NOT_COMPILED`, the cache's folder), torch and CUDA, the device (the
    GPU, or the CPU with its flags and the C++ compiler), and the code (rlsweep's and the algorithm's module)."""
    import torch

    from rlsweep.algos import algorithm_class
    from rlsweep.config import config_values
    from rlsweep.results import source_file
    from rlsweep.runner import resolve_device
    from rlsweep.toggles.compile import vec_isa_key

    config = {k: v for k, v in config_values(cfg).items() if k not in records.NOT_COMPILED}
    config["compile"].pop("cache_dir", None)
    device = resolve_device(cfg.device)
    source = source_file(algorithm_class(cfg.algo._target_))
    depends = {"config": config, "torch": torch.__version__, "torch_git": torch.version.git_version,
               "cuda": torch.version.cuda, "device": device.type,
               "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else None,
               "cpu": vec_isa_key(), "code": _code_digest(*([source] if source else []))}
    return records.config_digest(depends, length=32), depends


def _ledger_file(cfg: TrainConfig, key: str) -> Path:
    from rlsweep.toggles.compile import compile_cache_dir

    return Path(compile_cache_dir(cfg.compile.cache_dir)) / LEDGER_DIR / f"{key}.json"


def known_cold(cfg: TrainConfig, key: str) -> tuple[dict[str, Any] | None, str]:
    """The cold compile of ``cfg`` measured before (its ledger entry as ``prepare.json`` keeps it), or None; and
    why (not) reusable: an entry is reused only while every file that compile built is still in the cache, so
    that the sweep's jobs find a warm cache."""
    entry = read_json(path := _ledger_file(cfg, key))
    if not entry:
        return None, "not measured before on this machine, torch and code"
    missing = sum(1 for f in entry.get("files") or [] if not (path.parent.parent / f).is_file())
    if missing or not entry.get("files"):
        return None, f"measured at {entry.get('measured_at')}, but {missing} file(s) it built left the compile cache"
    kept = {**{k: v for k, v in entry.items() if k not in ("files", "depends_on")}, "source": "reused"}
    return kept, cold_source(kept)


def _remember_cold(cfg: TrainConfig, key: str, depends: dict[str, Any], measured: dict[str, Any],
                   sweep_dir: Path, cell: list[str]) -> dict[str, Any]:
    """Keep a cold compile just measured in the ledger; what the sweep's ``prepare.json`` says of it."""
    entry = {"key": key, **{k: v for k, v in measured.items() if k != "files"},
             "measured_at": utc_now(), "measured_by": {"sweep_dir": str(sweep_dir), "cell": cell}}
    try:
        write_json_atomic(_ledger_file(cfg, key), {**entry, "files": measured.get("files"), "depends_on": depends})
    except OSError as exc:  # a read-only cache: the figure still serves this sweep
        log.warning("could not keep the cold compile in the compile cache's ledger: %s", exc)
    return {**entry, "source": "measured"}


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
        with collection_deferred():  # as in a job's own process
            entry = run_until_warm(dataclasses.replace(cfg, compile=dataclasses.replace(cfg.compile,
                                                                                       cache_dir=str(private))))
        # what the jobs' warm compile will look up (the vector-ISA verdicts were copied in, not built)
        entry["files"] = [f for f in _cache_files(private) if Path(f).parts[0] != VEC_ISA_DIR]
        entry["merged_files"] = merge_cache(private, shared)
        entry["cache_dir"] = str(shared)
        return entry
    finally:
        shutil.rmtree(private, ignore_errors=True)


def _cache_files(root: Path) -> list[str]:
    """Every file of compile cache ``root`` (relative paths), without its locks."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "locks"]
        out += [str((Path(dirpath) / n).relative_to(root)) for n in filenames if not n.endswith(".lock")]
    return sorted(out)


def merge_cache(source: Path, target: Path) -> int:
    """Copy every file of compile cache ``source`` missing from ``target`` (content-addressed: a file
    there is the same file), each renamed into place; returns how many. Lock files stay behind."""
    copied = 0
    for rel in _cache_files(source):
        dst = target / rel
        if dst.exists():
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        tmp = dst.with_name(f".{dst.name}.{uuid.uuid4().hex}.tmp")
        shutil.copy2(source / rel, tmp)
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


def run_fresh_locally(folder: Path, configs: list[TrainConfig], limit: int, gpus_per_node: int = 0,
                      labels: Sequence[str] = ()) -> list[Any]:
    """Each config's :func:`cold_run` in a process of its own, started by submitit's local executor (its files in
    ``folder``), at most ``limit`` at once, seeing the GPUs the sweep's jobs see (submitit's local executor shows
    a process only its ``gpus_per_node`` GPUs); each one's entry or the exception it raised. ``labels``: the
    cells' names, to say when each one's cold run starts."""
    import submitit

    executor = submitit.LocalExecutor(folder=str(folder / "%j"))
    executor.update_parameters(timeout_min=24 * 60, gpus_per_node=gpus_per_node)

    def outcome(i: int, job: Any) -> Any:
        try:
            return job.result()
        except Exception as exc:  # noqa: BLE001 - recorded in prepare.json; the cell's jobs still run
            return exc

    def submit(i: int) -> Any:
        if i < len(labels):
            log.info("  %s: cold compile started", labels[i])
        return executor.submit(cold_run, configs[i])

    return list(run_limited(range(len(configs)), limit, submit, outcome,
                            lambda running, _pending: [job.cancel() for job in running]).values())


def prepare_sweep(sweep_dir: Path, cell_configs: Sequence[tuple[list[str], TrainConfig]], *, in_process: bool,
                  launcher: str, limit: int = 1, gpus_per_node: int = 0) -> None:
    """Prepare every cell (``cell_configs``: its overrides and first job's config); write ``prepare.json``.

    Says first what it will do for each cell (a cold compile reused or to measure, a warm pass), then
    each step's time as it ends.

    Args:
        in_process: also run the warm pass in this process (the timed jobs will run here).
        limit, gpus_per_node: of the cold runs (:func:`run_fresh_locally`); Slurm runs them one after
            another on the node of a job of their own, which the sweep's jobs wait for (a dependency).
    """
    if not cell_configs:  # nothing to prepare (prepare=false, or a resumed sweep with every job done)
        return
    t0 = time.perf_counter()
    sweep_dir = Path(sweep_dir)
    labels = [_label(o, c) for o, c in cell_configs]
    cold, keys = _plan(cell_configs, labels, in_process)
    measure = [i for i in keys if i not in cold]
    if measure:
        outcomes = run_fresh_locally(sweep_dir / SUBMITIT_FOLDER, [cell_configs[i][1] for i in measure], limit,
                                     gpus_per_node, [labels[i] for i in measure])
        for i, out in zip(measure, outcomes, strict=True):
            if not isinstance(out, BaseException):
                out = _remember_cold(cell_configs[i][1], *keys[i], out, sweep_dir, list(cell_key(cell_configs[i][0])))
                log.info("  %s: cold compile %.1f s (its run %.1f s)", labels[i], out["compile_s"] or 0, out["wall_s"])
            cold[i] = out
    cold_s = time.perf_counter() - t0
    if in_process:
        warm_wandb(cell_configs[0][1])
    entries = []
    for i, (overrides, cfg) in enumerate(cell_configs):
        entry: dict[str, Any] = {"cell": list(cell_key(overrides)), "seeds": cfg.seeds_per_job,
                                 "compiled": compiles(cfg), "cold": None, "warm": None}
        parts = {"cold": cold[i]} if i in cold else {}  # each: what it measured, or why it failed
        if in_process:
            try:
                parts["warm"] = run_until_warm(cfg)
                log.info("  %s: warm pass %.1f s", labels[i], parts["warm"]["wall_s"])
            except Exception as exc:  # noqa: BLE001 - the cell's jobs run and record their own failure
                log.warning("preparing cell %s (warm pass) failed: %s: %s", labels[i], type(exc).__name__, exc)
                parts["warm"] = exc
        for part, out in parts.items():
            entry[part] = ({"status": "failed", "error": f"{type(out).__name__}: {out}"}
                           if isinstance(out, BaseException) else {"status": "ok", **out})
        entries.append(entry)
    # a resumed sweep prepares only its unfinished cells: the others keep what was measured before
    done = {tuple(e["cell"]) for e in entries}
    kept = [e for e in (read_prepare(sweep_dir) or {}).get("cells") or [] if tuple(e.get("cell") or ()) not in done]
    total = time.perf_counter() - t0
    record = {"launcher": launcher, "in_process": in_process, "written_at": utc_now(), "prepare_s": round(total, 3),
              "cold_s": round(cold_s, 3), "warm_s": round(total - cold_s, 3), "cells": kept + entries}
    write_json_atomic(sweep_dir / PREPARE_FILE, record)
    log.info("prepared in %.1f s (cold compiles measured: %d, reused: %d)", total, len(measure), len(keys) - len(measure))


def _plan(cell_configs: Sequence[tuple[list[str], TrainConfig]], labels: list[str],
          in_process: bool) -> tuple[dict[int, Any], dict[int, tuple[str, dict[str, Any]]]]:
    """Say what the preparation will do for each cell; each compiled cell's key (:func:`one_off_key`) and, where
    the ledger has it (and ``prepare`` is not ``full``), its cold compile as ``prepare.json`` keeps it."""
    cold: dict[int, Any] = {}
    keys, plan = {}, []
    for i, (_, cfg) in enumerate(cell_configs):
        steps = []
        if compiles(cfg):
            keys[i] = one_off_key(cfg)
            known, why = known_cold(cfg, keys[i][0])
            if known is not None and mode(cfg.prepare) != "full":
                cold[i] = known
                steps.append(f"cold compile {known.get('compile_s', 0):.1f} s {why}")
            else:
                why = "prepare=full" if known is not None else why
                steps.append(f"cold compile to measure in a fresh process ({why}){_cold_estimate(cfg, keys[i][0])}")
        if in_process:
            steps.append("a warm pass in this process")
        plan.append(f"  {labels[i]}: " + ("; ".join(steps) or "nothing to pay (a fresh process per job, nothing compiled)"))
    log.info("preparing %d cell(s), untimed, so that every timed job starts alike:\n%s", len(plan), "\n".join(plan))
    return cold, keys


def _label(overrides: Sequence[str], cfg: TrainConfig) -> str:
    seeds = f" ({cfg.seeds_per_job} seeds together)" if cfg.seeds_per_job > 1 else ""
    return (" ".join(cell_key(overrides)) or "(no overrides)") + seeds


def _cold_estimate(cfg: TrainConfig, key: str) -> str:
    """", about N s" from the cold runs kept in the cache's ledger (this key's own, else their median)."""
    import statistics

    folder = _ledger_file(cfg, key).parent
    walls = {p.stem: e.get("wall_s") for p in folder.glob("*.json") if isinstance(e := read_json(p), dict)}
    known = walls.get(key) or (statistics.median(w for w in walls.values() if w) if any(walls.values()) else None)
    return f", about {known:.0f} s" if known else ""


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


def cold_source(cold: dict[str, Any]) -> str:
    """Where a cell's cold compile (its ``prepare.json`` part) came from, in words."""
    if cold.get("source") != "reused":
        return "measured by this sweep"
    return f"reused from {(cold.get('measured_by') or {}).get('sweep_dir')} ({cold.get('measured_at')})"


def was_prepared(entry: dict[str, Any] | None) -> bool:
    """Whether a cell's preparation went through: each part it needed ended ``ok`` (an eager cell
    whose jobs are fresh processes needs none)."""
    if entry is None:
        return False
    return all(p.get("status") == "ok" for p in (entry.get("cold"), entry.get("warm")) if p is not None)
