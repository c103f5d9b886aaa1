from helpers import TINY

from .contract import Contract


class TestSAC(Contract):
    algo = "sac"
    tiny = TINY["sac"]
    incompatible_env = "cartpole"
    learning_bar = (15_000, -300.0)
