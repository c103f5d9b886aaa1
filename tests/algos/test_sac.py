from .contract import AlgorithmContract


class TestSAC(AlgorithmContract):
    algo = "sac"
    incompatible_env = "cartpole"
    learning_bar = (15_000, -300.0)
