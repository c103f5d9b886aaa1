"""rlsweep's launchers: ``rlsweep_local`` (submitit_local with at most ``max_parallel`` jobs at once),
``rlsweep_basic`` (Hydra's basic launcher in seed-major order) and ``rlsweep_slurm`` (submitit_slurm
that records its jobs and may not wait), and the sweeper ``rlsweep_basic``.

Each is registered under its own name, so installing rlsweep changes nothing for other Hydra apps;
rlsweep's app makes them its defaults and reads the plain names on its command line as these
(:data:`rlsweep.launchers.OWN_NODES`). The scheduling policy lives in :mod:`rlsweep.launchers`. Hydra scans this module at every start:
heavy imports stay inside ``launch``. (No ``from __future__ import annotations``: Hydra's scanner
runs the module before it is in ``sys.modules``, where ``dataclass`` would look them up.)
"""

import logging
import os
import signal
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from hydra._internal.core_plugins import basic_launcher, basic_sweeper
from hydra.core.config_store import ConfigStore
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, configure_log, filter_overrides, run_job, setup_globals
from hydra.errors import CompactHydraException
from hydra_plugins.hydra_submitit_launcher import submitit_launcher
from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf, LocalQueueConf, SlurmQueueConf
from omegaconf import OmegaConf, open_dict

from rlsweep.records import STATUS_INTERRUPTED, STATUS_OK, is_basic_sweeper, last_line, read_record
from rlsweep.signals import STOP_MARKER, collection_deferred, frozen_heap

log = logging.getLogger(__name__)


@dataclass
class RLSweepLocalQueueConf(LocalQueueConf):
    """The plugin's ``submitit_local`` fields, plus the limit on jobs running at once."""

    _target_: str = "hydra_plugins.rlsweep_launcher.rlsweep_launcher.LocalLauncher"
    # jobs: at most this many run at once; null = this machine's CPUs // each job's intra-op
    # threads (backend.num_threads, 1 per job by default under this launcher)
    max_parallel: Optional[int] = None  # noqa: UP045 - OmegaConf 2.3 reads no `int | None`


def _executor(cluster: str, launcher_params: Any) -> Any:
    """The executor the upstream plugin's ``launch`` builds, from the same parameters."""
    import submitit

    params = dict(launcher_params)
    init = {"folder": params.pop("submitit_folder")}
    if "max_num_timeout" in params:
        init[f"{cluster}_max_num_timeout"] = params.pop("max_num_timeout")
    executor = submitit.AutoExecutor(cluster=cluster, **init)
    base = set(OmegaConf.structured(BaseQueueConf).keys())
    executor.update_parameters(**{k if k in base else f"{cluster}_{k}": v for k, v in params.items()})
    return executor


def _make_sweep_dir(config: Any, launcher: str) -> Path:
    """The sweep folder, created with ``hydra.sweep.mode``, as the plugin's ``launch`` makes it."""
    sweep_dir = Path(str(config.hydra.sweep.dir))
    log.info(f"{launcher}: sweep output dir {sweep_dir}")
    sweep_dir.mkdir(parents=True, exist_ok=True)
    if "mode" in config.hydra.sweep:
        os.chmod(sweep_dir, mode=int(str(config.hydra.sweep.mode), 8))
    return sweep_dir


