"""The Hydra task: one job = validate, train, write ``result.json`` atomically, report to W&B.

The job's folder gets a ``running`` record as it starts (what remains of a killed process), then,
whatever happens, its final one; exceptions are re-raised after it, for the launcher to see.
A finished (``ok``) record is never trained again: ``resume=true`` keeps it, else the job refuses.
"""

from __future__ import annotations

import dataclasses
import gc
import logging
import os
import shlex
import signal
import socket
import threading
import time
import traceback
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from rlsweep import checkpoint, prepare, toggles
from rlsweep.algos import algorithm_class, to_object
from rlsweep.config import ObjectiveConfig, TrainConfig, config_values
from rlsweep.records import (
    CHECKPOINT_FILE,
    INVOCATION_KEYS,
    KEEP,
    RESULT_FILE,
    RUNNING_ERROR,
    STATUS_FAILED,
    STATUS_RUNNING,
    is_basic_sweeper,
    override_key,
    read_group,
    read_record,
    resume_decision,
    resume_refusal,
    write_result,
)
from rlsweep.results import fingerprint, process_age_s, provenance, utc_now
from rlsweep.runner import resolve_device, train_seeds
from rlsweep.runtime import NonFiniteLossError
from rlsweep.signals import Interrupted, skip_final_gc_at_exit, stop_requested
from rlsweep.tracking import (
    JOB_TYPE_TRAIN,
    Tracker,
    WandbSettings,
    nest,
    resolved_logger,
    run_group,
    scrub,
    secret_values,
    stable_run_id,
)
from rlsweep.validate import ConfigError, machine_errors, validate

log = logging.getLogger(__name__)


class SweepInterrupted(KeyboardInterrupt):
    """A stop signal ended the job after its checkpoint: stop the whole sweep (Hydra's basic launcher
    does not go on after a KeyboardInterrupt), not only this job."""


