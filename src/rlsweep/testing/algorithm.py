"""The algorithm contract (:class:`AlgorithmContract`); see :mod:`rlsweep.testing`."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import signal
import sys
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
import pytest
import torch
from hydra import compose as hydra_compose
from hydra import initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

import rlsweep.envs
from rlsweep.algos import algorithm_class, to_object
from rlsweep.config import AlgoConfig, register_configs
from rlsweep.envs import make_envs
from rlsweep.records import PHASES
from rlsweep.resources import CONF_DIR  # rlsweep's own config directory (checkout or installed package)
from rlsweep.runner import seed_everything, train, train_seeds
from rlsweep.runtime import NonFiniteLossError, Policy
from rlsweep.seeds import SeedStack
from rlsweep.signals import Interrupted
from rlsweep.testing.toggles import EFFECTS, Effect, Observation, observe
from rlsweep.timing import PhaseTimer
from rlsweep.toggles import TOGGLES, applied_toggles
from rlsweep.validate import validate

#: what every contract job adds: a short, quiet, single-threaded job with W&B off
QUIET = ("warmup_iters=1", "eval_episodes=2", "progress=false", "logger.mode=disabled", "backend.num_threads=1")
#: an observed job and its final parameters
_Observed = tuple[Observation, dict[str, Any]]


def compose(overrides: Sequence[str] = (), config_dir: str | Path | None = None) -> Any:
    """The typed config ``python -m sweeps.train [--config-dir config_dir] overrides...`` would run."""
    register_configs()
    extra = [f"hydra.searchpath=[file://{Path(config_dir).resolve()}]"] if config_dir else []
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=[*extra, *overrides])
    return to_object(cfg)


def parameters(algo: Any) -> dict[str, Any]:
    """Every parameter and buffer of an algorithm's networks, by qualified name (float32 copies)."""
    return {f"{name}.{k}": v.detach().clone().float()
            for name, module in algo.modules().items() for k, v in module.state_dict().items()}


def initial_parameters(cfg: Any) -> dict[str, Any]:
    """The parameters of ``cfg``'s networks as built on the CPU, before any update (as :func:`parameters`)."""
    device = torch.device("cpu")
    with applied_toggles(cfg, device) as (rt, _):
        rt.seed_values = (cfg.seed,)  # the networks are built from the job's seed, as the runner builds them
        seed_everything(cfg.seed)
        with contextlib.closing(make_envs(cfg.env, cfg.algo.num_envs, cfg.seed)) as envs:
            return parameters(algorithm_class(cfg.algo._target_)(cfg, envs, rt, PhaseTimer(device)))


def assert_seeds_together_are_seeds_alone(cfg: Any, seeds: Sequence[int]) -> None:
    """``cfg``'s job trained for ``seeds`` together (``seeds_per_job``) and for each seed alone: the same
    env steps, updates and episodes, networks within float tolerance (the grouped step is vectorised,
    the single one torch.optim's own), evaluations within 1%."""
    together = train_seeds(cfg, list(seeds))
    modules = together[0].algo.modules()
    for k, seed in enumerate(seeds):
        alone = train(dataclasses.replace(cfg, seed=seed))
        assert together[k].env_steps == alone.env_steps and together[k].updates == alone.updates
        assert together[k].learning["curve"]["episode_return"] == alone.learning["curve"]["episode_return"]
        theirs = parameters(alone.algo)
        mine = {f"{name}.{key}": v for name, m in modules.items()
                for key, v in (m.seed_module(k) if isinstance(m, SeedStack) else m).state_dict().items()}
        assert mine.keys() == theirs.keys()
        for key, value in theirs.items():
            torch.testing.assert_close(mine[key], value, rtol=1e-3, atol=1e-3, msg=lambda m, key=key: f"{key}: {m}")
        assert together[k].learning["eval_returns"] == pytest.approx(alone.learning["eval_returns"], rel=1e-2)


