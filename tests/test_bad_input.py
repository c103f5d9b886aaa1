"""Bad input, table-driven, through the real `python -m sweeps.train`.

Every malformed invocation exits with status 2 before any job starts, with one clear message and no
Python traceback (unless RLSWEEP_DEBUG=1 asks for one), and leaves no output folder behind: not
the one it was given, nor Hydra's default ones under the working directory. The message appears
once: not also as the warning Hydra makes of an exception in a callback, nor again when Hydra goes
on to compose the same job. The invocations run two at a time in fresh working directories; a
representative subset runs as a sweep (-m) too.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import torch
from helpers import PLUGIN_CONF, ROOT

from rlsweep.records import read_result

# tiny, and valid for every algorithm (a case's own value of a key comes later, and wins)
FAST = ["progress=false", "logger.mode=disabled", "total_env_steps=512", "eval_episodes=2"]
TD3_CONF = PLUGIN_CONF["td3"]


@dataclass(frozen=True)
class Case:
    """One malformed invocation.

    ``out`` is where the run (or with ``-m``, the sweep) is told to write; ``{tmp}`` is the case's
    own folder; None passes no folder (Hydra's defaults under the working directory apply).
    ``message`` must appear exactly once in stderr. The exit status is 2 whichever found the error:
    rlsweep's checks, Hydra's composition or argparse.
    """

    id: str
    args: tuple[str, ...]
    message: str
    modes: tuple[str, ...] = ("run",)  # "run": a single run; "multirun": the same as a sweep (-m)
    out: str | None = "{tmp}/out"
    env: dict[str, str] = field(default_factory=dict)
    flags: tuple[str, ...] = ()  # command-line flags, after the overrides (argparse wants them together)


BOTH = ("run", "multirun")
NO_CREDENTIALS = {"WANDB_API_KEY": "", "NETRC": "/nonexistent/netrc"}

CASES = [
    # typos in groups, options and keys
    Case("group-option-typo", ("compile=maxautotune",), "compile=maxautotune is not an option of compile (did you "
         "mean compile=max-autotune?); choose one of: default, max-autotune,", modes=BOTH),
    Case("algo-typo", ("algo=ppp",), "algo=ppp is not an option of algo (did you mean algo=ppo?)"),
    Case("dtype-typo", ("dtype=bf16",), "dtype=bf16 is not an option of dtype (did you mean dtype=bfloat16?); choose "
         "one of: bfloat16, float16, float32", modes=BOTH),
    # an optional group: Hydra itself would run without the preset
    Case("experiment-typo", ("experiment=smok",), "experiment=smok is not an option of experiment (did you mean "
         "experiment=smoke?)", modes=BOTH),
    Case("slurm-limit-shorter-than-its-signal", ("hydra/launcher=submitit_slurm", "hydra.launcher.timeout_min=2"),
         "hydra.launcher.timeout_min=2 leaves no time to train", modes=("multirun",)),
    Case("launcher-typo", ("hydra/launcher=submitit_locall",), "hydra/launcher=submitit_locall is not an option of "
         "hydra/launcher (did you mean hydra/launcher=submitit_local?)"),
    Case("no-local-job-at-a-time", ("hydra/launcher=submitit_local", "hydra.launcher.max_parallel=0"),
         "hydra.launcher.max_parallel=0: at least 1 job must run at a time", modes=("multirun",)),
    # unknown keys: the closest ones, never Hydra's advice to add the key with + (checked for every case)
    Case("group-name-typo", ("envv=cartpole",), "envv is not a key of the config (TrainConfig); did you mean env?"),
    Case("unknown-key", ("algo.nonexistent=1",), "algo.nonexistent is not a hyper-parameter of rlsweep.algos.ppo.PPO "
         "(not in its schema, PPOConfig); its keys: activation, anneal_lr,", modes=BOTH),
    Case("key-typo", ("algo.lrr=0.001",), "algo.lrr is not a hyper-parameter of rlsweep.algos.ppo.PPO (not in its "
         "schema, PPOConfig); did you mean algo.lr?", modes=BOTH),
    Case("key-typo-added", ("+algo.lrr=0.001",), "algo.lrr is not a hyper-parameter of rlsweep.algos.ppo.PPO (not in "
         "its schema, PPOConfig); did you mean algo.lr?", modes=BOTH),
    Case("plugin-key-typo", ("algo=td3", "algo.lrr=0.001"), "algo.lrr is not a hyper-parameter of examples.td3.td3.TD3 "
         "(not in its schema, TD3Config); did you mean algo.lr?", modes=BOTH, flags=("--config-dir", str(TD3_CONF))),
    Case("toggle-typo", ("twin_module=true",), "twin_module is not a key of the config (TrainConfig); did you mean "
         "twin_modules?", modes=BOTH),
    Case("toggle-typo-added", ("+twin_module=true",), "twin_module is not a key of the config (TrainConfig); did you "
         "mean twin_modules?", modes=BOTH),
    Case("top-level-key-typo", ("seeed=1",), "seeed is not a key of the config (TrainConfig); did you mean seed?"),
    Case("group-key-typo", ("compile.moed=default",), "compile.moed is not a key of compile (CompileConfig); did you "
         "mean compile.mode?"),
    Case("choice-by-key-typo", ("compile.mode=fast",), "compile.mode='fast' is not valid; choose one of"),
    Case("logger-mode-typo", ("logger.mode=offlne",), "logger.mode='offlne' is not valid"),
    Case("unknown-flag", ("--frobnicate",), "unrecognized arguments: --frobnicate"),
    Case("conflicting-flags", (), "Only one of --run, --multirun", modes=("multirun",), flags=("--cfg", "job")),
    # wrong types
    Case("bool-not-bool", ("twin_modules=maybe",), "Value 'maybe' is not a valid bool", modes=BOTH),
    Case("int-not-int", ("seed=abc",), "Value 'abc' of type 'str' could not be converted to Integer", modes=BOTH),
    # ... in one job of a sweep: Hydra composed the sweep without it, the callback composes each job
    Case("wrong-type-in-a-sweep", ("algo.lr=0.001,abc",), "Value 'abc' of type 'str' could not be converted to Float",
         modes=("multirun",)),
    Case("option-typo-in-a-sweep", ("compile=none,bogus",), "compile=bogus is not an option of compile; choose one of:",
         modes=("multirun",)),
    Case("new-key", ("+foo=1",), "foo is not a key of the config (TrainConfig); its keys: algo, backend,",
         modes=("multirun",)),
    # broken sweep syntax
    Case("unclosed-range", ("seed=range(0,3",), "no viable alternative at input 'range(0,3'", modes=("multirun",)),
    Case("zero-step-range", ("seed=range(0,3,0)",), "range() arg 3 must not be zero", modes=("multirun",)),
    Case("int-given-float", ("total_env_steps=1.5",), "Value '1.5' of type 'float' could not be converted to Integer"),
    Case("float-not-float", ("algo.lr=fast",), "could not be converted to Float"),
    Case("list-not-list", ("algo.hidden_sizes=64",), "int is not a ListConfig, list or tuple"),
    Case("unresolvable-interpolation", ("logger.project=${oc.env:RLSWEEP_NO_SUCH_VAR}",),
         "Environment variable 'RLSWEEP_NO_SUCH_VAR' not found"),
    # budgets and ranges
    Case("zero-budget", ("total_env_steps=0",), "total_env_steps must be > 0, got 0", modes=BOTH),
    Case("negative-budget", ("total_env_steps=-5",), "total_env_steps must be > 0, got -5"),
    Case("huge-budget", ("total_env_steps=100000000000000",), "total_env_steps=100000000000000 is too large"),
    Case("zero-envs", ("algo.num_envs=0",), "algo.num_envs must be > 0"),
    Case("negative-lr", ("algo.lr=-0.1",), "algo.lr must be > 0"),
    Case("infinite-lr", ("algo.lr=inf",), "algo.lr must be finite"),
    Case("nan-lr", ("algo.lr=nan",), "algo.lr must be > 0, got nan"),
    Case("zero-epochs", ("algo.update_epochs=0",), "algo.update_epochs must be > 0"),
    Case("gamma-above-one", ("algo.gamma=1.5",), "algo.gamma must be in (0, 1]"),
    Case("eps-fraction-above-one", ("algo=dqn", "algo.exploration_fraction=2"),
         "algo.exploration_fraction must be in [0.0, 1.0]"),
    Case("overflowing-lr", ("algo.lr=1e999",), "algo.lr must be finite, got inf", modes=("multirun",)),
    Case("negative-warmup", ("warmup_iters=-1",), "warmup_iters must be >= 0"),
    Case("negative-seed", ("seed=-1",), "seed must be in [0, 4294967295], got -1"),  # numpy's range
    Case("seed-too-large", ("seed=0,4294967296",), "seed must be in [0, 4294967295], got 4294967296",
         modes=("multirun",)),
    Case("huge-eval", ("eval_episodes=100000",), "eval_episodes must be in [0, 1000]"),
    Case("zero-episode-limit", ("env.max_episode_steps=0",), "env.max_episode_steps must be > 0"),
    Case("zero-threads", ("backend.num_threads=0",), "backend.num_threads must be > 0"),
    Case("matmul-precision-typo", ("backend.matmul_precision=low",), "backend.matmul_precision='low' is not valid"),
    Case("bad-job-deep-in-a-sweep", ("seed=0,1,2", "algo.lr=0.001,-1"), "algo.lr=-1", modes=("multirun",)),
    # environments
    Case("env-id-typo", ("env.id=CartPol-v1",), "Did you mean: CartPole-v1", modes=BOTH),
    Case("unknown-env-id", ("env.id=NoSuchEnv-v9",), "'NoSuchEnv-v9' is not a registered gymnasium environment"),
    Case("unknown-env-id-in-a-sweep", ("env.id=Nope-v0,CartPole-v1",),
         "'Nope-v0' is not a registered gymnasium environment", modes=("multirun",)),
    Case("env-module-missing", ("env.id=no_such_module:Foo-v0",), "module 'no_such_module' cannot be imported"),
    Case("vectorization-typo", ("env.vectorization=threads",), "env.vectorization='threads' is not valid"),
    # algorithm / env mismatches
    Case("dqn-on-continuous", ("algo=dqn", "env=pendulum"), "algo=dqn needs a Discrete action space", modes=BOTH),
    Case("sac-on-discrete", ("algo=sac", "env=cartpole"), "algo=sac needs a Box action space"),
    # devices
    Case("unknown-device", ("device=gpu",), "device='gpu' is not valid; use auto, cpu, cuda or cuda:N"),
    *([Case("cuda-without-gpu", ("device=cuda",), "no CUDA device is available here", modes=BOTH)]
      if not torch.cuda.is_available() else []),
    # conflicting toggles
    Case("fullgraph-without-compile", ("compile.fullgraph=true",), "compile.fullgraph=true conflicts with compile=none",
         modes=BOTH),
    Case("dynamic-without-compile", ("compile.dynamic=true",), "compile.dynamic=true conflicts with compile=none"),
    Case("cpp-wrapper-without-compile", ("compile.cpp_wrapper=true",),
         "compile.cpp_wrapper=true conflicts with compile=none"),
    Case("skip-guards-without-compile", ("compile.skip_guards_after_warmup=true",),
         "compile.skip_guards_after_warmup=true conflicts with compile=none"),
    Case("compile-unknown-function", ("compile=default", "compile.functions=[act,step]"),
         "compile.functions must be a non-empty list of distinct names from ['act', 'update']"),
    Case("compile-no-function", ("compile=default", "compile.functions=[]"), "compile.functions must be a non-empty"),
    Case("deterministic-cudnn-benchmark", ("deterministic=true", "backend.cudnn_benchmark=true"),
         "deterministic=true conflicts with backend.cudnn_benchmark=true"),
    # W&B
    Case("online-without-credentials", ("logger.mode=online",), "wandb login", env=NO_CREDENTIALS, modes=BOTH),
    # output folders: unwritable, under a file, unparsable quoting, a resume without its folder
    Case("unwritable-output-dir", (), "cannot be created: no folder can be made in /proc", out="/proc/rlsweep-out",
         modes=BOTH),
    Case("output-dir-under-a-file", (), "is a file", out="{tmp}/a-file/out", modes=BOTH),
    Case("unbalanced-quote-in-dir", (), "override_grammar", out="'{tmp}/my sweep", modes=BOTH),
    Case("unresolvable-dir", (), "Environment variable 'RLSWEEP_NO_SUCH_VAR' not found",
         out="${{oc.env:RLSWEEP_NO_SUCH_VAR}}/out", modes=BOTH),
    Case("resume-without-its-folder", ("resume=true",), "resume=true needs the folder", out=None, modes=BOTH),
]

INVOCATIONS = [(case, mode) for case in CASES for mode in case.modes]


def _invoke(case: Case, mode: str, base: Path) -> dict:
    tmp = base / f"{case.id}-{mode}"
    cwd = tmp / "cwd"  # Hydra's default output folders would appear here
    cwd.mkdir(parents=True)
    (tmp / "a-file").write_text("a regular file\n")
    args = [*FAST, *case.args]
    key = "hydra.sweep.dir" if mode == "multirun" else "hydra.run.dir"
    out = case.out.format(tmp=tmp) if case.out is not None else None
    if out is not None:
        args.append(f"{key}={out}")
    if mode == "multirun":
        args.insert(0, "-m")
    args += case.flags
    env = {**os.environ, **case.env, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}
    env.pop("RLSWEEP_DEBUG", None)
    env.pop("HYDRA_FULL_ERROR", None)
    proc = subprocess.run([sys.executable, "-m", "sweeps.train", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    return {"proc": proc, "cwd": cwd, "out": out}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory: pytest.TempPathFactory) -> dict:
    base = tmp_path_factory.mktemp("bad-input")
    with ThreadPoolExecutor(max_workers=2) as pool:  # ~2.5 s of imports each: use both cores
        futures = {(case.id, mode): pool.submit(_invoke, case, mode, base) for case, mode in INVOCATIONS}
        return {key: future.result() for key, future in futures.items()}


def test_the_table_is_big_enough() -> None:
    assert len(CASES) >= 30 and len(INVOCATIONS) >= 45


@pytest.mark.parametrize(("case", "mode"), INVOCATIONS, ids=[f"{c.id}-{m}" for c, m in INVOCATIONS])
def test_bad_input_fails_before_any_job_with_one_message(outcomes: dict, case: Case, mode: str) -> None:
    result = outcomes[(case.id, mode)]
    proc = result["proc"]
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert proc.stderr.count(case.message) == 1, proc.stderr[-3000:]  # once: not also a warning, nor again
    assert "To append to your config use +" not in proc.stderr  # Hydra's advice, wrong for a key that has a schema
    assert proc.stderr.lstrip().startswith(("rlsweep: ", "usage: ")), proc.stderr[-3000:]  # ours, or argparse's
    assert "Traceback" not in proc.stderr + proc.stdout
    assert len([line for line in proc.stderr.splitlines() if line.strip()]) <= 20  # one message, not a log
    assert "training" not in proc.stdout + proc.stderr  # no job started
    assert list(result["cwd"].iterdir()) == []  # no outputs/ or multirun/ folder
    if result["out"] is not None and not result["out"].startswith("'"):
        assert not Path(result["out"]).exists()


@pytest.mark.parametrize(("args", "trace"), [
    (["total_env_steps=0"], ["in on_run_start", "ConfigError: rlsweep: invalid configuration"]),  # ours
    # Hydra's: a preset that sets DQN's keys, with algo=ppo, fails as Hydra composes it
    (["experiment=sb3_dqn", "algo=ppo"], ["Traceback (most recent call last)", "ConfigCompositionException"]),
])
def test_rlsweep_debug_shows_the_traceback(tmp_path: Path, args: list[str], trace: list[str]) -> None:
    """RLSWEEP_DEBUG=1: the same bad input, with where it was found (and still no folder)."""
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, "-m", "sweeps.train", *FAST, *args, f"hydra.run.dir={out}"], cwd=ROOT,
                          env={**os.environ, "RLSWEEP_DEBUG": "1"}, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 2
    assert all(t in proc.stderr for t in trace), proc.stderr[-3000:]
    assert not out.exists()


def test_a_refused_sweep_leaves_its_folder_as_it_was(tmp_path: Path) -> None:
    """Refused for the finished job its folder holds: no report of that folder written or printed."""
    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / "result.json").write_text(json.dumps({"status": "ok"}))
    before = sorted(sweep.rglob("*"))
    proc = subprocess.run([sys.executable, "-m", "sweeps.train", "-m", *FAST, "seed=0,1", f"hydra.sweep.dir={sweep}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2
    assert proc.stderr.count("already holds 1 finished job(s)") == 1, proc.stderr[-3000:]
    assert proc.stdout == ""
    assert sorted(sweep.rglob("*")) == before


def test_a_valid_sweep_folder_with_spaces_and_quotes_works_end_to_end(tmp_path: Path) -> None:
    sweep = tmp_path / "my sweeps" / "it's \"quoted\" & [odd]"
    escaped = str(sweep).replace("\\", "\\\\").replace('"', '\\"')
    proc = subprocess.run([sys.executable, "-m", "sweeps.train", "-m", *FAST, "seed=0,1",
                           f'hydra.sweep.dir="{escaped}"'], cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for i in (0, 1):
        record = read_result(sweep / str(i))
        assert record["status"] == "ok" and record["job"]["sweep_dir"] == str(sweep.resolve())
    assert (sweep / "report" / "summary.md").is_file() and "2 ok" in (sweep / "report" / "summary.md").read_text()


def test_every_bad_option_and_a_sweep_given_twice_are_named_at_once(tmp_path: Path) -> None:
    """Two bad options: both named in one message; a swept key given again (which would silently sweep only
    the last value): refused; a plain key given twice: named, the last one used, as Hydra does."""
    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "sweeps.train", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=300, check=False, env={**os.environ, "PYTHONPATH": str(ROOT)})

    proc = run("dtype=bf16", "compile=maxauto")
    assert proc.returncode == 2 and "dtype=bf16 is not an option of dtype" in proc.stderr
    assert "compile=maxauto is not an option of compile (did you mean compile=max-autotune?)" in proc.stderr
    proc = run("-m", "dtype=float32,bfloat16", "seed=0,1", "dtype=float16")
    assert proc.returncode == 2 and "dtype is given twice (dtype=float32,bfloat16 and dtype=float16)" in proc.stderr
    assert list(tmp_path.iterdir()) == []
    proc = run("logger.mode=disabled", "logger.mode=offline", "--cfg", "job")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "logger.mode is given twice (logger.mode=disabled and logger.mode=offline): the last one is used" \
        in proc.stderr and "mode: offline" in proc.stdout


def test_a_sweep_given_after_a_plain_value_replaces_it(capsys: pytest.CaptureFixture[str]) -> None:
    """An experiment's budget, then a sweep of it: nothing is lost (Hydra keeps the sweep), so it runs, named
    once; a sweep given before another value of its key would lose its values: refused."""
    from rlsweep.cli import group_value_errors

    assert group_value_errors(["total_env_steps=256", "seed=0,1", "total_env_steps=4096,8192"]) == []
    note = capsys.readouterr().err
    assert note.count("total_env_steps is given twice") == 1 and "the last one is used" in note
    assert group_value_errors(["seed=0,1", "seed=2", "seed=3"]) == [
        "seed is given 3 times (seed=0,1 and seed=2 and seed=3): Hydra would keep only the last; "
        "give each key once (a sweep: key=a,b)"]


def test_every_value_its_schema_key_refuses_is_named_at_once() -> None:
    """Hydra stops at the first value a schema refuses; the command line's check names each of them, also inside
    a sweep, and leaves sweeps Hydra expands itself (range) and interpolations alone."""
    from rlsweep.cli import group_value_errors

    assert group_value_errors(["seed=abc", "total_env_steps=xyz", "compile.fullgraph=maybe"]) == [
        "seed=abc: Value 'abc' of type 'str' could not be converted to Integer",
        "total_env_steps=xyz: Value 'xyz' of type 'str' could not be converted to Integer",
        "compile.fullgraph=maybe: Value 'maybe' is not a valid bool (type str)"]
    assert group_value_errors(["seed=0,abc"]) == [
        "seed=0,abc: 'abc': Value 'abc' of type 'str' could not be converted to Integer"]
    assert group_value_errors(["seed=range(0,3)", "total_env_steps=${oc.env:STEPS,4096}"]) == []
    assert group_value_errors(["twin_modules=true", "backend.num_threads=2", "algo.lr=0.001"]) == []
    # a built-in algorithm's own keys, of the algorithm the command line trains (PPO by default)
    assert group_value_errors(["algo.clip_coef=wide", "seed=abc"]) == [
        "algo.clip_coef=wide: Value 'wide' of type 'str' could not be converted to Float",
        "seed=abc: Value 'abc' of type 'str' could not be converted to Integer"]
    assert group_value_errors(["algo=dqn", "algo.batch_size=big", "algo.double_q=perhaps"]) == [
        "algo.batch_size=big: Value 'big' of type 'str' could not be converted to Integer",
        "algo.double_q=perhaps: Value 'perhaps' is not a valid bool (type str)"]
    assert group_value_errors(["algo=ppo,dqn", "algo.double_q=perhaps"]) == [  # DQN's key, in a sweep over both
        "algo.double_q=perhaps: Value 'perhaps' is not a valid bool (type str)"]
    # the algorithm an experiment preset chooses, and a plugin's (from its own config folder)
    assert group_value_errors(["experiment=sb3_dqn", "algo.batch_size=big", "seed=abc"]) == [
        "algo.batch_size=big: Value 'big' of type 'str' could not be converted to Integer",
        "seed=abc: Value 'abc' of type 'str' could not be converted to Integer"]
    assert group_value_errors(["experiment=smoke", "algo.clip_coef=wide"]) == [  # a preset that keeps PPO
        "algo.clip_coef=wide: Value 'wide' of type 'str' could not be converted to Float"]
    assert group_value_errors(["--config-dir", str(TD3_CONF), "algo=td3", "algo.tau=abc", "seed=abc"]) == [
        "algo.tau=abc: Value 'abc' of type 'str' could not be converted to Float",
        "seed=abc: Value 'abc' of type 'str' could not be converted to Integer"]
    # a preset that chooses one algorithm and algo= another: which one trains is Hydra's to say
    assert group_value_errors(["experiment=sb3_dqn", "algo=ppo", "algo.batch_size=big"]) == []


def test_the_command_lines_default_algorithm_is_the_primary_configs() -> None:
    import yaml

    from rlsweep.resources import CONF_DIR

    defaults = yaml.safe_load((CONF_DIR / "config.yaml").read_text())["defaults"]
    assert {"algo": "ppo"} in defaults  # what rlsweep.cli._chosen_algos assumes without algo=...