def job_info() -> dict[str, Any]:
    """Where this job runs: its folder, the sweep, and its Slurm ids when under Slurm."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    multirun = str(hc.mode) == "RunMode.MULTIRUN"
    return {
        "num": int(hc.job.num) if multirun else None,
        "output_dir": hc.runtime.output_dir,
        "sweep_dir": str(Path(hc.sweep.dir).resolve()) if multirun else None,
        "overrides": [o for o in hc.overrides.task if override_key(o) not in INVOCATION_KEYS],
        "pid": os.getpid(),
        "hostname": socket.gethostname(),
        "slurm_job_id": os.environ.get("SLURM_ARRAY_JOB_ID") or os.environ.get("SLURM_JOB_ID"),
        "slurm_array_index": os.environ.get("SLURM_ARRAY_TASK_ID"),
        "launcher": str(OmegaConf.select(hc.launcher, "_target_", default="")).rsplit(".", 1)[-1] or "basic",
        # local launcher: at most this many jobs of the sweep ran at once (None: no such limit here)
        "max_parallel": OmegaConf.select(hc.launcher, "max_parallel", default=None),
    }


def _checked_before_launch() -> bool:
    """Whether the launching process's pre-flight checked this job's config: a single run or a grid's job,
    not a trial that a search (Optuna) chose as it went."""
    from hydra.core.hydra_config import HydraConfig

    hc = HydraConfig.get()
    return str(hc.mode) != "RunMode.MULTIRUN" or is_basic_sweeper(OmegaConf.select(hc.sweeper, "_target_", default=None))


@dataclasses.dataclass
class _Seat:
    """One seed a job trains: its config, where its record goes, its record and W&B run as they are made."""

    cfg: TrainConfig
    info: dict[str, Any]
    #: where its W&B run logs: the config, else W&B's environment variables (resolved once for the job)
    wandb: WandbSettings
    record: dict[str, Any] = dataclasses.field(default_factory=dict)
    resumed: Any = None
    tracker: Tracker | None = None

    @property
    def out_dir(self) -> Path:
        return Path(self.info["output_dir"])


def _seats(tcfg: TrainConfig, info: dict[str, Any]) -> list[_Seat]:
    """The seeds this job trains: its own, and under ``seeds_per_job`` the rest of its group, each as the
    job of that seed alone would be (its folder, overrides, seed), as the launcher planned them."""
    group = read_group(Path(info["sweep_dir"]), info["num"]) if info.get("sweep_dir") else None
    wandb = resolved_logger(tcfg.logger)  # the seeds of a group differ in their seed alone
    if not group:
        if tcfg.seeds_per_job > 1:
            log.warning("seeds_per_job=%d: this job is not part of a sweep's group (a single run, or a launcher "
                        "that does not group): it trains its own seed", tcfg.seeds_per_job)
        return [_Seat(tcfg, info, wandb)]
    sweep_dir = Path(info["sweep_dir"])
    return [_Seat(dataclasses.replace(tcfg, seed=m["seed"]),
                  {**info, "num": m["num"], "output_dir": str(sweep_dir / str(m["num"])), "overrides": m["overrides"]},
                  wandb) for m in group]


def train_job(cfg: DictConfig) -> dict[str, Any]:
    """Run one job under Hydra -- with ``seeds_per_job``, the seeds of its group, each writing its own
    record in its own job folder -- and return its result record."""
    skip_final_gc_at_exit()  # also in a launcher's job process (submitit), which does not start in train_entry
    stopped = stop_requested()  # the sweep was stopped while this job's process started: do not start
    if stopped is not None:
        raise KeyboardInterrupt(signal.Signals(stopped).name)
    started = process_age_s()  # the interpreter, imports and Hydra's composition, in a job's own process
    info = job_info()
    tcfg = to_object(cfg)
    seats = _seats(tcfg, info)
    # what this machine has, a Slurm node may lack (a GPU, ROMs, ...); the config itself was checked before
    # launch, but for a search's trial
    errors = machine_errors(tcfg) if _checked_before_launch() else validate(tcfg)
    if errors:
        error = ConfigError("; ".join(errors))
        _write_refused(seats, f"ConfigError on {info.get('hostname')}: {error}")
        raise error
    todo, own_done = _unfinished(seats, tcfg.resume)
    if not todo:
        log.info("%s: finished before with the same config; kept as it is (resume=true)", seats[0].out_dir)
        return own_done or {}
    secrets = secret_values()
    seeds = [seat.cfg.seed for seat in todo]
    ckpt = seats[0].out_dir / (CHECKPOINT_FILE if len(todo) == 1 else f"checkpoint-seeds-{'-'.join(map(str, seeds))}.pt")
    # read and verified once, for every seed's record and the runner (it was written with the first seed's config)
    found = checkpoint.read(ckpt, todo[0].cfg)
    t0 = time.perf_counter()
    for seat in todo:
        seat.record, seat.resumed = _first_record(seat, ckpt, found), found.header
        # what remains if this process is killed outright; replaced by the final record below
        write_result(seat.out_dir, scrub({**seat.record, "status": STATUS_RUNNING, "error": RUNNING_ERROR}, secrets))
    before = {"start_s": started, "write_s": round(time.perf_counter() - t0, 4)}
    # what earlier jobs of this process left (the basic launcher runs a sweep's jobs in one process, on a
    # heap it froze) is collected before the clock starts, not by a collection landing inside whichever job is
    # next; where collection is off until training begins (signals.collection_deferred), no job ran before
    if gc.isenabled():
        gc.collect()
    start = time.perf_counter()
    failed = True
    try:
        _train(todo, ckpt, found, before)
        failed = False
        ckpt.unlink(missing_ok=True)  # done: the records are the result; a rerun starts afresh
    except Interrupted as exc:
        _mark(todo, status="interrupted", error=str(exc), checkpoint=str(ckpt))
        raise SweepInterrupted(str(exc)) from exc
    except KeyboardInterrupt as exc:  # outside the training loop's own handling (or a second Ctrl-C)
        _mark(todo, status="interrupted", error=f"interrupted ({exc or 'SIGINT'})",
              checkpoint=str(ckpt) if ckpt.is_file() else None)
        raise
    except SystemExit:  # submitit requeues a preempted job by exiting after our checkpoint
        _mark(todo, status="interrupted", error="preempted: checkpoint written, requeued", checkpoint=str(ckpt))
        raise
    except BaseException as exc:
        _mark(todo, error=traceback.format_exc())
        if type(exc).__name__ == "UncompletedJobError" and "timed-out too many times" in str(exc):
            # submitit's verdict at a time-out after the last allowed requeue: the checkpoint is written
            requeues = int(os.environ.get("SLURM_RESTART_COUNT") or 0)
            _mark(todo, status="timed_out", requeues=requeues, checkpoint=str(ckpt), error=(
                f"timed out after {requeues} requeue(s) (hydra.launcher.max_num_timeout): checkpoint written; "
                "resume=true continues from it"))
        raise
    finally:
        _write_records(todo, info["num"], failed, time.perf_counter() - start, secrets)
    if todo[0] is not seats[0]:  # this job's own seed had finished before: only others of its group trained
        return own_done or {}
    if todo[0].record["status"] != "ok":  # this job's seed stopped early: the job failed, as it would alone
        raise NonFiniteLossError(todo[0].record["error"])
    return todo[0].record


def _unfinished(seats: list[_Seat], resume: bool) -> tuple[list[_Seat], dict[str, Any] | None]:
    """The seats still to train, and the job's own finished record when ``resume`` keeps it, as the job
    returns it: ``skipped``, its objective computed anew (it finished under any objective setting).

    Raises:
        ConfigError: a seat's folder holds a finished record that this run must not overwrite: of
            another config, or of this one without ``resume`` (:func:`rlsweep.records.resume_refusal`).
    """
    todo, own_done = [], None
    for seat in seats:
        done = read_record(seat.out_dir)
        decision = resume_decision(done, lambda seat=seat: config_values(seat.cfg), resume)
        if refusal := resume_refusal(decision, seat.out_dir, "output folder"):
            raise ConfigError(refusal)
        if decision != KEEP:  # nothing, failed, interrupted or killed: (re)run, from the checkpoint when present
            todo.append(seat)
        elif seat is seats[0]:
            own_done = {**done, "objective": objective(done, seat.cfg.objective), "skipped": True}
    return todo, own_done


class _TrackersStarting:
    """Each seat's W&B run started in a thread while the job makes its environments and algorithm, none of which
    needs W&B; :meth:`wait` before the first iteration, so that W&B's start never overlaps a timed iteration."""

    def __init__(self, seats: list[_Seat]) -> None:
        self.start_s = self.waited_s = 0.0
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._start, args=(seats,), name="rlsweep-wandb-start", daemon=True)
        self._thread.start()

    def _start(self, seats: list[_Seat]) -> None:
        t0 = time.perf_counter()
        try:
            for seat in seats:  # each run kept as it starts: however the job ends, _write_records finishes it
                seat.tracker = _tracker(seat, concurrent=len(seats) > 1)
        except BaseException as exc:  # noqa: BLE001 - raised in the job's thread by wait()
            self._error = exc
        self.start_s = time.perf_counter() - t0

    def join(self) -> None:
        """Until the thread has ended, whatever it raised."""
        self._thread.join()

    def wait(self) -> None:
        """Until every run has started; raises what starting them raised (once)."""
        t0 = time.perf_counter()
        self._thread.join()
        self.waited_s += time.perf_counter() - t0
        if self._error is not None:
            error, self._error = self._error, None
            raise error


