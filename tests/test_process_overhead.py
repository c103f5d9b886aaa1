"""What every training process pays besides training: its start-up imports and its exit.

A job loads nothing at start that its first env step does not need: each module below costs from
a tenth of a second to seconds to import, paid by every job of a sweep before it steps an env.
And its exit skips the interpreter's last collection over the whole heap (about 0.8 s). The
seconds themselves are the bench's (cold-start and end-to-end rows); these tests guard the causes,
in fresh interpreters.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers import ROOT

#: what no job needs before it steps an env: W&B (a job that logs imports it when its run starts),
#: the launchers' and sweepers' libraries (the launching process uses them), the report's and the
#: bench's stacks, the peers
NOT_BEFORE_THE_FIRST_STEP = ("wandb", "submitit", "optuna", "pandas", "matplotlib", "scipy", "rlsweep.report",
                             "benchmarks", "stable_baselines3", "torchrl")
#: torch's compiler stack (dynamo, inductor, sympy: about a second): loaded by torch itself once a
#: job builds its optimizer, but never by merely importing rlsweep's entry points
COMPILER = ("torch._dynamo", "torch._inductor", "sympy")


def _heavy(modules: list[str], names: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == n or m.startswith(n + ".") for n in names))


def _python(code: str) -> dict[str, str]:
    """Run ``code`` in a fresh interpreter; its output lines ``KEY value`` as a dict."""
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return dict(line.split(" ", 1) for line in proc.stdout.splitlines() if line.startswith(("MODULES ", "FROZEN ", "SETUP ", "TRAINING ")))


def test_importing_the_training_entry_points_loads_nothing_heavy() -> None:
    out = _python(
        "import json, sys\n"
        "import rlsweep.train, rlsweep.commands, rlsweep.cli, rlsweep.job, rlsweep.runner, rlsweep.tracking\n"
        "import rlsweep.results, rlsweep.config, rlsweep.envs, rlsweep.toggles, rlsweep.hydra_callbacks\n"
        "print('MODULES', json.dumps(sorted(sys.modules)))")
    modules = json.loads(out["MODULES"])
    assert "rlsweep.job" in modules and "torch" in modules  # the imports above did run
    assert not _heavy(modules, NOT_BEFORE_THE_FIRST_STEP + COMPILER)


def test_a_job_steps_its_first_env_without_them_and_exits_without_the_last_collection(tmp_path: Path) -> None:
    # the bench's cold-start command line; what is loaded when the training loop begins, and
    # whether the collector still reaches the heap when the process exits
    args = ["experiment=smoke", "logger.mode=disabled", "progress=false", "backend.num_threads=1", "device=cpu",
            "total_env_steps=256", "eval_episodes=0", f"hydra.run.dir={tmp_path / 'run'}"]
    out = _python(
        "import atexit, gc, json, runpy, sys\n"
        "atexit.register(lambda: print('FROZEN', gc.get_freeze_count(), flush=True))  # runs after later ones\n"
        "import rlsweep.runner as runner\n"
        "loop, make_envs = runner._loop, runner.make_envs\n"
        "def first_step(*args, **kwargs):\n"
        "    print('MODULES', json.dumps(sorted(sys.modules)), flush=True)\n"
        "    print('TRAINING', gc.isenabled(), gc.get_freeze_count(), flush=True)\n"
        "    return loop(*args, **kwargs)\n"
        "def set_up(*args, **kwargs):\n"
        "    print('SETUP', gc.isenabled(), flush=True)\n"
        "    return make_envs(*args, **kwargs)\n"
        "runner._loop, runner.make_envs = first_step, set_up\n"
        f"sys.argv = ['rlsweep.train', *{args!r}]\n"
        "runpy.run_module('rlsweep.train', run_name='__main__', alter_sys=True)\n")
    modules = json.loads(out["MODULES"])
    assert "rlsweep.algos.ppo" in modules and "gymnasium.envs.classic_control.cartpole" in modules
    assert not _heavy(modules, NOT_BEFORE_THE_FIRST_STEP)
    assert int(out["FROZEN"]) > 100_000  # the heap was moved out of the last collection's way
    # no collection over start-up's heap: off through the set-up; when training begins, that heap is
    # frozen (out of every later collection's way) and collection is back on
    assert out["SETUP"] == "False"
    enabled, frozen = out["TRAINING"].split()
    assert enabled == "True" and int(frozen) > 100_000
    assert json.loads((tmp_path / "run" / "result.json").read_text())["status"] == "ok"


def test_the_last_collection_is_skipped_at_exit_only() -> None:
    out = _python(
        "import atexit, gc\n"
        "atexit.register(lambda: print('FROZEN', gc.get_freeze_count() > 0, flush=True))\n"
        "from rlsweep.signals import skip_final_gc_at_exit\n"
        "registered = atexit._ncallbacks()\n"
        "skip_final_gc_at_exit(); skip_final_gc_at_exit()\n"
        "assert atexit._ncallbacks() == registered + 1  # once per process\n"
        "assert gc.get_freeze_count() == 0  # until the exit, an in-process caller's garbage is collected\n")
    assert out["FROZEN"] == "True"


@pytest.mark.parametrize("multirun", ["-m", "hydra.mode=MULTIRUN"])
def test_a_sweeps_jobs_in_one_process_run_on_a_frozen_heap_that_is_collectable_again_after(tmp_path: Path,
                                                                                         multirun: str) -> None:
    # the basic launcher runs a sweep's jobs in its own process: what the imports and the preparation left
    # is frozen while they run, so the collection each job makes before its clock starts scans only what
    # the jobs made (not ~0.5 M objects, ~0.25 s a job); once they are done the heap is collectable again
    args = [multirun, "experiment=smoke", "logger.mode=disabled", "progress=false", "backend.num_threads=1",
            "total_env_steps=256", "eval_episodes=0", "seed=0,1", f"hydra.sweep.dir={tmp_path / 'sweep'}"]
    code = ("import gc, runpy, sys\n"
            "import rlsweep.runner as runner\n"
            "loop = runner._loop\n"
            "def first_step(*args, **kwargs):\n"
            "    print('FROZEN', gc.get_freeze_count(), flush=True)\n"
            "    return loop(*args, **kwargs)\n"
            "runner._loop = first_step\n"
            f"sys.argv = ['sweeps.train', *{args!r}]\n"
            "try:\n"
            "    runpy.run_module('sweeps.train', run_name='__main__', alter_sys=True)\n"
            "except SystemExit as exc:\n"
            "    assert not exc.code, exc.code\n"
            "print('AFTER', gc.get_freeze_count(), flush=True)\n")
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    frozen = [int(line.split()[1]) for line in proc.stdout.splitlines() if line.startswith("FROZEN ")]
    assert len(frozen) == 3, proc.stdout  # the preparation's warm pass, then the two jobs
    # collection is not deferred in the launching process (its pre-flight composes every cell): nothing is
    # frozen before the jobs
    assert frozen[0] == 0 and min(frozen[1:]) > 100_000
    assert [line for line in proc.stdout.splitlines() if line.startswith("AFTER ")] == ["AFTER 0"]


def test_deferred_collection_resumes_on_a_frozen_heap_where_training_begins_or_when_the_block_ends() -> None:
    out = _python(
        "import gc\n"
        "from rlsweep.signals import collection_deferred, resume_collection\n"
        "with collection_deferred():\n"
        "    assert not gc.isenabled()\n"
        "    resume_collection()  # training begins\n"
        "    assert gc.isenabled() and gc.get_freeze_count() > 0\n"
        "assert gc.isenabled() and gc.get_freeze_count() == 0  # the heap is the caller's again\n"
        "with collection_deferred():  # training never began (bad input): back on, nothing frozen\n"
        "    assert not gc.isenabled()\n"
        "assert gc.isenabled() and gc.get_freeze_count() == 0\n"
        "resume_collection()  # outside the block: nothing to resume\n"
        "assert gc.get_freeze_count() == 0\n"
        "gc.disable()\n"
        "with collection_deferred():  # the caller's own setting is theirs\n"
        "    resume_collection()\n"
        "    assert not gc.isenabled()\n"
        "print('FROZEN', 'done')\n")
    assert out["FROZEN"] == "done"


@pytest.mark.parametrize("name", ["LocalLauncher", "SlurmLauncher"])
def test_a_launchers_job_process_defers_collection_until_training_begins(monkeypatch: pytest.MonkeyPatch,
                                                                        name: str) -> None:
    import gc

    from hydra_plugins.hydra_submitit_launcher import submitit_launcher
    from omegaconf import OmegaConf

    from hydra_plugins.rlsweep_launcher import rlsweep_launcher

    seen = []  # what the job's code (upstream's __call__ runs it) finds
    monkeypatch.setattr(submitit_launcher.BaseSubmititLauncher, "__call__",
                        lambda self, *args: seen.append(gc.isenabled()))
    launcher = getattr(rlsweep_launcher, name).__new__(getattr(rlsweep_launcher, name))
    launcher.config = OmegaConf.create({"hydra": {"sweep": {"dir": "/nonexistent/sweep"}}})
    launcher(["seed=0"], "hydra.sweep.dir", 0, "0", {})  # as submitit calls it in the job's process
    assert seen == [False] and gc.isenabled()
