from .contract import AlgorithmContract


class TestDQN(AlgorithmContract):
    algo = "dqn"
    incompatible_env = "pendulum"
    learning_bar = (50_000, 200.0)