class AlgorithmContract:
    """What every algorithm meets. Subclass it with a ``Test`` name; set the class attributes."""

    #: the option of the ``algo`` config group (``algo=<this>``)
    algo: ClassVar[str]
    #: the config directory holding ``algo/<algo>.yaml`` when it is not rlsweep's own
    config_dir: ClassVar[str | Path | None] = None
    #: overrides for a job of a second or so that still updates in its steady iterations
    tiny: ClassVar[Sequence[str]]
    #: an env whose action space the algorithm cannot drive (None: it drives every kind)
    incompatible_env: ClassVar[str | None]
    #: learning bar: (total_env_steps, final_return threshold), judged on 2 of 3 seeds (slow)
    learning_bar: ClassVar[tuple[int, float]]
    #: phases every steady iteration records
    phases: ClassVar[tuple[str, ...]] = PHASES
    #: compiled (``compile=default``), the job must have no graph break and no recompile; False: they are listed
    compiles_clean: ClassVar[bool] = False
    #: overrides with which the tiny job learns a one-step bandit (:meth:`test_learns_a_bandit`)
    bandit: ClassVar[Sequence[str]] = ("total_env_steps=1024",)
    #: its targets bootstrap from the next state's value (TD, GAE): a time limit must not read as a terminal
    #: state. False for one that never bootstraps (Monte-Carlo returns), to which both are the same
    bootstraps: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if not cls.__name__.startswith("Test"):
            return  # an intermediate base (pytest collects only Test classes)
        for attr in ("algo", "tiny", "incompatible_env", "learning_bar"):
            if not hasattr(cls, attr):
                raise TypeError(f"{cls.__name__} must set {attr}")

    # -- helpers -----------------------------------------------------------------------------------
    def cfg(self, *overrides: str) -> Any:
        """The algorithm's tiny job with ``overrides``."""
        return compose([f"algo={self.algo}", *self.tiny, *QUIET, *overrides], self.config_dir)

    def train(self, *overrides: str, **kwargs: Any) -> Any:
        return train(self.cfg(*overrides), **kwargs)

    # -- the contract --------------------------------------------------------------------------------
    def test_runs_and_times_every_phase(self) -> None:
        cfg = self.cfg()
        out = self.train()
        assert 0 < out.env_steps <= cfg.total_env_steps
        assert out.env_steps == out.iterations * out.algo.iteration_env_steps
        assert out.updates > 0
        for phase in self.phases:
            t = out.timings[phase]
            assert t["count"] > 0, phase
            assert 0 < t["p10_ms"] <= t["median_ms"] <= t["p90_ms"], phase
        assert out.throughput["env_steps_per_s"] > 0
        assert out.throughput["steady_iterations"] == len(out.throughput["per_iteration_env_steps_per_s"]) > 0
        assert np.isfinite(out.learning["final_return"])
        assert out.learning["eval_episodes"] == cfg.eval_episodes

    def test_same_seed_same_numbers(self) -> None:
        a, b = self.train(), self.train()
        assert a.env_steps == b.env_steps
        assert a.learning["curve"]["episode_return"] == b.learning["curve"]["episode_return"]
        assert a.learning["curve"]["env_steps"] == b.learning["curve"]["env_steps"]
        pa, pb = parameters(a.algo), parameters(b.algo)
        assert all(torch.equal(pa[k], pb[k]) for k in pa)

    def test_a_seed_trained_beside_others_is_the_seed_trained_alone(self) -> None:
        """``seeds_per_job``: each seed of a group gets the episodes, networks (within float tolerance: the
        grouped step is vectorised, the single one torch.optim's own) and evaluation of its job alone. An
        algorithm without ``seeds_together`` is refused before launch instead, and skips this."""
        cfg = self.cfg("eval_episodes=2")
        if not algorithm_class(cfg.algo._target_).seeds_together:
            pytest.skip("does not set seeds_together: seeds_per_job > 1 is refused before launch")
        assert_seeds_together_are_seeds_alone(cfg, [3, 4])

    def test_every_hyper_parameter_is_used(self) -> None:
        """Config parity: every field of the schema is read by the algorithm's own code while it trains."""
        cfg = self.cfg()
        cls = algorithm_class(cfg.algo._target_)
        reads = _record_reads(cfg, cls)
        train(cfg)
        generic = {f.name for f in dataclasses.fields(AlgoConfig)} - {"hidden_sizes", "activation", "lr", "gamma"}
        unread = sorted(f.name for f in dataclasses.fields(cls.config_class) if f.name not in generic | reads)
        assert not unread, f"in the schema but never read by {cls.__module__} while training: algo.{unread}"

    def test_acting_runs_on_the_eval_mode_views(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Acting goes through ``rt.policy``, and with twin_modules=true nothing timed as "act" runs the
        train-mode networks: acting that calls them itself would bypass ``twin_modules``."""
        seen = {"calls": 0, "forwards": 0, "in_act": 0}
        init, call = Policy.__init__, Policy.__call__
        start, stop, lap = PhaseTimer.start, PhaseTimer.stop, PhaseTimer.lap

        def note_forward(*_: Any) -> None:
            seen["forwards"] += 1  # a forward of a train-mode network since the timer's last reading

        def recording_init(policy: Any, rt: Any, timer: Any, modules: Any, *args: Any) -> None:
            modules = tuple(modules)
            init(policy, rt, timer, modules, *args)  # the twins are made here, before the hooks below
            for module in modules:
                for sub in module.modules():
                    sub.register_forward_pre_hook(note_forward)

        def recording_call(policy: Any, *args: Any) -> Any:
            seen["calls"] += 1
            return call(policy, *args)

        def recording_start(timer: Any) -> float:
            seen["forwards"] = 0
            return start(timer)

        def ending(method: Any) -> Any:
            def record(timer: Any, phase: str, t0: float) -> float:
                seen["in_act"] += seen["forwards"] if phase == "act" else 0
                seen["forwards"] = 0
                return method(timer, phase, t0)
            return record

        monkeypatch.setattr(Policy, "__init__", recording_init)
        monkeypatch.setattr(Policy, "__call__", recording_call)
        monkeypatch.setattr(PhaseTimer, "start", recording_start)
        monkeypatch.setattr(PhaseTimer, "stop", ending(stop))
        monkeypatch.setattr(PhaseTimer, "lap", ending(lap))
        out = self.train("twin_modules=true")
        assert seen["calls"] > 0 and out.timings["act"]["count"] > 0, "act through rt.policy(timer, *modules)"
        assert seen["in_act"] == 0, (
            f"{seen['in_act']} forwards of train-mode networks timed as acting: the forward given to rt.policy "
            "must use the modules it is passed (the eval-mode twins), not self.<network>")

    def test_checks_its_own_config(self) -> None:
        """``validate_config`` accepts the tiny job and names a bad value in a line of text; the base
        class's checks still run (an override adds to ``super().validate_config(cfg)``)."""
        cfg = self.cfg()
        cls = algorithm_class(cfg.algo._target_)
        assert cls.validate_config(cfg) == []
        cfg.algo.lr = -1.0
        errors = cls.validate_config(cfg)
        assert all(isinstance(e, str) for e in errors) and any("algo.lr" in e for e in errors), errors

    def test_rejects_incompatible_env(self) -> None:
        if self.incompatible_env is None:
            pytest.skip("drives both discrete and continuous actions")
        errors = validate(compose([f"algo={self.algo}", f"env={self.incompatible_env}"], self.config_dir))
        assert any(" needs a " in e and "action space" in e for e in errors), errors

    def test_a_time_limit_is_not_a_terminal_state(self, monkeypatch: pytest.MonkeyPatch) -> None:
        """Episodes cut by ``env.max_episode_steps`` (truncated) bootstrap from their last state where ended ones
        (terminated) do not: the same job, with every truncation reported as a termination, must learn other
        parameters. An algorithm that takes ``terminated | truncated`` as the end learns the same ones."""
        if not self.bootstraps:
            pytest.skip("its targets never bootstrap from a next state")
        cut = ("env.max_episode_steps=8",)  # nearly every episode of the tiny job ends at the time limit
        truncating = parameters(self.train(*cut).algo)
        make = rlsweep.envs._make_env
        monkeypatch.setattr(rlsweep.envs, "_make_env", lambda *a: _TruncationAsTermination(make(*a)))
        terminating = parameters(self.train(*cut).algo)
        assert any(not torch.equal(truncating[k], terminating[k]) for k in truncating), (
            "the same parameters whether an episode was truncated or terminated: bootstrap truncated "
            "transitions from their real last observation (info['final_obs']); only `terminated` ends the return")

    def test_learns_a_bandit(self) -> None:
        """On a one-step bandit with the algorithm's kind of actions (:class:`Bandit`), the tiny job's greedy
        policy earns at least 0.6 (the untrained one's ~0.5, or 0 or 1 for two actions; the best is 1): a loss
        with its sign flipped, or that never reaches the policy, learns the other way or not at all."""
        env_id = Bandit.register(continuous=not isinstance(self._action_space(), gym.spaces.Discrete))
        out = self.train(f"env.id={env_id}", *self.bandit)
        assert out.learning["final_return"] >= 0.6, (
            f"the greedy policy earns {out.learning['final_return']:.3f} of the bandit's best 1.0 after "
            f"{out.updates} updates: does the loss push the policy toward the actions with the higher return?")

    def _action_space(self) -> gym.Space:
        """The action space of the tiny job's env."""
        with contextlib.closing(gym.make(self.cfg().env.id)) as env:
            return env.action_space

    def test_non_finite_loss_stops_the_job(self) -> None:
        with pytest.raises(NonFiniteLossError, match=r"non-finite loss at update \d+"):
            self.train("algo.lr=1e30", "total_env_steps=2048")

    def test_resume_from_checkpoint_is_exact(self, tmp_path: Path) -> None:
        """Stopped by a signal after 3 iterations and resumed: same numbers as one straight run."""
        extra = ("total_env_steps=768",)
        straight = self.train(*extra)
        ckpt = tmp_path / "checkpoint.pt"
        with pytest.raises(Interrupted):
            self.train(*extra, on_iteration=_interrupt_at(3), checkpoint_path=ckpt)
        assert ckpt.is_file()
        resumed = self.train(*extra, checkpoint_path=ckpt)
        assert resumed.requeues == 1 and resumed.resumed_at_env_steps == [3 * straight.algo.iteration_env_steps]
        assert resumed.env_steps == straight.env_steps
        assert resumed.learning["curve"]["episode_return"] == straight.learning["curve"]["episode_return"]
        assert resumed.learning["final_return"] == straight.learning["final_return"]
        p0, p1 = parameters(straight.algo), parameters(resumed.algo)
        assert all(torch.equal(p0[k], p1[k]) for k in p0)

    def test_checkpoint_of_another_config_is_ignored(self, tmp_path: Path) -> None:
        ckpt = tmp_path / "checkpoint.pt"
        with pytest.raises(Interrupted):
            self.train("total_env_steps=768", on_iteration=_interrupt_at(2), checkpoint_path=ckpt)
        other = self.train("total_env_steps=768", "seed=5", checkpoint_path=ckpt)
        assert other.requeues == 0

    # -- the toggle contracts, over this algorithm ---------------------------------------------------
    @pytest.mark.parametrize("toggle", sorted(EFFECTS))
    def test_toggle_acts(self, toggle: str) -> None:
        """The toggle, on, visibly changes what this algorithm's job does (or says why it cannot here)."""
        effect, (on, _), (off, _) = self._on_and_off(toggle)
        effect.check(on, off)
        if toggle != "compile":
            return
        compiled = on.outcome.compile
        found = [f"{name}: {kind} {r.get('count', 1)}x: {r['reason']}"
                 for name, fn in compiled["per_function"].items()
                 for kind, key in (("graph break", "graph_break_reasons"), ("recompile", "recompile_reasons"))
                 for r in fn[key]]
        counts = f"{compiled['graph_breaks']} graph breaks, {compiled['recompiles']} recompiles"
        if self.compiles_clean:
            assert compiled["graph_breaks"] == 0 and compiled["recompiles"] == 0, "\n".join([counts, *found])
        elif found:
            warnings.warn("\n".join([f"{self.algo} compiled with {counts}", *found]), stacklevel=1)

    @pytest.mark.parametrize("toggle", sorted(EFFECTS))
    def test_toggle_keeps_the_numbers(self, toggle: str) -> None:
        """Same env steps, same updates, and parameters equal to the all-off job's within the toggle's tolerance."""
        effect, (on, p_on), (off, p_off) = self._on_and_off(toggle)
        assert on.outcome.env_steps == off.outcome.env_steps
        assert on.outcome.updates == off.outcome.updates > 0
        assert p_on.keys() == p_off.keys()
        other_seed = self._observed(("seed=1",), False)[1]
        assert any(not torch.equal(p_off[k], v) for k, v in other_seed.items()), (
            "a different seed must give different parameters, or this comparison proves nothing")
        effect.assert_keeps_the_numbers(p_on, p_off, lambda: initial_parameters(self.cfg()))

    def _observed(self, overrides: tuple[str, ...], record_ops: bool) -> _Observed:
        """The tiny job with ``overrides``, observed, and its final parameters: once per class, shared by
        both toggle tests."""
        key = (self.algo, str(self.config_dir), tuple(self.tiny), overrides, record_ops)
        if key not in _OBSERVED:
            observation = observe(self.cfg(*overrides), record_ops)
            params = parameters(observation.outcome.algo)
            observation.outcome.algo = None  # a replay buffer can be large; the parameters are kept
            _OBSERVED[key] = observation, params
        return _OBSERVED[key]

    def _on_and_off(self, toggle: str) -> tuple[Effect, _Observed, _Observed]:
        """The toggle's effect, and the tiny job observed with it on (as its class says) and with every toggle off."""
        effect, on = EFFECTS[toggle], tuple(next(t for t in TOGGLES if t.name == toggle).on)
        return effect, self._observed(on, effect.record_ops), self._observed((), effect.record_ops)

    @pytest.mark.slow
    def test_learns(self) -> None:
        """The default hyper-parameters reach the bar on at least 2 of 3 seeds."""
        total, bar = self.learning_bar
        finals = []
        for seed in range(3):
            cfg = compose([f"algo={self.algo}", f"seed={seed}", f"total_env_steps={total}", "progress=false",
                           "logger.mode=disabled", "backend.num_threads=1"], self.config_dir)
            finals.append(train(cfg).learning["final_return"])
            if sum(f >= bar for f in finals) >= 2:
                break
        assert sum(f >= bar for f in finals) >= 2, f"final returns {finals} vs bar {bar}"


class Bandit(gym.Env):
    """A one-step bandit: every episode is one action, earning 1 for action 1 of two (discrete), or
    ``1 - |a - 0.5|`` for an action ``a`` in [-1, 1] (continuous), from the same observation."""

    def __init__(self, continuous: bool = False) -> None:
        self.continuous = continuous
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32) if continuous else gym.spaces.Discrete(2)
        self._obs = np.full(2, 0.5, np.float32)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> Any:
        super().reset(seed=seed)
        return self._obs.copy(), {}

    def step(self, action: Any) -> Any:
        chosen = float(np.asarray(action).reshape(-1)[0])
        reward = 1.0 - abs(chosen - 0.5) if self.continuous else float(int(chosen) == 1)
        return self._obs.copy(), reward, True, False, {}

    @staticmethod
    def register(continuous: bool) -> str:
        """The bandit's gymnasium id, registered in this process."""
        env_id = f"rlsweep-testing/{'Continuous' if continuous else 'Discrete'}Bandit-v0"
        if env_id not in gym.registry:
            gym.register(env_id, entry_point=functools.partial(Bandit, continuous))
        return env_id