def _cell_configs(launcher: Any, sweep: "_Sweep", *, resolve_threads: bool) -> list[tuple[list[str], Any]]:
    """Each cell of the sweep to prepare (:mod:`rlsweep.prepare`): its overrides and first job's config
    (each composed config kept in ``sweep.composed`` when it is a dict).

    Not a cell with ``prepare=false``, nor one whose jobs all finished before, nor a search's trials.
    ``resolve_threads``: ``backend.num_threads=null`` fixed to what a job of this process gets.
    """
    import dataclasses

    from hydra.core.hydra_config import HydraConfig

    from rlsweep import prepare
    from rlsweep.algos import to_object
    from rlsweep.toggles.backend import default_num_threads

    if prepare.mode(OmegaConf.select(launcher.config, prepare.PREPARE_KEY, default=True)) == "false":
        return []
    if not is_basic_sweeper(OmegaConf.select(launcher.config, "hydra.sweeper._target_", default=None)):
        return []  # a search (Optuna) launches trial after trial, each its own cell: a cold run per trial would double it
    finished = [(read_record(sweep.folder / str(sweep.first_idx + i)) or {}).get("status") == STATUS_OK
                for i in range(len(sweep.overrides))]
    unfinished = [o for o, done in zip(sweep.overrides, finished, strict=True) if not done]
    saved = HydraConfig.instance().cfg
    out = []
    try:
        for overrides in prepare.cells(unfinished):
            cfg = launcher.hydra_context.config_loader.load_sweep_config(launcher.config, list(overrides))
            HydraConfig.instance().set_config(cfg)  # for ${hydra:...} in the job's values
            if sweep.composed is not None:
                sweep.composed[tuple(overrides)] = cfg
                OmegaConf.set_readonly(cfg.hydra, None)  # set_config made it read-only; the job's run sets it
            try:
                tcfg = to_object(cfg)
            except Exception:  # noqa: BLE001 - not an rlsweep job (another app on these launchers): nothing to prepare
                return []
            if prepare.mode(tcfg.prepare) == "false":
                continue
            if resolve_threads and tcfg.backend.num_threads is None:
                tcfg = dataclasses.replace(tcfg, backend=dataclasses.replace(
                    tcfg.backend, num_threads=default_num_threads()))
            out.append((list(overrides), tcfg))
    finally:
        if saved is not None:
            HydraConfig.instance().set_config(saved)
    return prepare.with_group_sizes(out, sweep.overrides, finished, sweep.groups)


def _plan_groups(config: Any, job_overrides: Any, initial_job_idx: int, sweep_dir: Path) -> list[list[int]]:
    """The jobs grouped into processes by ``seeds_per_job`` (indices into ``job_overrides``; see
    :func:`rlsweep.launchers.seed_groups`), written to the sweep's groups file for the jobs to read."""
    from rlsweep.launchers import SEEDS_PER_JOB_KEY, group_members, seed_groups
    from rlsweep.records import write_groups

    groups = seed_groups(job_overrides, OmegaConf.select(config, SEEDS_PER_JOB_KEY, default=1))
    write_groups(sweep_dir, range(initial_job_idx, initial_job_idx + len(job_overrides)),
                 {initial_job_idx + g[0]: group_members(job_overrides, g, initial_job_idx) for g in groups if len(g) > 1})
    if len(groups) < len(job_overrides):
        log.info(f"seeds_per_job: {len(job_overrides)} jobs trained by {len(groups)} processes")
    return groups


def _leaders_in_order(groups: list[list[int]], job_overrides: Any) -> list[int]:
    """The jobs that train a group (each group's first), seed-major (:func:`rlsweep.launchers.seed_major_order`),
    a group in the round of its middle seed (:func:`rlsweep.launchers.round_member`): eight seeds trained together
    run amid the rounds of the single-seed jobs they are compared against, not all before them."""
    from rlsweep.launchers import round_member, seed_major_order

    order = seed_major_order([job_overrides[round_member(g)] for g in groups], rounds_of=job_overrides)
    return [groups[k][0] for k in order]


def _returns(sweep: "_Sweep", led: dict[int, JobReturn]) -> list[JobReturn]:
    """Hydra's returns in job order: a group's first job's own, and each other member's from the record its
    group wrote for it (failed where that record is not ``ok``)."""
    out: dict[int, JobReturn] = {}
    for group in sweep.groups:
        out[group[0]] = led[group[0]]
        for i in group[1:]:
            folder = sweep.folder / str(sweep.first_idx + i)
            record = read_record(folder) or {}
            ok = record.get("status") == STATUS_OK
            ret = JobReturn(overrides=list(sweep.overrides[i]), status=JobStatus.COMPLETED if ok else JobStatus.FAILED)
            ret.working_dir = str(folder)
            ret.return_value = record if ok else JobDied(
                f"rlsweep: job {sweep.first_idx + i} (trained by job {sweep.first_idx + group[0]}, seeds_per_job) "
                f"ended {record.get('status', 'without a record')}: {last_line(record.get('error'))}; "
                f"its record: {folder}")
            out[i] = ret
    return [out[i] for i in range(len(sweep.overrides))]


