import pytest
import torch
from helpers import TINY, tiny_cfg

from rlsweep.algos.ppo import PPO
from rlsweep.envs import make_envs
from rlsweep.runner import seed_everything, train
from rlsweep.timing import PhaseTimer
from rlsweep.toggles import applied_toggles

from .contract import Contract


class TestPPO(Contract):
    algo = "ppo"
    tiny = TINY["ppo"]
    incompatible_env = None
    learning_bar = (100_000, 450.0)

    def test_continuous_actions(self) -> None:
        out = train(tiny_cfg("ppo", "env=pendulum"))
        assert out.algo.discrete is False
        assert out.updates > 0


@pytest.mark.parametrize("env", ["cartpole", "pendulum"])
def test_rollout_log_probs_and_values_are_those_of_the_taken_actions(env: str) -> None:
    """The batched pass after a rollout gives what acting step by step would: per-step critic values and
    the log-probabilities of the stored actions under the policy (Gaussian: from torch.distributions)."""
    cfg = tiny_cfg("ppo", f"env={env}")
    device = torch.device("cpu")
    with applied_toggles(cfg, device) as (rt, _):
        seed_everything(cfg.seed)
        envs = make_envs(cfg.env, cfg.algo.num_envs, cfg.seed)
        try:
            algo = PPO(cfg, envs, rt, PhaseTimer(device))
            algo._learn = lambda *args: {}  # the networks stay those that acted
            algo.iteration()
        finally:
            envs.close()
    obs, act = algo.obs_buf, algo.act_buf
    with torch.no_grad():
        for step in range(cfg.algo.num_steps):
            out = algo.actor(obs[step])
            if algo.discrete:  # acting's forward (nets.MLP.inference_fn) gave the actor's very numbers
                assert torch.equal(torch.from_numpy(algo.logits_host[step]), out)
            if algo.discrete:
                dist = torch.distributions.Categorical(logits=out)
                logp = dist.log_prob(act[step])
            else:
                logp = torch.distributions.Normal(out, algo.std.log_std.exp()).log_prob(act[step]).sum(-1)
            torch.testing.assert_close(algo.logp_buf[step], logp)
            torch.testing.assert_close(algo.val_buf[step], algo.critic(obs[step]).squeeze(-1))


def test_compiled_acting_does_not_recompile() -> None:
    """Only the per-step actor is compiled as "act": the batched pass (another batch shape) stays eager."""
    out = train(tiny_cfg("ppo", "compile=default"))
    assert out.compile["per_function"]["act"]["compilations"] == 1
    assert out.compile["recompiles"] == 0 and out.compile["graph_breaks"] == 0
