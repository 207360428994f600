"""bench.gemv_patterns without a GPU: its arguments and which hand kernels fit a size."""

from __future__ import annotations

import sys

import pytest

from bench import gemv_patterns


def test_variants_cover_the_matrix_exactly():
    assert gemv_patterns.fitting(16384, 4) == list(gemv_patterns.VARIANTS)
    assert gemv_patterns.fitting(8192, 2) == list(gemv_patterns.VARIANTS)
    small = gemv_patterns.fitting(4096, 4)
    assert (8, 8, 8, 16, 1) not in small  # 16 tiles of 1024 columns: wider than the matrix
    for rows, _, u, iters, _ in small:
        assert 4096 % rows == 0 and 4096 % (128 * u * iters) == 0


def test_a_size_the_kernels_cannot_cover_is_refused(monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", ["gemv_patterns", "--n", "1000"])
    with pytest.raises(SystemExit) as exc:
        gemv_patterns.main()
    assert exc.value.code == 2
    assert "--n must be a multiple of 4096" in capsys.readouterr().err


class _Clock:
    """A stand-in for CuPy's events: what happened, in order, and 2 ms between a start and an end."""

    def __init__(self):
        self.log = []
        clock = self

        class Event:
            def record(self):
                clock.log.append("record")

            def synchronize(self):
                clock.log.append("wait")

        runtime = type("Runtime", (), {"deviceSynchronize": staticmethod(lambda: clock.log.append("sync"))})
        cuda = type("Cuda", (), {"Event": Event, "runtime": runtime,
                                 "get_elapsed_time": staticmethod(lambda start, end: 2.0)})
        self.cupy = type("Cupy", (), {"cuda": cuda})


@pytest.mark.parametrize("mode, ahead", [("gpu", "spin"), ("host", "sync")])
def test_each_sample_is_events_around_one_call_after_the_spin_or_an_idle_gpu(mode, ahead):
    clock = _Clock()
    timer = gemv_patterns.Timer(clock.cupy, lambda *args: clock.log.append("spin"), repeat=3)
    us = getattr(timer, mode)(lambda: clock.log.append("call"))
    assert us == 2000.0
    assert clock.log == ["call", "sync"] + [ahead, "record", "call", "record", "wait"] * 3