@dataclass
class _Sweep:
    """One batch of a sweep as a launcher runs it."""

    folder: Path
    overrides: list  # of each job, in job order
    first_idx: int  # the first job's number
    groups: list  # indices into ``overrides``: the jobs one process trains (``seeds_per_job``)
    #: each cell's config composed for its preparation, by overrides, for a launcher that composes its jobs in
    #: this process too (half a second each); None for one whose jobs are composed where they run
    composed: Optional[dict] = None  # noqa: UP045 - see the module's docstring
    executor: Any = None  # a submitit launcher's, when its preparation needs it too
    limit: Any = None  # a local launcher's (jobs at once, why), reckoned once for its preparation and its jobs


class _SeedMajorLaunch:
    """The launch path of every rlsweep launcher: the sweep folder, the jobs grouped into processes, the
    sweep's preparation, each group's first job run in seed-major order, Hydra's returns in job order.
    A launcher adds how it prepares (``_prepare``) and how it runs the jobs (``_run``: its executor)."""

    config: Any
    _IN_PROCESS = False  # its jobs run in this process: their threads and configs are this process's

    def launch(self, job_overrides: Any, initial_job_idx: int) -> list[JobReturn]:
        setup_globals()  # Hydra's resolvers (``${now:...}`` in hydra.sweep.dir)
        assert self.config is not None
        overrides = [list(o) for o in job_overrides]
        assert overrides
        folder = _make_sweep_dir(self.config, type(self).__name__)
        sweep = _Sweep(folder, overrides, initial_job_idx, _plan_groups(self.config, overrides, initial_job_idx, folder),
                       {} if self._IN_PROCESS else None)
        self._prepare(sweep, _cell_configs(self, sweep, resolve_threads=self._IN_PROCESS))
        led = self._run(sweep, _leaders_in_order(sweep.groups, overrides))
        if led is None:  # submitted, not awaited: each job's record is its result
            return [JobReturn(overrides=o, status=JobStatus.COMPLETED) for o in overrides]
        return _returns(sweep, led)

    def __call__(self, *args: Any) -> Any:
        """In a job's process (submitit calls the launcher there): no garbage collection until training
        begins (:func:`rlsweep.signals.collection_deferred`)."""
        with collection_deferred():
            return super().__call__(*args)  # type: ignore[misc] - the executor's launcher (submitit's)

    def _prepare(self, sweep: _Sweep, cell_configs: list) -> None:
        raise NotImplementedError

    def _run(self, sweep: _Sweep, order: list) -> Optional[dict]:  # noqa: UP045
        """Run the jobs ``order`` names (each group's first), in that order: their ``JobReturn`` by index,
        or None when they were only submitted."""
        raise NotImplementedError


class JobDied(CompactHydraException):
    """A local job's process ended without a result: Hydra prints this one line, no traceback."""


