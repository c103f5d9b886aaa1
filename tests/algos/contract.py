"""rlsweep's suite runs the public algorithm contract (:mod:`rlsweep.testing`) over every algorithm.

Each test module here subclasses :class:`Contract`; ``test_registry`` fails when an algorithm
config under conf/algo/ (or the TD3 example) has no subclass.
"""

from __future__ import annotations

from rlsweep.testing import AlgorithmContract


class Contract(AlgorithmContract):
    """Every algorithm here compiles with no graph break and no recompile."""

    compiles_clean = True
