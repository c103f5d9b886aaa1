"""How rlsweep's launchers schedule a sweep: how many jobs at once, in which order, in which groups.

Jobs sharing a machine's cores distort each other's timings (docs/results/bench_choices.md), so
local jobs run at most ``CPUs // threads per job`` at once; a shared machine's drift should spread
over every cell, so jobs start seed-major, the cells' order alternating from one seed to the next. No torch: the launcher plugin calls these in the
launching process.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from rlsweep.records import cell_key
from rlsweep.toggles.backend import default_num_threads

#: the launchers and sweeper rlsweep's app runs when its command line names Hydra's or the submitit plugin's
#: (``hydra/launcher=submitit_slurm``, the default ``basic``): rlsweep's are registered under their own names,
#: so that installing rlsweep changes nothing for another Hydra app
OWN_NODES = {"hydra/launcher": {"basic": "rlsweep_basic", "submitit_local": "rlsweep_local",
                                "submitit_slurm": "rlsweep_slurm"},
             "hydra/sweeper": {"basic": "rlsweep_basic"}}
THREADS_KEY = "backend.num_threads"
SEED_KEY = "seed"
SEEDS_PER_JOB_KEY = "seeds_per_job"
#: seconds between two looks at the running local processes (a job lasts seconds at the very least)
POLL_S = 0.2


def own_nodes(args: list[str]) -> list[str]:
    """The command line with Hydra's and the submitit plugin's launcher and sweeper names read as rlsweep's."""
    out = []
    for arg in args:
        key, sep, value = arg.partition("=")
        own = OWN_NODES.get(key.lstrip("+~/"), {})
        out.append(f"{key}={own[value]}" if sep and value in own else arg)
    return out


def max_parallel_error(value: object) -> str | None:
    """Why ``hydra.launcher.max_parallel=value`` cannot be; None when it can. The pre-flight check and
    the launcher (which also runs when no check did, e.g. from Hydra's API) say it with these words."""
    if isinstance(value, int) and value < 1:
        return (f"hydra.launcher.max_parallel={value}: at least 1 job must run at a time; "
                "null = as many as fit: this machine's CPUs // each job's threads")
    return None