class LocalLauncher(_SeedMajorLaunch, submitit_launcher.LocalLauncher):
    """The plugin's launcher -- same executor, job folders and returns -- starting the next job only
    when one of at most ``max_parallel`` running ones ended (submitit's local executor has no limit).

    A Ctrl-C or SIGTERM of the launching process stops the running jobs as the basic launcher's: each
    writes its checkpoint and an ``interrupted`` record. Named like the plugin's class: records and
    the sweep's wait for local job processes go by this name.
    """

    def __init__(self, max_parallel: int | None = None, **params: Any) -> None:
        super().__init__(**params)
        self.max_parallel = max_parallel

    def _limit(self, job_overrides: list[list[str]]) -> tuple[int, str]:
        """How many jobs may run at once, and why."""
        from rlsweep.launchers import THREADS_KEY, default_max_parallel, job_threads, max_parallel_error
        from rlsweep.toggles.backend import usable_cpus

        if self.max_parallel is not None:
            if error := max_parallel_error(self.max_parallel):
                raise ValueError(error)
            return self.max_parallel, "hydra.launcher.max_parallel"
        assert self.config is not None
        cpus = usable_cpus()
        # the environment a job gets from submitit's local executor
        job_env = {**os.environ, "SUBMITIT_EXECUTOR": "local"}
        base = OmegaConf.select(self.config, THREADS_KEY, default=None)
        threads = max(job_threads(o, base, job_env) for o in job_overrides)
        return default_max_parallel(cpus, threads), f"{cpus} CPUs // {threads} thread(s) per job"

    def _prepare(self, sweep: _Sweep, cell_configs: list) -> None:
        from rlsweep import prepare

        sweep.limit = self._limit(sweep.overrides)
        prepare.prepare_sweep(sweep.folder, cell_configs, in_process=False, launcher=type(self).__name__,
                              limit=sweep.limit[0], gpus_per_node=self.params.get("gpus_per_node") or 0)

    def _run(self, sweep: _Sweep, order: list[int]) -> dict[int, JobReturn]:
        from rlsweep.launchers import run_limited

        limit, why = sweep.limit
        log.info(f"{len(sweep.overrides)} jobs, at most {limit} at once ({why}), seed-major order")
        executor = _executor(self._EXECUTOR, self.params)
        singletons = Singleton.get_state()
        stop_marker = sweep.folder / STOP_MARKER
        stop_marker.unlink(missing_ok=True)  # left by an earlier, stopped run of this sweep

        def submit(i: int) -> Any:
            idx = sweep.first_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(sweep.overrides[i]))}")
            # the job's hydra config records the limit it ran under (job.max_parallel)
            overrides = [*sweep.overrides[i], f"hydra.launcher.max_parallel={limit}"]
            return _submit_ignoring_sigint(executor, self, overrides, "hydra.sweep.dir", idx, f"job_id_for_{idx}",
                                           singletons)

        def stop(running: list[Any], pending: list[int]) -> None:
            if pending:
                log.warning(f"interrupted: {len(pending)} job(s) not started: "
                            f"{sorted(sweep.first_idx + i for i in pending)}")
            _stop_jobs(running, stop_marker)

        return run_limited(order, limit, submit,
                           lambda i, job: self._result(job, sweep.first_idx + i, sweep.overrides[i], sweep.folder), stop)

    @staticmethod
    def _result(job: Any, idx: int, overrides: list[str], sweep_dir: Path) -> JobReturn:
        """The job's ``JobReturn``; one that died without a result becomes a failed return saying so."""
        from submitit.core.utils import UncompletedJobError

        try:
            return job.results()[0]
        except UncompletedJobError:
            folder = sweep_dir / str(idx)
            # a job stopped by a signal sent to it alone says so in its record
            stopped = (read_record(folder) or {}).get("status") == STATUS_INTERRUPTED
            why = ("was stopped by a signal (its record: interrupted, checkpoint written; resume=true continues it)"
                   if stopped else "was killed (SIGKILL, out of memory) or crashed")
            ret = JobReturn(overrides=overrides, status=JobStatus.FAILED)
            ret.return_value = JobDied(
                f"rlsweep: job {idx} ({' '.join(filter_overrides(overrides)) or 'no overrides'}) ended without a "
                f"result: its process {why}; its record and log: {folder} (submitit's log: {job.paths.stdout.parent})")
            return ret

    def __call__(self, sweep_overrides: list[str], job_dir_key: str, job_num: int, job_id: str,
                 singleton_state: dict[Any, Any]) -> JobReturn:
        """In the job's process: stop on SIGINT/SIGTERM from here on, and at once if the sweep was stopped."""
        from rlsweep.signals import stop_before_training

        assert self.config is not None
        setup_globals()  # Hydra's resolvers (``${now:...}`` in hydra.sweep.dir): the plugin's __call__ registers them later
        stop_before_training(Path(str(self.config.hydra.sweep.dir)) / STOP_MARKER)
        return super().__call__(sweep_overrides, job_dir_key, job_num, job_id, singleton_state)


