"""GpuTarget on a real GPU: the figures read from the device are those fusec knows
by name for that model (the H100's are what the modules used to hard-code)."""

from __future__ import annotations

import dataclasses

import pytest

from fusec.target import by_name, from_device, resolve

pytestmark = pytest.mark.gpu


def test_the_device_reads_as_its_known_figures():
    device = from_device()
    assert device is not None
    known = by_name(device.name)
    if known is None:
        pytest.skip(f"{device.name} is not among the GPUs fusec knows by name")
    read = dataclasses.asdict(device)
    expected = dataclasses.asdict(known)
    for field in ("name", "copy_bandwidth", "bandwidth_source"):  # no attribute gives the bandwidth
        read.pop(field), expected.pop(field)
    assert read == expected
    assert device.copy_bandwidth == known.copy_bandwidth  # taken from the known model


def test_with_no_gpu_named_the_target_is_the_device(monkeypatch):
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    assert resolve() == from_device()
