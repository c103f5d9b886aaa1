"""Algorithms as plugins: a user's class named by ``_target_`` in the user's own config directory.

The TD3 example (examples/td3/) is such a plugin; it also runs the algorithm contract
(tests/algos/test_td3.py) and every toggle's contract (tests/toggles/).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import ROOT, run_train

from rlsweep.records import read_result

TD3_CONF = ROOT / "examples" / "td3" / "conf"
BASE = ["prepare=false", "logger.mode=disabled", "progress=false", "eval_episodes=2", "warmup_iters=1", "backend.num_threads=1"]
QUICK = [*BASE, "algo.learning_starts=64", "algo.steps_per_iteration=64", "algo.batch_size=16",
         "algo.hidden_sizes=[16,16]", "total_env_steps=320"]


def _plugin_conf(tmp_path: Path, body: str) -> Path:
    conf = tmp_path / "conf"
    (conf / "algo").mkdir(parents=True)
    (conf / "algo" / "mine.yaml").write_text("# @package _global_\n" + body)
    return conf


@pytest.mark.parametrize(("body", "extra", "message"), [
    ("algo:\n  _target_: no_such_package.algo.Mine\n", [], "module 'no_such_package.algo' cannot be imported"),
    ("algo:\n  _target_: collections.OrderedDict\n", [], "is not an Algorithm"),
    ("algo:\n  _target_: rlsweep.algos.nope.X\n", [], "cannot be imported"),
    ("algo:\n  _target_: examples.td3.td3.TD3\n", ["+algo.momentum=0.9"], "algo.momentum is not a hyper-parameter"),
    # a hyper-parameter of the class's schema that the YAML file leaves out is added with +, and only then
    ("algo:\n  _target_: examples.td3.td3.TD3\n", ["algo.policy_noise=0.1"],
     "algo.policy_noise is a hyper-parameter of examples.td3.td3.TD3 that its config file does not list: set it "
     "with +algo.policy_noise=<value>"),
    ("algo:\n  _target_: examples.td3.td3.TD3\n  tau: abc\n", [], "algo.tau"),
    ("algo:\n  _target_: examples.td3.td3.TD3\n  policy_frequency: 0\n", [], "algo.policy_frequency must be >= 1"),
], ids=["no-module", "not-an-algorithm", "no-class", "unknown-hyper-parameter", "unlisted-hyper-parameter",
        "wrong-type", "plugin-check"])
def test_a_broken_plugin_fails_before_any_job_with_one_message(tmp_path, body, extra, message) -> None:
    _assert_refused(tmp_path, body, extra, message, multirun=False)


def test_a_broken_plugin_in_a_sweep_fails_before_any_job(tmp_path) -> None:
    _assert_refused(tmp_path, "algo:\n  _target_: examples.td3.td3.TD3\n", ["+algo.momentum=0.9"],
                    "algo.momentum is not a hyper-parameter", multirun=True)


def _assert_refused(tmp_path: Path, body: str, extra: list[str], message: str, multirun: bool) -> None:
    conf = _plugin_conf(tmp_path, body)
    out = tmp_path / "out"
    flags, where = (["-m"], [f"hydra.sweep.dir={out}", "seed=0,1"]) if multirun else ([], [f"hydra.run.dir={out}"])
    proc = run_train([*flags, "--config-dir", str(conf), "algo=mine", "env=pendulum", *where, *extra, *BASE])
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.count(message) == 1, proc.stderr
    assert "Traceback" not in proc.stderr
    assert not out.exists()


def test_td3_plugin_trains_from_its_own_config_dir(tmp_path) -> None:
    """The README's command, at a tiny budget: the record and run name are the plugin's."""
    out = tmp_path / "run"
    proc = run_train(["--config-dir", str(TD3_CONF), "algo=td3", "env=pendulum", f"hydra.run.dir={out}", *QUICK])
    assert proc.returncode == 0, proc.stderr[-3000:]
    record = read_result(out)
    assert record["status"] == "ok" and record["algo"] == "td3"
    assert record["config"]["algo"]["_target_"] == "examples.td3.td3.TD3"
    assert record["env_steps"] > 0 and record["throughput"]["env_steps_per_s"] > 0
    assert all(record["timings"][p]["count"] > 0 for p in ("env_step", "act", "h2d", "d2h", "update"))


def test_a_toggle_sweep_over_the_td3_plugin_ends_with_its_report(tmp_path) -> None:
    """As a user types it: -m after the overrides it sweeps (Hydra alone wants it before them)."""
    sweep = tmp_path / "sweep"
    proc = run_train(["--config-dir", str(TD3_CONF), "algo=td3", "-m", "twin_modules=false,true",
                      f"hydra.sweep.dir={sweep}", *QUICK])
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [read_result(sweep / str(n)) for n in range(2)]
    assert all(r["status"] == "ok" and r["algo"] == "td3" for r in records)
    assert {r["toggles"]["twin_modules"]["value"] for r in records} == {False, True}
    summary = (sweep / "report" / "summary.md").read_text()
    assert "twin_modules" in summary
