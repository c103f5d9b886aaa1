"""Fuzzed command lines, as a new user types them, through the real entry point.

Hypothesis builds command lines from the real grammar -- the schema's keys with values of the
wrong type or out of range, unknown keys, options a config group does not have, broken sweep
syntax, odd and unwritable paths, huge numbers, unicode, ``-m`` anywhere -- mixed with valid
settings. Every line holds at least one mistake, so every one must end the command: exit status
non-zero, one message, no Python traceback, no hang, and no output folder left behind.

The lines run in this process, the way ``python -m sweeps.train`` runs them (``runpy`` of the
same module, under the same ``train_entry``), with Hydra's global state cleared after each, the
working directory a temporary folder, stdout/stderr captured and a time limit. As a guard, no
job can start: the launchers and the job function are replaced by ones that raise; reaching
them means a mistake slipped through, which fails the test and names the line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import runpy
import shutil
import signal
import sys
import tempfile

import pytest
from helpers import ROOT
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.configuration import set_hypothesis_home_dir

from rlsweep.testing import compose

# Hypothesis keeps its files (a failure's patch, say) in the session's scratch folder, not in the repository
set_hypothesis_home_dir(os.path.join(tempfile.gettempdir(), "hypothesis"))

#: seconds one command line may take (composing a few jobs takes well under one)
HANG_S = 30


class _WouldRun(BaseException):
    """A job or launcher was reached: the line passed every check."""


class _Hang(BaseException):
    """The line ran past HANG_S."""


# --------------------------------------------------------------------------------- the grammar


def _schema() -> dict[str, object]:
    """Every leaf key of the composed default config, with its default value."""
    out: dict[str, object] = {}

    def walk(obj: object, prefix: str) -> None:
        for f in dataclasses.fields(obj):
            value = getattr(obj, f.name)
            if dataclasses.is_dataclass(value):
                walk(value, f"{prefix}{f.name}.")
            elif not f.name.startswith("_"):
                out[f"{prefix}{f.name}"] = value

    walk(compose([]), "")
    return out


SCHEMA = _schema()
KEYS_OF = {kind: sorted(k for k, v in SCHEMA.items() if type(v) is kind) for kind in (int, float, bool, list)}
GROUPS = {g: sorted(p.stem for p in (ROOT / "conf" / g).glob("*.yaml")) for g in ("algo", "env", "compile", "dtype",
                                                                                  "experiment")}
LAUNCHERS = ["basic", "submitit_local", "submitit_slurm", "slurm_cpu", "slurm_gpu"]
PREFIXES = ["", "algo.", "env.", "compile.", "logger.", "backend.", "hydra.job.", "+", "++", "~"]

# characters of every kind a user pastes: letters, digits, punctuation Hydra's grammar uses, unicode
WORD = st.text(alphabet=st.characters(blacklist_categories=("Cs", "Cc")), min_size=1, max_size=12)
IDENT = st.from_regex(r"[a-z][a-z0-9_]{2,10}", fullmatch=True)
HUGE = st.one_of(st.integers(min_value=2**63, max_value=10**40), st.integers(max_value=-(2**63), min_value=-(10**40)))


def _not_option(group: str):
    return st.one_of(IDENT, WORD).filter(lambda s: s not in GROUPS.get(group, LAUNCHERS) and "=" not in s)


# each strategy yields one override that no valid command holds
unknown_key = st.builds(lambda p, k, v: f"{p}{k}={v}", st.sampled_from(PREFIXES[:7]),
                        IDENT.filter(lambda k: all(not s.endswith(k) for s in SCHEMA)), st.sampled_from(["1", "x", "[1]"]))
appended_key = st.builds(lambda k: f"+{k}=1", IDENT.filter(lambda k: k not in SCHEMA))
unicode_key = st.builds(lambda k: f"{k}=1", st.text(alphabet="ключäöüßçñ漢字", min_size=1, max_size=6))
wrong_int = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS_OF[int]),
                      st.sampled_from(["abc", "1.5", "[1]", "{a:1}", "1e3", "0x1g", "'1'", "none?", "ü"]))
wrong_float = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS_OF[float]),
                        st.sampled_from(["abc", "fast", "[1]", "1..2", "one", "{}", "ö"]))
wrong_bool = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS_OF[bool]),
                       # not a number: OmegaConf reads any integer as a bool (2 -> true)
                       st.sampled_from(["maybe", "tru", "[true]", "0.5", "yesno", "ja", "{}"]))
wrong_list = st.builds(lambda k, v: f"{k}={v}", st.just("algo.hidden_sizes"),
                       st.sampled_from(["64", "abc", "[a,b]", "[1.5]", "{a:1}", "[]"]))
out_of_range = st.one_of(
    st.builds("seed={}".format, st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32), HUGE)),
    st.builds("total_env_steps={}".format, st.one_of(st.integers(max_value=0), st.integers(min_value=10**15))),
    st.builds("algo.lr={}".format, st.one_of(st.sampled_from(["0", "-1e-3", "inf", "nan", "1e999", "-inf"]))),
    st.builds("algo.gamma={}".format, st.sampled_from(["0", "1.5", "-0.1", "nan", "inf"])),
    st.builds("algo.num_envs={}".format, st.one_of(st.integers(max_value=0), st.integers(min_value=4097), HUGE)),
    st.builds("eval_episodes={}".format, st.one_of(st.integers(max_value=-1), st.integers(min_value=1001))),
    st.builds("warmup_iters={}".format, st.integers(max_value=-1)),
    st.builds("backend.num_threads={}".format, st.integers(max_value=0)),
    st.builds("algo.hidden_sizes=[{}]".format, st.integers(max_value=0)),
    st.builds("algo.num_steps={}".format, st.integers(max_value=0)),
)
bogus_option = st.one_of(*(st.builds(lambda v, g=g: f"{g}={v}", _not_option(g)) for g in GROUPS),
                         st.builds("hydra/launcher={}".format, _not_option("hydra/launcher")))
bogus_choice = st.builds(lambda k, v: f"{k}={v}", st.sampled_from(["compile.mode", "logger.mode", "device",
                                                                    "backend.matmul_precision", "env.vectorization"]),
                         IDENT.filter(lambda v: v not in ("none", "default", "offline", "online", "disabled", "auto",
                                                          "cpu", "cuda", "highest", "high", "medium", "sync", "async")))
broken_sweep = st.one_of(
    st.sampled_from(["seed=0,", "seed=,1", "seed=1,,2", "seed=range(", "seed=range(0,3", "x=range(", "a=1,",
                     "seed=range(0,3,0)", "algo.lr=[0.1", "seed=choice(", "seed=glob(*", "seed=interval(0,1)",
                     "seed==1", "=5", "seed='1", 'seed="0', "seed=${", "seed=${oc.env:RLSWEEP_NOPE}",
                     "seed=0,1 2", "compile=none,,default", "algo.lr=0.001,abc"]),
    st.builds(lambda k, v: f"{k}={v},", st.sampled_from(sorted(SCHEMA)), st.sampled_from(["1", "x"])),
)
BAD = st.one_of(unknown_key, appended_key, unicode_key, wrong_int, wrong_float, wrong_bool, wrong_list, out_of_range,
                bogus_option, bogus_choice, broken_sweep)

# valid settings: noise around the mistakes (cheap to compose; none starts anything heavy)
VALID = st.sampled_from(["seed=3", "algo.lr=0.01", "compile=default", "twin_modules=true", "total_env_steps=512",
                         "seed=0,1", "algo.lr=0.1,0.2", "seed=range(0,2)", "dtype=bfloat16", "inplace=true",
                         "eval_episodes=0", "logger.mode=disabled", "progress=false", "env=acrobot",
                         "logger.project=ünïcödé", "logger.tags=[a,b]", "backend.num_threads=1", "algo=dqn",
                         "total_env_steps=1024,2048", "algo.hidden_sizes=[8,8]", "resume=false"])


def _key(word: str) -> str:
    return word.split("=", 1)[0].lstrip("+~")


@st.composite
def command_lines(draw) -> tuple[list[str], dict[str, str]]:
    """A command line with at least one mistake; also where it may write (to check nothing appears)."""
    bad = draw(st.lists(BAD, min_size=1, max_size=3))
    # a valid value of the same key would replace the mistake (the last override wins)
    valid = [w for w in draw(st.lists(VALID, max_size=3)) if _key(w) not in {_key(b) for b in bad}]
    words = draw(st.permutations(valid + bad))
    folder = draw(st.sampled_from(["", "rel", "odd", "abs", "proc", "file"]))
    name = draw(WORD.filter(lambda s: "/" not in s and s not in (".", "..")))
    multirun = draw(st.sampled_from([None, "-m", "--multirun"]))
    key = "hydra.sweep.dir" if multirun else "hydra.run.dir"
    paths = {"rel": "out/x", "odd": f"odd {name}/x", "abs": "{base}/abs/x", "proc": "/proc/rlsweep-fuzz/x",
             "file": "{base}/a-file/x"}
    if folder:
        words.append(f"{key}={paths[folder]}")
    if multirun:
        words.insert(draw(st.integers(min_value=0, max_value=len(words))), multirun)
    return words, {"folder": folder}


# ------------------------------------------------------------------------------- the runner


def _would_run(*args, **kwargs):
    from rlsweep.hydra_callbacks import current_session

    current_session().sweep_dir = None  # no report of a sweep that never ran
    raise _WouldRun()


@pytest.fixture(scope="module")
def cli(tmp_path_factory: pytest.TempPathFactory):
    """Run one command line of ``python -m sweeps.train`` in this process; returns (status, stdout, stderr)."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher

    import rlsweep.job
    from hydra_plugins.rlsweep_launcher import rlsweep_launcher

    base = tmp_path_factory.mktemp("fuzz")
    cwd = base / "cwd"
    cwd.mkdir()
    (base / "a-file").write_text("a regular file\n")
    mp = pytest.MonkeyPatch()
    mp.setattr(rlsweep.job, "train_job", _would_run)
    for launcher in (rlsweep_launcher.BasicLauncher, rlsweep_launcher.LocalLauncher, BaseSubmititLauncher):
        mp.setattr(launcher, "launch", _would_run)
    mp.delenv("RLSWEEP_DEBUG", raising=False)
    mp.delenv("HYDRA_FULL_ERROR", raising=False)
    mp.chdir(cwd)

    def on_alarm(signum, frame):
        raise _Hang()

    previous = signal.signal(signal.SIGALRM, on_alarm)

    def run(words: list[str]) -> tuple[int, str, str]:
        out, err = io.StringIO(), io.StringIO()
        argv = sys.argv
        sys.argv = [str(ROOT / "sweeps" / "train.py"), *(w.replace("{base}", str(base)) for w in words)]
        status = 0
        signal.setitimer(signal.ITIMER_REAL, HANG_S)
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    runpy.run_module("sweeps.train", run_name="__main__", alter_sys=True)
                except SystemExit as exc:
                    status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
            sys.argv = argv
            GlobalHydra.instance().clear()
        return status, out.getvalue(), err.getvalue()

    def leftovers() -> list[str]:
        """What the line left behind in the working directory and the folders it was given; then removed."""
        left = [str(p) for p in cwd.iterdir()] + [str(p) for p in base.iterdir() if p.name not in ("cwd", "a-file")]
        for p in [*cwd.iterdir(), *(p for p in base.iterdir() if p.name not in ("cwd", "a-file"))]:
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return left

    yield run, leftovers
    signal.signal(signal.SIGALRM, previous)
    mp.undo()


