import numpy as np
import pytest
import torch
from helpers import TINY, tiny_cfg

from rlsweep.algos.dqn import DQN
from rlsweep.buffers import ReplayBuffer
from rlsweep.envs import make_envs
from rlsweep.runner import seed_everything
from rlsweep.timing import PhaseTimer
from rlsweep.toggles import applied_toggles

from .contract import Contract


class TestDQN(Contract):
    algo = "dqn"
    tiny = TINY["dqn"]
    incompatible_env = "pendulum"
    learning_bar = (50_000, 200.0)


def _dqn(cfg) -> DQN:
    device = torch.device("cpu")
    with applied_toggles(cfg, device) as (rt, _):
        seed_everything(cfg.seed)
        return DQN(cfg, make_envs(cfg.env, cfg.algo.num_envs, cfg.seed), rt, PhaseTimer(device))


@pytest.mark.parametrize("tau", [1.0, 0.5])
def test_target_update_is_skipped_only_when_it_would_copy_equal_values(tau: float) -> None:
    cfg = tiny_cfg("dqn", f"algo.tau={tau}")  # 32 env steps an iteration, a target update every 8
    algo = _dqn(cfg)
    calls = []
    polyak = algo.rt.polyak_update
    algo.rt.polyak_update = lambda *args: (calls.append(algo.updates), polyak(*args))
    try:
        boundaries = algo.iteration_env_steps // cfg.algo.target_update_interval
        algo.iteration()  # before learning starts: q is unchanged since the target copied it
        assert len(calls) == (0 if tau == 1.0 else boundaries)
        algo.iteration()  # learning starts at its end
        assert algo.updates > 0
        q_before = [p.detach().clone() for p in algo.q.parameters()]
        calls.clear()
        algo.iteration()
        # hard updates: one copy after the gradient steps, then none; soft updates: every boundary
        assert len(calls) == (1 if tau == 1.0 else boundaries)
        if tau == 1.0:
            for t, q in zip(algo.q_target.parameters(), q_before, strict=True):
                assert torch.equal(t, q)
    finally:
        algo.envs.close()


def test_replay_draws_a_burst_of_batches_at_once() -> None:
    buf = ReplayBuffer(100, 1, (3,), (), np.int64, seed=0)
    for i in range(10):
        buf.add(np.full((1, 3), i, np.float32), np.array([i]), np.array([i], np.float32),
                np.full((1, 3), i + 1, np.float32), np.array([0.0], np.float32))
    batches = buf.sample(4, num_batches=5)
    assert batches["obs"].shape == (5, 4, 3) and batches["actions"].shape == (5, 4)
    # each row is one stored transition: the fields stay aligned
    np.testing.assert_array_equal(batches["obs"][..., 0], batches["actions"])
    np.testing.assert_array_equal(batches["next_obs"][..., 0], batches["rewards"] + 1)
    assert len(np.unique(batches["actions"])) > 1