def _train(todo: list[_Seat], ckpt: Path, found: checkpoint.Found, before: dict[str, float | None]) -> None:
    """Train the seats' seeds together, each with its W&B run; put each one's outcome in its record (``before``:
    the job's fixed costs before its clock started: its process's start, writing its running records)."""
    starting = _TrackersStarting(todo)
    hooks = [lambda row, steps, seat=seat: seat.tracker.log(row, steps) for seat in todo]
    try:
        outcomes = train_seeds(todo[0].cfg, [seat.cfg.seed for seat in todo], hooks, checkpoint_path=ckpt,
                               on_stop=lambda: [seat.tracker.preempted() for seat in todo], found=found,
                               before_loop=starting.wait)
    finally:
        starting.join()  # a job that failed before training still finishes every run it started
    for seat, outcome in zip(todo, outcomes, strict=True):
        seat.record.update(outcome.record())
        fresh = outcome.measurement["process"] == "fresh"  # else the process's start was an earlier job's
        seat.record["fixed_cost"] = {**before, "start_s": before["start_s"] if fresh else None,
                                     "wandb_init_s": round(starting.start_s, 4),
                                     "wandb_wait_s": round(starting.waited_s, 4), **seat.record["fixed_cost"]}
        seat.record["measurement"] = measurement_state(outcome, seat.info)
        if outcome.failed is None:
            seat.record.update(status="ok", error=None)
        else:  # as a job of this seed alone would end: failed, no result; the seeds beside it trained on
            seat.record.update(status="failed", learning=None, error=f"{NonFiniteLossError.__name__}: "
                               f"{outcome.failed} (this seed alone stopped; the seeds trained with it went on)")