def _check(cli, words: list[str]) -> None:
    run, leftovers = cli
    line = " ".join(words)
    try:
        status, out, err = run(words)
    except _WouldRun:
        leftovers()
        pytest.fail(f"a mistake slipped through every check and a job would start: {line}")
    except _Hang:
        leftovers()
        pytest.fail(f"hung for {HANG_S} s: {line}")
    left = leftovers()
    text = out + err
    assert status != 0, f"exit status 0 for: {line}\n{text[-2000:]}"
    assert "Traceback" not in text, f"a traceback for: {line}\n{text[-3000:]}"
    lines = [x for x in err.splitlines() if x.strip()]
    assert lines and out == "", f"no message, or output on stdout, for: {line}\n{text[-2000:]}"
    assert len(lines) <= 40, f"a log, not one message, for: {line}\n{err[-3000:]}"
    # one message: not also as the warning Hydra makes of an exception in a callback, nor twice
    assert "Warning" not in err and err.count(lines[0]) == 1, f"the message twice for: {line}\n{err[-3000:]}"
    assert not left, f"left {left} behind: {line}"


def fuzz(examples: int) -> settings:
    """Reproducible (derandomized, no example database written into the repository), no per-example deadline."""
    # no shrinking: a line is short already, and each try of a smaller one runs a command again
    return settings(max_examples=examples, deadline=None, derandomize=True, database=None, print_blob=True,
                    phases=[Phase.explicit, Phase.generate],
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much, HealthCheck.data_too_large])


