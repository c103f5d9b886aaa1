"""envs.EpisodeStatistics reports what gymnasium's own RecordEpisodeStatistics reports."""

import gymnasium as gym
import numpy as np
from gymnasium.vector import AutoresetMode
from gymnasium.wrappers.vector import RecordEpisodeStatistics

from rlsweep.envs import EpisodeStatistics, finished_episodes


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
