import torch
from helpers import compose_cfg, params_of, tiny_cfg

from rlsweep.runner import train
from rlsweep.toggles.channels_last import ChannelsLastToggle

from .contract import ToggleContract, observe, reference_params


class TestChannelsLast(ToggleContract):
    toggle = ChannelsLastToggle
    # the contract's default job (PPO on CartPole) has no convolution: there the toggle says so;
    # on the Atari jobs it applies on CPU too (test_acts[atari_ppo], test_acts_on_the_atari_cnn)
    cpu_reason = "no convolutional network"
    cuda_job = "atari_ppo"


def test_acts_on_the_atari_cnn() -> None:
    """On the Atari PPO job (fast tier): applied, every convolution reads NHWC inputs, the weights are
    NHWC, and the parameters after the updates match the default layout's up to rounding."""
    on = observe(tiny_cfg("atari_ppo", "backend.channels_last=true"), record_ops=True)
    off = observe(tiny_cfg("atari_ppo"), record_ops=True)
    TestChannelsLast().assert_acts(on, off)
    assert on.outcome.toggles["backend.channels_last"] == {"value": True, "applied": True, "reason": None}
    conv = on.outcome.algo.joint.encoder.convs[0].weight
    assert conv.is_contiguous(memory_format=torch.channels_last) and not conv.is_contiguous()
    p_on, p_off = params_of(on.outcome.algo), params_of(off.outcome.algo)
    moved = reference_params("atari_ppo", "seed=1")[2]
    assert any(not torch.equal(p_off[k], v) for k, v in moved.items())
    for k in p_off:
        torch.testing.assert_close(p_on[k], p_off[k], rtol=TestChannelsLast.rtol, atol=TestChannelsLast.atol)


def test_not_applicable_reasons_name_why() -> None:
    toggle = ChannelsLastToggle()
    cpu = torch.device("cpu")
    for overrides, why in ((["algo=sac"], "sac has no algo.encoder"),
                           (["experiment=atari_ppo", "algo.encoder=mlp"], "algo.encoder=mlp"),
                           ([], "CartPole-v1 observations are not images")):
        reason = toggle.not_applicable(compose_cfg([*overrides, "backend.channels_last=true"]), cpu)
        assert reason is not None and reason.startswith("not applicable") and why in reason, reason
    assert toggle.not_applicable(compose_cfg(["experiment=atari_ppo", "backend.channels_last=true"]), cpu) is None
    assert toggle.not_applicable(compose_cfg(["env=pong", "backend.channels_last=true"]), cpu) is None  # auto: CNN
    assert toggle.not_applicable(compose_cfg([]), cpu) is None  # off: nothing to say


def test_dqn_cnn_runs_channels_last() -> None:
    out = train(tiny_cfg("dqn", "env=breakout", "env.max_episode_steps=400", "algo.buffer_size=512",
                         "backend.channels_last=true"))
    assert out.toggles["backend.channels_last"]["applied"] and out.updates > 0
    assert out.algo.q[0].convs[0].weight.is_contiguous(memory_format=torch.channels_last)