@fuzz(25)
@given(case=command_lines())
def test_fuzzed_bad_command_lines_end_with_one_message_and_no_folder(cli, case) -> None:
    _check(cli, case[0])


@pytest.mark.slow  # 150 command lines, ~1 s each (each is composed by Hydra at least twice)
@fuzz(150)
@given(case=command_lines())
def test_a_hundred_and_fifty_fuzzed_bad_command_lines_end_with_one_message_and_no_folder(cli, case) -> None:
    _check(cli, case[0])


@pytest.mark.parametrize("words", [
    ["seed=-1"], ["-m", "algo.lr=0.001,abc"], ["-m", "compile=none,bogus"], ["seed=0,"], ["x=range("],
    ["algo.num_envs=100000000000000000000000"], ["hydra.run.dir=/proc/rlsweep-fuzz/x", "seed=abc"],
    ["compile=default", "-m", "seed=0,1", "twin_modules=maybe"], ["ключ=1"],
])
def test_the_issues_examples_end_with_one_message_and_no_folder(cli, words: list[str]) -> None:
    """The lines the issue names, and the runner's own check: they fail, each with one message."""
    _check(cli, words)


def test_the_guard_notices_a_line_that_would_run(cli) -> None:
    """A valid line reaches the (replaced) job: the fuzz test would report a mistake that slips through."""
    run, leftovers = cli
    with pytest.raises(_WouldRun):
        run(["total_env_steps=512", "hydra.run.dir=out/x"])
    assert leftovers()  # Hydra made the run's folder: the check of leftovers sees folders
    assert os.getcwd().endswith("cwd")
