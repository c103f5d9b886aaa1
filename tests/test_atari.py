"""Atari pixels: CleanRL's/SB3's preprocessing, the Nature CNN, uint8 frames end to end, the replay memory."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import compose_cfg, tiny_cfg

from rlsweep.algos import algorithm_class
from rlsweep.buffers import ReplayBuffer
from rlsweep.config import EnvConfig
from rlsweep.envs import finished_episodes, make_envs
from rlsweep.nets import NatureCNN
from rlsweep.runner import train
from rlsweep.runtime import Runtime
from rlsweep.timing import PhaseTimer
from rlsweep.toggles import applied_toggles
from rlsweep.validate import validate

FRAME = (4, 84, 84)


def _play_one_game(clip_rewards: bool) -> tuple[list[float], list[bool], list[tuple[float, int]], np.ndarray]:
    """Random actions (seeded) in Space Invaders (rewards 5-30 a hit) until the first whole game ends."""
    envs = make_envs(EnvConfig(id="ALE/SpaceInvaders-v5", atari=True, clip_rewards=clip_rewards), 1, seed=3)
    rng = np.random.default_rng(0)
    rewards, life_ends, games = [], [], []
    try:
        obs, _ = envs.reset(seed=3)
        first = obs
        while not games:
            obs, reward, terminated, truncated, info = envs.step(rng.integers(0, 6, size=1))
            rewards.append(float(reward[0]))
            life_ends.append(bool(terminated[0] or truncated[0]))
            games += finished_episodes(info)
    finally:
        envs.close()
    return rewards, life_ends, games, first


def test_training_rewards_are_clipped_and_recorded_returns_are_raw_whole_games() -> None:
    clipped, life_ends, games, first = _play_one_game(clip_rewards=True)
    raw, raw_life_ends, raw_games, _ = _play_one_game(clip_rewards=False)
    assert first.shape == (1, *FRAME) and first.dtype == np.uint8  # 4 stacked 84x84 grey frames
    assert set(clipped) <= {-1.0, 0.0, 1.0} and max(raw) > 1.0  # training sees the sign; the game pays 5-30
    assert life_ends == raw_life_ends  # the same seeded game either way
    # a lost life ends a training episode; the record's episode is the whole game (3 lives)...
    assert sum(life_ends) == 3 and games == raw_games
    # ...with its raw score, not the clipped sum; its length counts every agent step of the game, the
    # steps the wrappers take after a lost life (a no-op, FIRE) included, as CleanRL's does
    (game_return, game_length), = games
    assert game_return == sum(raw) > sum(clipped)
    assert len(raw) < game_length <= len(raw) + 3 * 4


def _built(algo: str, *overrides: str):  # noqa: ANN202 - an algorithm instance
    cfg = tiny_cfg(algo, *overrides)
    with applied_toggles(cfg, torch.device("cpu")) as (rt, _):
        envs = make_envs(cfg.env, cfg.algo.num_envs, cfg.seed)
        return algorithm_class(cfg.algo._target_)(cfg, envs, rt, PhaseTimer(torch.device("cpu")))


def test_encoder_auto_picks_the_cnn_for_frames_and_the_mlp_for_vectors() -> None:
    built = [ppo_atari := _built("atari_ppo", "algo.encoder=auto"), ppo := _built("ppo"),
             dqn_atari := _built("dqn", "env=breakout"), dqn := _built("dqn")]
    assert isinstance(ppo_atari.actor.joint.encoder, NatureCNN)
    assert ppo_atari.actor.joint is ppo_atari.critic.joint  # CleanRL's network: one encoder, two heads
    params = ppo_atari.optimizer.param_groups[0]["params"]
    assert len({id(p) for p in params}) == len(params)  # the shared encoder is optimized once
    assert not any(isinstance(m, NatureCNN) for m in ppo.actor.modules())
    assert isinstance(dqn_atari.q[0], NatureCNN) and isinstance(dqn_atari.q_target[0], NatureCNN)
    assert not any(isinstance(m, NatureCNN) for m in dqn.q.modules())
    for algo in built:
        algo.envs.close()


@pytest.mark.parametrize("algo, overrides", [
    ("atari_ppo", ()),
    ("dqn", ("env=breakout", "env.max_episode_steps=400", "algo.buffer_size=512")),
])
def test_frames_stay_uint8_on_the_host_and_in_every_copy(algo: str, overrides: tuple[str, ...]) -> None:
    copies: list[torch.Tensor] = []
    h2d = Runtime.h2d

    def spy(self: Runtime, array, dtype=None) -> torch.Tensor:  # noqa: ANN001
        out = h2d(self, array, dtype)
        copies.append(out)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Runtime, "h2d", spy)
        out = train(tiny_cfg(algo, *overrides))
    frames = [t for t in copies if tuple(t.shape[-3:]) == FRAME]
    assert out.updates > 0 and len(frames) > 10
    assert {t.dtype for t in frames} == {torch.uint8}  # scaled to [0, 1] on the device, by the CNN
    if algo == "dqn":
        buffer = out.algo.buffer
        assert buffer.obs.dtype == np.uint8 and buffer.next_obs.size == 0  # each frame stored once
    else:
        assert out.algo.obs_host.dtype == np.uint8


def _vector_steps(rng: np.random.Generator, steps: int, n: int, shape: tuple[int, ...]):  # noqa: ANN202
    """(obs, actions, rewards, real next obs, terminated) of ``steps`` vector steps with random episode ends."""
    obs = rng.integers(0, 255, size=(n, *shape), dtype=np.uint8)
    for _ in range(steps):
        after = rng.integers(0, 255, size=(n, *shape), dtype=np.uint8)
        ended = rng.random(n) < 0.2
        real_next = after.copy()
        real_next[ended] = rng.integers(0, 255, size=(int(ended.sum()), *shape), dtype=np.uint8)  # final obs
        yield obs, rng.integers(0, 4, size=n), rng.random(n).astype(np.float32), real_next, ended.astype(np.float32)
        obs = after


def test_replay_with_frames_stored_once_samples_exactly_what_the_full_buffer_samples() -> None:
    n, shape = 3, (2, 3, 3)
    full = ReplayBuffer(12, n, shape, (), np.int64, seed=5, obs_dtype=np.uint8)
    once = ReplayBuffer(12, n, shape, (), np.int64, seed=5, obs_dtype=np.uint8, store_next_obs=False)
    rng = np.random.default_rng(1)
    for step, transition in enumerate(_vector_steps(rng, 23, n, shape)):  # wraps the 4-step buffer ~6 times
        full.add(*transition)
        once.add(*transition)
        if step >= 1:
            a, b = full.sample(8, num_batches=2), once.sample(8, num_batches=2)
            for key in a:
                np.testing.assert_array_equal(a[key], b[key], err_msg=f"{key} at step {step}")
    assert once.next_obs.size == 0 and 0 < len(once.final_obs) <= once.capacity
    restored = ReplayBuffer(12, n, shape, (), np.int64, seed=0, obs_dtype=np.uint8, store_next_obs=False)
    restored.load_state_dict(once.state_dict())
    a, b = once.sample(16), restored.sample(16)
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


def test_a_100k_frame_replay_buffer_takes_what_uint8_frames_take() -> None:
    """No float copies and no second copy of every frame: ~2.8 GB (allocated lazily: nothing is touched here)."""
    once = ReplayBuffer(100_000, 1, FRAME, (), np.int64, seed=0, obs_dtype=np.uint8, store_next_obs=False)
    full = ReplayBuffer(100_000, 1, FRAME, (), np.int64, seed=0, obs_dtype=np.uint8)
    frames = 100_000 * int(np.prod(FRAME))  # 2.82 GB of uint8
    assert frames <= once.nbytes() < 1.01 * frames
    assert 2 * frames <= full.nbytes() < 2.02 * frames


def test_encoder_cnn_on_vector_observations_is_refused_before_any_work() -> None:
    errors = validate(compose_cfg(["algo.encoder=cnn"]))
    assert any("algo.encoder=cnn needs image observations" in e and "CartPole-v1" in e for e in errors), errors
    errors = validate(compose_cfg(["algo.encoder=conv"]))
    assert any("algo.encoder='conv' is not valid; choose one of: auto, mlp, cnn" in e for e in errors), errors
    assert validate(compose_cfg(["experiment=atari_ppo", "env=pong"])) == []
    errors = validate(compose_cfg(["env=pong", "env.frame_stack=0"]))
    assert errors == ["env.frame_stack must be >= 1, got 0"]
