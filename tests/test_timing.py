import time

import pytest
import torch
from helpers import tiny_cfg

from rlsweep import runner
from rlsweep.timing import PhaseTimer


class FakeEvents:
    """A device clock the test moves by hand, and a log of every event record and synchronisation.

    Stands in for CUDA events at the one boundary the timer has with the device: ``event()``,
    ``record()``, ``elapsed_time()`` and ``synchronize()``.
    """

    def __init__(self) -> None:
        self.device_ms = 0.0
        self.log: list[str] = []
        self.created = 0

    def event(self) -> "FakeEvents.Event":
        self.created += 1
        return FakeEvents.Event(self)

    def synchronize(self) -> None:
        self.log.append("sync")

    class Event:
        def __init__(self, clock: "FakeEvents") -> None:
            self.clock = clock
            self.at_ms: float | None = None
            self.logged_at = -1

        def record(self) -> None:
            self.at_ms = self.clock.device_ms
            self.logged_at = len(self.clock.log)
            self.clock.log.append("record")

        def elapsed_time(self, end: "FakeEvents.Event") -> float:
            # as with CUDA events: both must have completed, i.e. a sync came after both records
            last_sync = max((i for i, e in enumerate(self.clock.log) if e == "sync"), default=-1)
            assert last_sync > max(self.logged_at, end.logged_at) >= 0, "events read before a sync"
            return end.at_ms - self.at_ms


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
    assert timer.host_samples["h2d"] == [h2d]  # on CPU the device clock is the host clock


def test_nothing_is_recorded_during_warm_up() -> None:
    timer = PhaseTimer(torch.device("cpu"))
    timer.stop("act", timer.lap("h2d", timer.start()))
    assert timer.samples["h2d"] == [] and timer.samples["act"] == []


def one_iteration(timer: PhaseTimer, clock: FakeEvents, device_ms: dict[str, float]) -> list[str]:
    """h2d -> act -> d2h back to back, then env_step and update; the fake device takes device_ms per phase.

    Returns the event log of the iteration before ``end_iteration``.
    """
    start = len(clock.log)
    t = timer.start()
    clock.device_ms += device_ms["h2d"]
    t = timer.lap("h2d", t)
    clock.device_ms += device_ms["act"]
    t = timer.lap("act", t)
    clock.device_ms += device_ms["d2h"]
    timer.stop("d2h", t)
    t = timer.start()
    clock.device_ms += device_ms["env_step"]
    timer.stop("env_step", t)
    t = timer.start()
    time.sleep(0.002)  # host time of the update: the fake device says 40 ms, the host ~2 ms
    clock.device_ms += device_ms["update"]
    timer.stop("update", t)
    return clock.log[start:]


def test_on_a_device_phases_are_event_pairs_read_after_one_sync_at_the_iterations_end() -> None:
    clock = FakeEvents()
    timer = PhaseTimer(torch.device("cpu"), events=clock)
    timer.recording = True
    device_ms = {"h2d": 3.0, "act": 5.0, "d2h": 7.0, "env_step": 11.0, "update": 40.0}
    for done in range(2):
        inside = one_iteration(timer, clock, device_ms)
        assert "sync" not in inside  # no synchronisation at any boundary within the iteration
        assert inside.count("record") == 8  # one event per boundary; a lap's event ends one phase and starts the next
        assert all(len(timer.samples[p]) == done for p in device_ms)  # this iteration's are read at its end
        before = len(clock.log)
        timer.end_iteration()
        assert clock.log[before:] == ["sync"]  # exactly one, at the iteration's end
    for phase, ms in device_ms.items():
        assert timer.samples[phase] == pytest.approx([ms / 1e3] * 2), phase  # device time: the event pairs
    # host time is measured apart, with perf_counter: ~2 ms for the update the device spent 40 ms on
    assert 0.002 <= timer.host_samples["update"][0] < 0.03
    assert clock.created == 8  # the second iteration reused the first one's events
    summary = timer.summary()
    assert summary["update"]["median_ms"] == pytest.approx(40.0)
    assert summary["update"]["host_median_ms"] < 30.0
    assert summary["update"]["clock"] == "cuda_events" and summary["update"]["count"] == 2


