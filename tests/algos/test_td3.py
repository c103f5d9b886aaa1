"""The TD3 example (examples/td3/) is a plugin: the same contract as the built-ins, from its own config dir."""

from helpers import PLUGIN_CONF, TINY

from .contract import Contract


class TestTD3(Contract):
    algo = "td3"
    config_dir = PLUGIN_CONF["td3"]
    tiny = TINY["td3"]
    incompatible_env = "cartpole"
    learning_bar = (20_000, -300.0)