def _write_records(todo: list[_Seat], leader: int | None, failed: bool, wall_s: float, secrets: list[str]) -> None:
    """Complete and write every trained seed's record, however the job ended, and finish its W&B run. One
    seed's record failing to complete or write (a full disk) does not cost the others theirs: the first
    error is raised once every seed has had its turn."""
    errors = []
    for seat in todo:
        try:
            _complete(seat, todo, leader, failed, wall_s)
            write_result(seat.out_dir, scrub(seat.record, secrets))
        except Exception as exc:
            errors.append(exc)
    if errors:
        raise errors[0]


def _complete(seat: _Seat, todo: list[_Seat], leader: int | None, failed: bool, wall_s: float) -> None:
    """Fill in what a record knows only at the end; a seed trained beside others is charged its share of
    the process's time, so a cell's seeds cost the same grouped or not."""
    record, tcfg, tracker = seat.record, seat.cfg, seat.tracker
    record["wall_s"] = round(wall_s / len(todo), 3)
    # which code ran which part of the job: the attempts its checkpoint carries, and this one
    record["code_history"] = checkpoint.code_history(seat.resumed, checkpoint.code_of(record["provenance"]))
    record["finished_at"] = utc_now()
    record["fingerprint"] = fingerprint(resolve_device(tcfg.device))
    record["fingerprint"]["num_threads"] = (record.get("toggles") or {}).get("backend", {}).get("value", {}).get(
        "num_threads", record["fingerprint"]["num_threads"])
    if record["status"] == "ok":
        record["objective"] = objective(record, tcfg.objective)
    if tracker is not None:  # else the record's logging keeps its start: no run folder, no errors
        t0 = time.perf_counter()
        tracker.summary(_summary_metrics(record))
        tracker.finish(failed or record["status"] != "ok")
        record["logging"].update(wandb_run_dir=tracker.run_dir, errors=tracker.errors)
        if "fixed_cost" in record:  # after wall_s: what the job's process still spends on W&B
            record["fixed_cost"]["wandb_finish_s"] = round(time.perf_counter() - t0, 4)
    if len(todo) > 1:
        record["group"] = {"seeds": [s.cfg.seed for s in todo], "jobs": [s.info["num"] for s in todo],
                           "leader": leader, "wall_s": round(wall_s, 3)}


def _write_refused(seats: list[_Seat], error: str) -> None:
    """A ``failed`` record for each seed of a job its own node refused, so that status and the report
    say why instead of "ended without a result"."""
    secrets, now = secret_values(), utc_now()
    for seat in seats:
        write_result(seat.out_dir, scrub({**_identity(seat, error), "started_at": now, "finished_at": now}, secrets))


def _identity(seat: _Seat, error: str | None) -> dict[str, Any]:
    """What every record says first: ``failed`` with ``error`` until it ends otherwise, and which job it is of."""
    return {"status": STATUS_FAILED, "error": error, "overrides": seat.info["overrides"], "job": seat.info,
            "algo": seat.cfg.algo.name, "env_id": seat.cfg.env.id, "seed": seat.cfg.seed,
            "config": config_values(seat.cfg)}


def _mark(seats: list[_Seat], **fields: Any) -> None:
    """Set ``fields`` in the record of every seed the job trains (they stop together)."""
    for seat in seats:
        seat.record.update(fields)


