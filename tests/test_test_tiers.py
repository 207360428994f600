"""The test tiers' own machinery (tests/conftest.py): on a machine of several GPUs, each
pytest-xdist worker runs on one GPU, in turn, and the tests of several GPUs find them all."""

from __future__ import annotations

import os
import types

import conftest


def test_workers_take_the_gpus_in_turn():
    assert [conftest.gpu_for_worker(f"gw{i}", ("0", "1")) for i in range(5)] == ["0", "1", "0", "1", "0"]
    assert conftest.gpu_for_worker("gw5", ("3", "1", "2")) == "2"  # $CUDA_VISIBLE_DEVICES's names


def nodes(monkeypatch, visible, spread=None, device=None):
    monkeypatch.setattr(conftest, "_gpus_visible", lambda: visible)
    for name, value in (("FUSEC_TEST_SPREAD_GPUS", spread), ("FUSEC_DEVICE", device)):
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    made = []
    for i in range(3):
        node = types.SimpleNamespace(gateway=types.SimpleNamespace(id=f"gw{i}"), workerinput={})
        conftest.pytest_configure_node(node)
        made.append(node.workerinput)
    return made


def test_the_controller_gives_each_worker_a_gpu_where_there_are_several(monkeypatch):
    assert nodes(monkeypatch, ("0", "1")) == [
        {"fusec_gpu": "0", "fusec_all_gpus": "0,1"}, {"fusec_gpu": "1", "fusec_all_gpus": "0,1"},
        {"fusec_gpu": "0", "fusec_all_gpus": "0,1"}]
    assert nodes(monkeypatch, ("0",)) == [{}] * 3  # one GPU: nothing to spread
    assert nodes(monkeypatch, ()) == [{}] * 3  # none
    assert nodes(monkeypatch, ("0", "1"), spread="0") == [{}] * 3  # asked not to
    assert nodes(monkeypatch, ("0", "1"), device="1") == [{}] * 3  # $FUSEC_DEVICE picks one


def test_auto_takes_four_workers_a_gpu_it_spreads_over(monkeypatch):
    monkeypatch.setattr(conftest, "_gpu", lambda: None)  # GPUs usable
    monkeypatch.setattr(conftest.os, "cpu_count", lambda: 32)
    for visible, spread, workers in ((("0", "1"), None, 8), (("0", "1"), "0", 4), (("0",), None, 4)):
        nodes(monkeypatch, visible, spread)
        assert conftest.pytest_xdist_auto_num_workers(None) == workers
    monkeypatch.setattr(conftest, "_gpu", lambda: "no CUDA device")
    assert conftest.pytest_xdist_auto_num_workers(None) == 32


def test_a_worker_given_a_gpu_sees_only_it_and_remembers_them_all(monkeypatch, tmp_path):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.delenv("FUSEC_TEST_ALL_GPUS", raising=False)
    monkeypatch.setenv("FUSEC_TEST_CACHE_DIR", str(tmp_path))  # the cache the session has, kept
    for name in ("FUSEC_CACHE_DIR", "FUSEC_SHIPPED_TUNINGS", "FUSEC_CORRECTION", "FUSEC_MEASURE",
                 "XLA_PYTHON_CLIENT_PREALLOCATE"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # restored after the test
    conftest.pytest_configure(types.SimpleNamespace(workerinput={"fusec_gpu": "1", "fusec_all_gpus": "0,1"}))
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "1" and os.environ["FUSEC_TEST_ALL_GPUS"] == "0,1"