def _submit_ignoring_sigint(executor: Any, *args: Any) -> Any:
    """``executor.submit(*args)`` with the job's processes starting with SIGINT ignored: a Ctrl-C in the
    terminal would make submitit's controller kill its job before the checkpoint (the job handles SIGINT)."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        return executor.submit(*args)
    finally:
        signal.signal(signal.SIGINT, previous)


def _stop_jobs(jobs: list[Any], stop_marker: Path) -> None:
    """Ask every running job to stop with a checkpoint: SIGTERM to submitit's controller, which forwards it."""
    if not jobs:
        return
    try:
        stop_marker.touch()
    except OSError as exc:
        log.warning(f"cannot write {stop_marker}: {exc}; jobs that are starting may train on")
    for job in jobs:
        process = getattr(job, "_process", None)
        if process is not None and process.poll() is None:
            try:
                process.send_signal(signal.SIGTERM)
            except OSError:
                pass
    log.warning(f"stopping {len(jobs)} running job(s): each writes its checkpoint and an interrupted record")


@dataclass
class RLSweepBasicLauncherConf(basic_launcher.BasicLauncherConf):
    """Hydra's basic launcher (no fields), running the jobs seed-major."""

    _target_: str = "hydra_plugins.rlsweep_launcher.rlsweep_launcher.BasicLauncher"


class BasicLauncher(_SeedMajorLaunch, basic_launcher.BasicLauncher):
    """Hydra's basic launcher -- jobs one after another in this process -- in seed-major order.

    Each job keeps its number, id and folder; only the order they run in changes. The returns
    come back in job order, as Hydra's sweeper expects them.
    """

    _IN_PROCESS = True

    def _prepare(self, sweep: _Sweep, cell_configs: list) -> None:
        from rlsweep import prepare

        # cold runs one at a time, as this launcher runs its jobs; then every cell once in this process
        prepare.prepare_sweep(sweep.folder, cell_configs, in_process=True, launcher=type(self).__name__)

    def _run(self, sweep: _Sweep, order: list[int]) -> dict[int, JobReturn]:
        assert self.hydra_context is not None
        assert self.task_function is not None
        configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        log.info(f"Launching {len(sweep.overrides)} jobs locally, seed-major order")
        runs: dict[int, JobReturn] = {}
        with frozen_heap():
            for i in order:
                idx = sweep.first_idx + i
                log.info(f"\t#{idx} : {' '.join(filter_overrides(sweep.overrides[i]))}")
                config = ((sweep.composed or {}).pop(tuple(sweep.overrides[i]), None)
                          or self.hydra_context.config_loader.load_sweep_config(self.config, sweep.overrides[i]))
                with open_dict(config):
                    config.hydra.job.id = idx
                    config.hydra.job.num = idx
                runs[i] = run_job(hydra_context=self.hydra_context, task_function=self.task_function,
                                  config=config, job_dir_key="hydra.sweep.dir", job_subdir_key="hydra.sweep.subdir")
                configure_log(self.config.hydra.hydra_logging, self.config.hydra.verbose)
        return runs


@dataclass
class RLSweepBasicSweeperConf(basic_sweeper.BasicSweeperConf):
    """Hydra's basic sweeper (same fields), without its second composition of every job."""

    _target_: str = "hydra_plugins.rlsweep_launcher.rlsweep_launcher.BasicSweeper"


class BasicSweeper(basic_sweeper.BasicSweeper):
    """Hydra's basic sweeper that does not compose again, before launching a batch, the jobs
    rlsweep's pre-flight (:mod:`rlsweep.hydra_callbacks`) checked; any other job it composes as before.
    Named like Hydra's class: rlsweep expands the sweeps of a ``BasicSweeper``.
    """

    def validate_batch_is_legal(self, batch: Any) -> None:
        from rlsweep.hydra_callbacks import session_of

        session = session_of(getattr(self, "hydra_context", None))
        checked = session.checked_jobs if session is not None else set()
        unchecked = [overrides for overrides in batch if tuple(overrides) not in checked]
        if unchecked:
            super().validate_batch_is_legal(unchecked)


@dataclass
class RLSweepSlurmQueueConf(SlurmQueueConf):
    """The plugin's ``submitit_slurm`` fields, plus whether the launching process waits for the jobs."""

    _target_: str = "hydra_plugins.rlsweep_launcher.rlsweep_launcher.SlurmLauncher"
    # true: wait for every job and report the sweep at the end (the plugin's behaviour); false:
    # submit the array, print its id and the commands to follow it (sweeps.status, sweeps.report)
    # and return at once
    wait: bool = True


