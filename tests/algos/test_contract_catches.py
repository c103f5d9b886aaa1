"""The algorithm contract catches the bugs a plugin author planted in an algorithm that otherwise met it:
each test plants one in PPO and expects the contract test that names it to fail (and only with its message)."""

from __future__ import annotations

import contextlib
from typing import Any

import numpy as np
import pytest

import rlsweep.testing.algorithm
from rlsweep.algos.ppo import PPO

from .test_ppo import TestPPO as _PPOContract  # not collected again under this name


@pytest.fixture
def contract(monkeypatch: pytest.MonkeyPatch) -> _PPOContract:
    monkeypatch.setattr(rlsweep.testing.algorithm, "_OBSERVED", {})  # the planted bug's jobs, not cached ones
    return _PPOContract()


def test_an_update_whose_losses_run_without_autocast(contract: _PPOContract, monkeypatch: pytest.MonkeyPatch) -> None:
    loss = PPO._loss

    def without_autocast(self: PPO, *args: Any) -> Any:
        with monkeypatch.context() as m:  # acting still autocasts: rt.policy does it by itself
            m.setattr(self.rt, "autocast", contextlib.nullcontext)
            return loss(self, *args)

    monkeypatch.setattr(PPO, "_loss", without_autocast)
    with pytest.raises(AssertionError, match="no matmul of the gradient step ran in bfloat16"):
        contract.test_toggle_acts("dtype")


def test_a_time_limit_taken_for_the_end_of_the_episode(contract: _PPOContract,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    ended = PPO._episodes_ended

    def truncation_ignored(self: PPO, step: int, terminated: np.ndarray, truncated: np.ndarray, info: Any) -> None:
        ended(self, step, terminated | truncated, np.zeros_like(truncated), info)

    monkeypatch.setattr(PPO, "_episodes_ended", truncation_ignored)
    with pytest.raises(AssertionError, match="whether an episode was truncated or terminated"):
        contract.test_a_time_limit_is_not_a_terminal_state(monkeypatch)


def test_a_policy_loss_with_its_sign_flipped(contract: _PPOContract, monkeypatch: pytest.MonkeyPatch) -> None:
    loss = PPO._loss

    def flipped(self: PPO, obs: Any, act: Any, old_logp: Any, adv: Any, ret: Any, old_val: Any) -> Any:
        return loss(self, obs, act, old_logp, -adv, ret, old_val)  # the value loss untouched

    monkeypatch.setattr(PPO, "_loss", flipped)
    with pytest.raises(AssertionError, match="does the loss push the policy toward"):
        contract.test_learns_a_bandit()
