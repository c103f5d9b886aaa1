"""The A2C example (examples/a2c/) is an on-policy plugin that trains seeds together: the built-ins' contract."""

from helpers import PLUGIN_CONF, TINY

from .contract import Contract


class TestA2C(Contract):
    algo = "a2c"
    config_dir = PLUGIN_CONF["a2c"]
    tiny = TINY["a2c"]
    incompatible_env = "pendulum"
    learning_bar = (50_000, 150.0)
