"""envs.EpisodeStatistics reports what gymnasium's own RecordEpisodeStatistics reports."""

from collections.abc import Callable

import gymnasium as gym
import numpy as np
import pytest
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from rlsweep.envs import EpisodeStatistics, SameStepSyncVectorEnv, finished_episodes, make_envs


def _episodes(envs: gym.vector.VectorEnv, actions: list[np.ndarray]) -> list[tuple[int, float, int]]:
    out = []
    envs.reset(seed=3)
    for step, a in enumerate(actions):
        if step == 40:  # a partial reset: only env 1 starts over
            envs.reset(options={"reset_mask": np.array([False, True, False, False])})
        *_, info = envs.step(a)
        out += [(step, r, n) for r, n in finished_episodes(info)]
    return out


def test_returns_and_lengths_are_gymnasiums() -> None:
    def make() -> gym.vector.VectorEnv:
        return gym.make_vec("CartPole-v1", num_envs=4, vectorization_mode="sync",
                            vector_kwargs={"autoreset_mode": AutoresetMode.SAME_STEP})

    space = make().action_space
    space.seed(0)
    actions = [space.sample() for _ in range(300)]
    ours, theirs = _episodes(EpisodeStatistics(make()), actions), _episodes(RecordEpisodeStatistics(make()), actions)
    assert len(ours) > 20
    assert ours == theirs


class _InfoDictEnv(gym.Env):
    """Dict observations and a per-step info entry on some steps: what CartPole never exercises."""

    observation_space = gym.spaces.Dict({"pos": gym.spaces.Box(-10.0, 10.0, (2,)), "t": gym.spaces.Discrete(100)})
    action_space = gym.spaces.Discrete(3)

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[dict, dict]:
        super().reset(seed=seed)
        self._t, self._pos = 0, self.np_random.uniform(-1, 1, 2).astype(np.float32)
        return self._obs(), {"start": float(self._pos[0])}

    def _obs(self) -> dict:
        return {"pos": self._pos.copy(), "t": self._t}

    def step(self, action: int) -> tuple[dict, float, bool, bool, dict]:
        self._t += 1
        self._pos = self._pos + np.float32(action - 1) * 0.5
        info = {"odd": self._t} if self._t % 2 else {}
        return self._obs(), float(self._pos.sum()), bool(abs(self._pos[0]) > 3), self._t >= 9, info


def _same(a: object, b: object) -> bool:
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, np.ndarray) and a.dtype == object:
        return a.shape == b.shape and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, np.ndarray):
        return isinstance(b, np.ndarray) and a.dtype == b.dtype and np.array_equal(a, b)
    return type(a) is type(b) and a == b


@pytest.mark.parametrize("make_env", [lambda: gym.make("CartPole-v1", max_episode_steps=30), _InfoDictEnv],
                         ids=["cartpole", "dict-obs-with-infos"])
def test_same_step_sync_vector_env_steps_as_gymnasiums(make_env: Callable[[], gym.Env]) -> None:
    """Every step (observations, rewards, flags, infos with final_obs/final_info) is gymnasium's SAME_STEP one."""
    ours = SameStepSyncVectorEnv([make_env] * 4)
    theirs = gym.vector.SyncVectorEnv([make_env] * 4, autoreset_mode=AutoresetMode.SAME_STEP)
    space = theirs.action_space
    space.seed(0)
    assert _same(ours.reset(seed=5), theirs.reset(seed=5))
    ends = 0
    for step in range(200):
        if step == 50:  # a partial reset
            mask = np.array([True, False, False, True])
            assert _same(ours.reset(options={"reset_mask": mask.copy()}), theirs.reset(options={"reset_mask": mask}))
        actions = space.sample()
        a, b = ours.step(actions), theirs.step(actions)
        assert _same(a, b), f"step {step}"
        assert a[0] is not ours._observations or isinstance(a[0], dict)  # copied, as gymnasium's copy=True does
        ends += int(b[2].sum() + b[3].sum())
    assert ends > 10
    ours.close()
    theirs.close()


def test_make_envs_sync_is_the_lean_vector_env() -> None:
    from rlsweep.config import EnvConfig

    envs = make_envs(EnvConfig(id="CartPole-v1"), 2, 0)
    assert isinstance(envs.unwrapped, SameStepSyncVectorEnv)
    envs.close()