def default_max_parallel(cpus: int, threads_per_job: int) -> int:
    """Jobs that fit side by side: ``cpus // threads_per_job``, at least 1 (a job wider than the machine runs alone)."""
    return max(1, cpus // max(1, threads_per_job))


def _override_value(overrides: Sequence[str], key: str, default: Any = None) -> Any:
    """The value ``overrides`` give ``key`` (``key=v``, ``+key=v``, ``++key=v``; the last), else ``default``."""
    given = [v.strip() for k, sep, v in (o.partition("=") for o in overrides) if sep and k.lstrip("+") == key]
    return given[-1] if given else default


def job_threads(overrides: Sequence[str], base_threads: Any, environ: Mapping[str, str]) -> int:
    """The intra-op threads a job with these sweep ``overrides`` will use, given ``backend.num_threads`` of
    the sweep's config (``base_threads``) and the environment the job will run in (``environ``)."""
    value = _override_value(overrides, THREADS_KEY, base_threads)
    if isinstance(value, str):
        value = None if value.lower() in ("null", "none", "") else value
    try:
        threads = int(value) if value is not None else default_num_threads(environ)
    except ValueError:  # not a number: the job's own validation reports it
        threads = 1
    return max(1, threads)


def seed_major_order(job_overrides: Sequence[Sequence[str]], rounds_of: Sequence[Sequence[str]] = ()) -> list[int]:
    """Indices of the jobs in run order: every cell's first seed, then every cell's second seed, ...; the
    cells in the sweep's order for the first seed, reversed for the second, and so on, so that whatever
    favours the first (or last) job of a round falls on every cell alike: ``compile=none,default seed=0,1``
    runs (none,0) (default,0) (default,1) (none,1).
    """
    seeds = [_override_value(o, SEED_KEY, "") for o in job_overrides]
    # the rounds in the order the sweep lists its seeds (``rounds_of``: the whole sweep's jobs, where only some run)
    listed = [_override_value(o, SEED_KEY, "") for o in rounds_of] + seeds
    rank = {s: i for i, s in enumerate(dict.fromkeys(listed))}
    return sorted(range(len(job_overrides)), key=lambda i: (rank[seeds[i]], -i if rank[seeds[i]] % 2 else i))


def seed_groups(job_overrides: Sequence[Sequence[str]], base_seeds_per_job: Any) -> list[list[int]]:
    """The sweep's jobs as the processes that train them: lists of job indices, a cell's jobs
    ``seeds_per_job`` at a time in the sweep's order (its last group may be smaller). A group's first
    job trains them all, each seed writing its own record in its own job's folder."""
    groups: list[list[int]] = []
    open_groups: dict[tuple[str, ...], list[int]] = {}
    for i, overrides in enumerate(job_overrides):
        try:
            size = int(_override_value(overrides, SEEDS_PER_JOB_KEY, base_seeds_per_job or 1))
        except ValueError:
            size = 1  # the pre-flight refused anything else; a value it did not see trains alone
        cell = cell_key(overrides, (SEED_KEY,))
        group = open_groups.get(cell)
        if group is None or len(group) >= size or _override_value(overrides, SEED_KEY) is None:
            group = open_groups[cell] = []
            groups.append(group)
        group.append(i)
    return groups


def round_member(members: Sequence[Any]) -> Any:
    """Of the seeds one process trains together, the one whose round of a seed-major sweep it runs in: the
    middle one (the launcher schedules it so; the report reads the run order so)."""
    return members[(len(members) - 1) // 2]


def group_members(job_overrides: Sequence[Sequence[str]], group: Sequence[int], first_num: int) -> list[dict[str, Any]]:
    """What the job that trains ``group`` needs of each member: its number, seed and overrides."""
    return [{"num": first_num + i, "seed": int(_override_value(job_overrides[i], SEED_KEY)),
             "overrides": list(job_overrides[i])} for i in group]


def run_limited(order: Iterable[int], limit: int, submit: Callable[[int], Any], result: Callable[[int, Any], Any],
                stop: Callable[[list[Any], list[int]], None]) -> dict[int, Any]:
    """Start job ``i`` of ``order`` (``submit(i)``: a submitit job) when fewer than ``limit`` run; then each one's
    ``result(i, job)`` by ``i``. A Ctrl-C: ``stop(the running jobs, the indices not started)``, then raised on."""
    pending = list(order)
    jobs: dict[int, Any] = {}
    running: list[Any] = []
    try:
        while pending:
            running = [job for job in running if not job.done()]  # only these are asked: a sweep may have hundreds
            while pending and len(running) < limit:
                i = pending.pop(0)
                jobs[i] = submit(i)
                running.append(jobs[i])
            if pending:
                time.sleep(POLL_S)
        return {i: result(i, job) for i, job in jobs.items()}
    except KeyboardInterrupt:
        stop([job for job in jobs.values() if not job.done()], pending)
        raise


def submitted_message(sweep_dir: str, array_ids: Sequence[str], num_jobs: int) -> str:
    """What a fire-and-forget launch prints: the array, the sweep folder, the commands to use next."""
    ids = ", ".join(dict.fromkeys(array_ids))
    return (f"rlsweep: submitted {num_jobs} job(s) as Slurm array {ids}; not waiting (hydra.launcher.wait=false).\n"
            f"  sweep folder: {sweep_dir}\n"
            f"  where the jobs stand:  python -m sweeps.status {sweep_dir}\n"
            f"  compare the results:   python -m sweeps.report {sweep_dir}\n"
            f"  cancel them:           scancel {' '.join(dict.fromkeys(array_ids))}")
