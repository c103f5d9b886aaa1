"""A plugin written for one seed per process: the TD3 example without ``seeds_together`` (tests/test_seeds.py)."""

from examples.td3.td3 import TD3


class OneSeedTD3(TD3):
    seeds_together = False
