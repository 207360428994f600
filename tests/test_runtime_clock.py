"""The GPU clock's late samples (fusec/runtime/cuda.py, GpuClock) without a GPU:
a fake driver keeps one stream's timeline. The host's clock moves only when a
launch takes host time or a wait blocks; the GPU runs what is queued in order,
starting each piece when both it and the host have got there. So a host that
queues the work after the spin has ended leaves the GPU idle after the start
event, as on the real device."""

from __future__ import annotations

import types

import pytest

from fusec.runtime import cuda

SPIN = 50e-6  # seconds the fake GPU spins
WORK = 18e-6  # seconds the timed work runs on the fake GPU


class Timeline:
    def __init__(self):
        self.host = 0.0
        self.gpu = 0.0

    def run(self, seconds: float) -> None:
        self.gpu = max(self.gpu, self.host) + seconds


class FakeDriver:
    def __init__(self, timeline: Timeline):
        line = timeline

        class Event:
            def record(self):
                line.run(0.0)
                self.at = line.gpu

            def synchronize(self):
                line.host = max(line.host, self.at)

            def time_till(self, other):
                return (other.at - self.at) * 1e3

        class Function:
            def prepare(self, _):
                pass

            def prepared_call(self, *_):
                line.run(SPIN)

        class Module:
            def get_function(self, _):
                return Function()

        self.Event = Event
        self.module_from_buffer = lambda _: Module()
        self.Context = types.SimpleNamespace(
            get_device=lambda: types.SimpleNamespace(get_attribute=lambda _: 50 << 20))
        self.device_attribute = types.SimpleNamespace(L2_CACHE_SIZE="L2")


@pytest.fixture
def clock(monkeypatch):
    timeline = Timeline()
    monkeypatch.setattr(cuda, "time", types.SimpleNamespace(perf_counter=lambda: timeline.host))
    monkeypatch.setattr("fusec.nvcc.compile_cubin", lambda *a, **k: types.SimpleNamespace(cubin=b""))
    made = cuda.GpuClock(FakeDriver(timeline), "sm_90")
    monkeypatch.setitem(cuda._CLOCKS, "fake context", made)
    return made, timeline


def launcher(timeline: Timeline, host_seconds: list[float]):
    """A launch that takes the next of ``host_seconds`` on the host, then queues WORK."""
    taken = []

    def launch():
        timeline.host += host_seconds[min(len(taken), len(host_seconds) - 1)]
        taken.append(timeline.host)
        timeline.run(WORK)
    return launch, taken


def test_work_queued_within_the_spin_is_timed_alone(clock):
    gpu_clock, timeline = clock
    launch, taken = launcher(timeline, [5e-6])
    assert gpu_clock.seconds(launch) == pytest.approx(WORK)
    assert len(taken) == 1 and gpu_clock.late_samples == 0


def test_a_sample_the_host_queued_after_the_spin_is_taken_again(clock):
    gpu_clock, timeline = clock
    before = cuda.late_samples()
    launch, taken = launcher(timeline, [100e-6, 5e-6])  # the first stalls past the spin
    assert gpu_clock.seconds(launch) == pytest.approx(WORK)
    assert len(taken) == 2
    assert gpu_clock.late_samples == 0 and cuda.late_samples() == before


def test_a_sample_late_every_time_is_kept_and_counted(clock):
    gpu_clock, timeline = clock
    before = cuda.late_samples()
    launch, taken = launcher(timeline, [100e-6])
    seconds = gpu_clock.seconds(launch)
    assert len(taken) == cuda.RETAKES + 1
    # the GPU idled from the spin's end until the host queued the work: that wait is in the sample
    assert seconds == pytest.approx(100e-6 - SPIN + WORK)
    assert gpu_clock.late_samples == 1 and cuda.late_samples() == before + 1


def test_several_launches_in_one_sample_are_late_only_when_all_queued_after_the_spin(clock):
    gpu_clock, timeline = clock
    launch, taken = launcher(timeline, [40e-6])  # three of them: queued by 120 us, the spin ends at 50
    seconds = gpu_clock.seconds(launch, count=3)
    assert len(taken) == 3 * (cuda.RETAKES + 1) and gpu_clock.late_samples == 1
    launch, taken = launcher(timeline, [15e-6])  # queued by 45 us
    assert gpu_clock.seconds(launch, count=3) == pytest.approx(WORK)
    assert len(taken) == 3 and gpu_clock.late_samples == 1
    assert seconds > WORK