def _first_record(seat: _Seat, ckpt: Path, found: checkpoint.Found) -> dict[str, Any]:
    """The seed's record as it starts (status ``failed`` until it ends otherwise)."""
    tcfg = seat.cfg
    record: dict[str, Any] = {
        **_identity(seat, None),
        "device": str(resolve_device(tcfg.device)),
        "started_at": utc_now(),
        # which code ran: a resumed job may continue on another commit, and the report says so
        "provenance": provenance(algorithm_class(tcfg.algo._target_)),
    }
    # a checkpoint left by an earlier attempt: resumed from when whole and of this config, else
    # the job starts afresh and says why
    resumed, record["checkpoint_rejected"] = found.header, found.rejected
    record["resumed_from"] = None if resumed is None else {
        "checkpoint": str(ckpt), "env_steps": resumed["env_steps"], "written_at": resumed.get("written_at"),
        "code": resumed.get("code")}
    # where W&B logs, in the running record too (the report reads it from any record)
    wandb = seat.wandb
    record["logging"] = {"wandb_mode": wandb.mode, "wandb_project": wandb.project, "wandb_entity": wandb.entity,
                         "wandb_dir": wandb.dir, "wandb_run_dir": None,
                         "wandb_run_id": stable_run_id(seat.out_dir) if wandb.mode != "disabled" else None,
                         "errors": []}
    return record


def _tracker(seat: _Seat, concurrent: bool = False) -> Tracker:
    """The seed's W&B run: its name, group, tags and nested config (``concurrent``: beside other seeds' runs)."""
    tcfg, info, out_dir = seat.cfg, seat.info, seat.out_dir
    # nest merges the config's columns with the rest
    columns = {k: v for k, v in config_values(tcfg).items() if k not in INVOCATION_KEYS}
    return Tracker(
        seat.wandb,
        out_dir,
        stable_run_id(out_dir),
        concurrent,
        name="-".join([tcfg.algo.name, tcfg.env.id, *toggles.run_name_fragments(tcfg), f"s{tcfg.seed}"]),
        group=run_group(tcfg.logger.group, info["sweep_dir"], out_dir),
        job_type=JOB_TYPE_TRAIN,  # the role; the algorithm is the algo.name column and a tag
        tags=[tcfg.algo.name, tcfg.env.id, *toggles.tags(tcfg), *tcfg.logger.tags],
        # nested, as W&B shows and filters it (algo.lr, toggle.compile, code.commit, versions.torch)
        config=nest({**columns, **{f"toggle.{k}": v for k, v in toggles.values(tcfg).items()},
                     **{f"job.{k}": info[k] for k in ("launcher", "num", "slurm_job_id", "slurm_array_index")},
                     **{f"code.{k}": v for k, v in checkpoint.code_of(seat.record["provenance"]).items()},
                     **{f"versions.{k}": v for k, v in seat.record["provenance"]["versions"].items()}}),
    )


def measurement_state(outcome: Any, info: dict[str, Any]) -> dict[str, Any]:
    """The state a job was measured in, which a fair comparison holds equal across its jobs: the
    runner's ``process`` (fresh/warm), ``prepared`` (:mod:`rlsweep.prepare`) and ``compile_cache``."""
    cache = (outcome.compile or {}).get("cache") or {}
    entry = prepare.cell_entry(prepare.read_prepare(info.get("sweep_dir")), info.get("overrides") or [])
    return {**outcome.measurement, "prepared": prepare.was_prepared(entry), "compile_cache": cache.get("state")}


def objective(record: dict[str, Any], cfg: ObjectiveConfig) -> dict[str, Any]:
    """The number a finished job returns to Hydra's sweeper (:class:`ObjectiveConfig`): ``{"metric", "value",
    "reason"}``, ``value`` None (with the ``reason``) when not measured or the final return is below ``min_return``."""
    thr = record.get("throughput") or {}
    final_return = (record.get("learning") or {}).get("final_return")
    wall_s = record.get("wall_s")
    values = {
        "env_steps_per_s": thr.get("env_steps_per_s"),
        "updates_per_s": thr.get("updates_per_s"),
        "end_to_end_env_steps_per_s": record.get("env_steps", 0) / wall_s if wall_s else None,
        "final_return": final_return,
    }
    value, reason = values.get(cfg.metric), None
    if value is None:
        reason = f"{cfg.metric} was not measured"
    if cfg.min_return is not None and (final_return is None or final_return < cfg.min_return):
        value, reason = None, f"final return {final_return} is below objective.min_return={cfg.min_return}"
    return {"metric": cfg.metric, "value": None if value is None else float(value), "reason": reason}