def test_device_samples_wait_for_the_iterations_end() -> None:
    clock = FakeEvents()
    timer = PhaseTimer(torch.device("cpu"), events=clock)
    timer.recording = True
    one_iteration(timer, clock, {"h2d": 1.0, "act": 1.0, "d2h": 1.0, "env_step": 1.0, "update": 1.0})
    assert timer.samples["update"] == [] and len(timer.host_samples["update"]) == 1
    timer.end_iteration()
    assert len(timer.samples["update"]) == 1


def test_warm_up_records_no_events_but_still_syncs_once_per_iteration() -> None:
    clock = FakeEvents()
    timer = PhaseTimer(torch.device("cpu"), events=clock)
    one_iteration(timer, clock, {"h2d": 1.0, "act": 1.0, "d2h": 1.0, "env_step": 1.0, "update": 1.0})
    timer.end_iteration()
    assert clock.log == ["sync"]
    assert all(v == [] for v in timer.samples.values()) and all(v == [] for v in timer.host_samples.values())


def test_the_runner_ends_every_iteration_with_the_timers_one_sync(monkeypatch: pytest.MonkeyPatch) -> None:
    """A real (tiny) PPO job under a timer with the fake device clock: one sync per iteration, none inside."""
    clocks: list[FakeEvents] = []
    syncs_per_iteration: list[int] = []

    class Timer(PhaseTimer):
        def __init__(self, device: torch.device) -> None:
            clocks.append(FakeEvents())
            super().__init__(device, events=clocks[-1])

        def end_iteration(self) -> None:
            syncs_per_iteration.append(clocks[-1].log.count("sync"))
            super().end_iteration()

    monkeypatch.setattr(runner, "PhaseTimer", Timer)
    outcome = runner.train(tiny_cfg("ppo", "eval_episodes=0"))
    (clock,) = clocks
    # no sync happened during any iteration: before each end_iteration, only the previous ones' syncs
    assert syncs_per_iteration == list(range(outcome.iterations))
    assert clock.log.count("sync") == outcome.iterations
    steady = outcome.throughput["steady_iterations"]
    assert steady >= 1 and outcome.timings["update"]["count"] == steady
    assert outcome.timings["act"]["clock"] == "cuda_events"


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_a_gpu_a_non_blocking_pinned_copy_overlaps_compute() -> None:
    """The timer leaves the overlap in place: a pinned non_blocking copy queued behind a long compute
    returns to the host at once (host time << device time), while a pageable blocking one waits."""
    dev = torch.device("cuda")
    timer = PhaseTimer(dev)
    a = torch.randn(4096, 4096, device=dev)
    pinned = torch.empty(64 * 2**20 // 4).pin_memory()
    pageable = torch.empty(64 * 2**20 // 4)
    for recording in (False, True, True, True):  # the first iteration warms up cuBLAS and the allocator
        timer.recording = recording
        for host in (pinned, pageable):
            t = timer.start()
            for _ in range(10):
                torch.mm(a, a)
            t = timer.lap("update", t)
            host.to(dev, non_blocking=host.is_pinned())
            timer.stop("h2d" if host.is_pinned() else "d2h", t)  # d2h here: the pageable copy's slot
        timer.end_iteration()
    s = timer.summary()
    compute_ms = s["update"]["median_ms"]
    assert compute_ms > 5.0  # the compute really ran on the device
    # pinned + non_blocking: the host queued the copy in well under the compute's device time...
    assert s["h2d"]["host_median_ms"] < 0.2 * compute_ms
    # ...while on the device the copy took its real time after the compute
    assert s["h2d"]["median_ms"] > 5 * s["h2d"]["host_median_ms"]
    # pageable blocking: the host waited for the queued compute and the copy
    assert s["d2h"]["host_median_ms"] > 0.5 * compute_ms
