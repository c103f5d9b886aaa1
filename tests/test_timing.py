import time

import torch

from rlsweep.timing import PhaseTimer


def test_lap_ends_one_phase_where_the_next_begins() -> None:
    timer = PhaseTimer(torch.device("cpu"))
    timer.recording = True
    t0 = timer.start()
    time.sleep(0.02)
    t1 = timer.lap("h2d", t0)
    time.sleep(0.01)
    timer.stop("act", t1)
    (h2d,), (act,) = timer.samples["h2d"], timer.samples["act"]
    assert h2d >= 0.02 and 0.01 <= act < 0.02 + 0.05
    assert t1 - t0 == h2d  # the same clock reading ends h2d and starts act


def test_nothing_is_recorded_during_warm_up() -> None:
    timer = PhaseTimer(torch.device("cpu"))
    timer.stop("act", timer.lap("h2d", timer.start()))
    assert timer.samples["h2d"] == [] and timer.samples["act"] == []