def _summary_metrics(record: dict[str, Any]) -> dict[str, Any]:
    """The record's headline numbers, namespaced for W&B's summary."""
    out: dict[str, Any] = {"status": record["status"], "wall_s": record.get("wall_s")}
    thr = record.get("throughput") or {}
    for key in ("env_steps_per_s", "updates_per_s", "median_iteration_env_steps_per_s"):
        out[f"perf/{key}"] = thr.get(key)
    for phase, t in (record.get("timings") or {}).items():
        out[f"time/{phase}_ms"] = t.get("median_ms")
        out[f"time/{phase}_p90_ms"] = t.get("p90_ms")
    comp = record.get("compile") or {}
    for key in ("compile_s", "graph_breaks", "recompiles"):
        out[f"compile/{key}"] = comp.get(key)
    learning = record.get("learning") or {}
    out["learning/final_return"] = learning.get("final_return")
    out["learning/final_return_std"] = learning.get("final_return_std")
    out["objective"] = (record.get("objective") or {}).get("value")
    for name, state in (record.get("toggles") or {}).items():
        out[f"toggle_applied/{name}"] = state["applied"]
        if state.get("reason"):
            out[f"toggle_reason/{name}"] = state["reason"]
    return out


def format_summary(record: dict[str, Any]) -> str:
    """The one-screen summary printed at the end of a job."""
    thr = record.get("throughput") or {}
    learning = record.get("learning") or {}
    comp = record.get("compile") or {}
    lines = [
        (f"rlsweep {record['algo']} on {record['env_id']} (seed {record['seed']}, {record['device']}): "
         f"{record['status']} in {record.get('wall_s', 0):.1f} s"),
        f"  env steps       {record.get('env_steps', 0):,}   updates {record.get('updates', 0):,}",
    ]
    if thr.get("env_steps_per_s"):
        lines.append(f"  throughput      {thr['env_steps_per_s']:,.0f} env steps/s (steady state, "
                     f"{thr.get('steady_iterations', 0)} iterations)")
    if learning.get("final_return") is not None:
        lines.append(f"  final return    {learning['final_return']:.1f} ± {learning['final_return_std']:.1f} "
                     f"({learning['eval_episodes']} deterministic episodes)")
    if comp.get("mode") not in (None, "none"):
        lines.append(f"  compile         {comp['mode']}: {comp['compile_s']:.1f} s, "
                     f"{comp['graph_breaks']} graph breaks, {comp['recompiles']} recompiles")
    timings = record.get("timings") or {}
    if timings:
        phases = "  ".join(f"{k} {v['median_ms']:.3f}" for k, v in timings.items() if v.get("median_ms") is not None)
        lines.append(f"  median ms       {phases}")
    for name, state in (record.get("toggles") or {}).items():
        if state.get("reason"):
            lines.append(f"  {name:<15} {state['reason']}")
    obj = record.get("objective")
    if obj:
        shown = f"{obj['value']:,.6g}" if obj["value"] is not None else f"None ({obj['reason']})"
        lines.append(f"  objective       {obj['metric']} = {shown}")
    if record.get("skipped"):
        lines.append("  resume          finished before with the same config: result kept, nothing rerun")
    lines.append(f"  result          {Path(record['job']['output_dir']) / RESULT_FILE}")
    if record.get("logging", {}).get("wandb_run_dir"):
        lines.append(f"  W&B ({record['logging']['wandb_mode']})  {record['logging']['wandb_run_dir']}")
        if record["logging"]["wandb_mode"] == "offline" and not record["job"].get("sweep_dir"):  # a sweep's end says it
            lines.append(f"  upload          wandb sync {shlex.quote(str(record['logging']['wandb_run_dir']))}")
    return "\n".join(lines)
