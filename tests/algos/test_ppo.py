from helpers import tiny_cfg

from rlsweep.runner import train

from .contract import AlgorithmContract


class TestPPO(AlgorithmContract):
    algo = "ppo"
    incompatible_env = None
    learning_bar = (100_000, 450.0)

    def test_continuous_actions(self) -> None:
        out = train(tiny_cfg("ppo", "env=pendulum"))
        assert out.algo.discrete is False
        assert out.updates > 0