class SlurmLauncher(_SeedMajorLaunch, submitit_launcher.SlurmLauncher):
    """The plugin's Slurm launcher that writes the sweep's manifest (:func:`rlsweep.status.write_manifest`)
    at submission; with ``wait=false`` it returns a completed, valueless return per job at once.
    Named like the plugin's class (records say ``SlurmLauncher``).
    """

    def __init__(self, wait: bool = True, **params: Any) -> None:
        super().__init__(**params)
        self.wait = wait

    def _run(self, sweep: _Sweep, order: list[int]) -> Optional[dict]:  # noqa: UP045
        from rlsweep.hydra_callbacks import session_of
        from rlsweep.launchers import submitted_message
        from rlsweep.status import write_manifest

        singletons = Singleton.get_state()  # a deep copy of Hydra's global state: once, not per job
        job_params = []
        for i in order:
            idx = sweep.first_idx + i
            log.info(f"\t#{idx} : {' '.join(filter_overrides(sweep.overrides[i]))}")
            job_params.append((sweep.overrides[i], "hydra.sweep.dir", idx, f"job_id_for_{idx}", singletons))
        jobs = dict(zip(order, sweep.executor.map_array(self, *zip(*job_params)), strict=True))
        # every job, under the Slurm task that trains it (a group's members under its first job's)
        task = {i: jobs[g[0]] for g in sweep.groups for i in g}
        write_manifest(sweep.folder, [(sweep.first_idx + i, o, task[i].job_id) for i, o in enumerate(sweep.overrides)],
                       type(self).__name__)
        if self.wait:
            return {i: j.results()[0] for i, j in jobs.items()}
        message = submitted_message(str(sweep.folder), [str(j.job_id).split("_", 1)[0] for j in jobs.values()],
                                    len(sweep.overrides))
        if (session := session_of(self.hydra_context)) is not None:
            session.submitted.append(message)  # printed once Hydra is done, instead of a report
        else:
            log.info(message)
        return None

    def _prepare(self, sweep: _Sweep, cell_configs: list) -> None:
        """The executor of the sweep's array (``sweep.executor``), and the sweep's preparation
        (:mod:`rlsweep.prepare`) as one Slurm job the array waits for (``afterany``: a failed preparation
        still lets the jobs run, unprepared); a sweep that compiles nothing needs no job: its preparation
        file is written here."""
        from rlsweep import prepare

        sweep.executor = executor = _executor(self._EXECUTOR, self.params)
        name = type(self).__name__
        if not any(prepare.compiles(c) for _, c in cell_configs):
            if cell_configs:
                prepare.prepare_sweep(sweep.folder, cell_configs, in_process=False, launcher=name)
            return
        # cold runs one after another on the job's node, each in a fresh process
        job = executor.submit(prepare.prepare_sweep, sweep.folder, cell_configs, in_process=False, launcher=name)
        log.info(f"preparation: Slurm job {job.job_id} measures each compiled cell's cold compile once, untimed, "
                 "or reuses the one the compile cache's ledger keeps for that node; the sweep's jobs start after it "
                 f"(its log: {job.paths.stdout})")
        extra = dict(self.params.get("additional_parameters") or {})
        after = f"afterany:{job.job_id}"
        extra["dependency"] = f"{extra['dependency']},{after}" if extra.get("dependency") else after
        executor.update_parameters(**{f"{self._EXECUTOR}_additional_parameters": extra})


# every node above under its own name (the presets conf/hydra/launcher/slurm_cpu.yaml and slurm_gpu.yaml build on
# rlsweep_slurm); :data:`rlsweep.launchers.OWN_NODES` reads Hydra's and the submitit plugin's names as these
for _group, _name, _node in (("hydra/launcher", "rlsweep_local", RLSweepLocalQueueConf),
                             ("hydra/launcher", "rlsweep_basic", RLSweepBasicLauncherConf),
                             ("hydra/launcher", "rlsweep_slurm", RLSweepSlurmQueueConf),
                             ("hydra/sweeper", "rlsweep_basic", RLSweepBasicSweeperConf)):
    ConfigStore.instance().store(group=_group, name=_name, node=_node, provider="rlsweep")