class _TruncationAsTermination(gym.Wrapper):
    """An env whose time limit reads as the episode's end: what an algorithm ignoring truncation sees anyway."""

    def step(self, action: Any) -> Any:
        obs, reward, terminated, truncated, info = self.env.step(action)
        return obs, reward, terminated or truncated, False, info


#: the contract's observed tiny jobs and their final parameters, by (algorithm, overrides, record_ops)
_OBSERVED: dict[tuple[Any, ...], _Observed] = {}


def _interrupt_at(iteration: int) -> Callable[[dict, int], None]:
    """An ``on_iteration`` hook that sends this process SIGINT at the ``iteration``-th iteration."""
    calls = {"n": 0}

    def hook(row: dict, env_steps: int) -> None:
        calls["n"] += 1
        if calls["n"] == iteration:
            os.kill(os.getpid(), signal.SIGINT)
    return hook


def _record_reads(cfg: Any, cls: type) -> set[str]:
    """Replace ``cfg.algo`` by a copy that notes each field read from the files of ``cls``'s package."""
    algo = cfg.algo
    files = {os.path.dirname(inspect.getfile(c)) for c in cls.__mro__ if c.__module__ == cls.__module__}
    fields = {f.name for f in dataclasses.fields(algo)}
    reads: set[str] = set()

    class Recording(type(algo)):  # type: ignore[misc]
        def __getattribute__(self, name: str) -> Any:
            if name in fields and os.path.dirname(sys._getframe(1).f_code.co_filename) in files:
                reads.add(name)
            return super().__getattribute__(name)

    recording = object.__new__(Recording)
    recording.__dict__.update(algo.__dict__)
    cfg.algo = recording
    return reads
