"""bench.held without a GPU: the plans it would time, its --shape syntax, bad arguments."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench import held
from fusec.ir.plan import HeldPlan
from helpers import ROOT


def test_the_space_s_held_layouts_are_distinct_and_fit():
    dag, _, options = held.held_plans("gemver", "float32", 4096)
    plans = [p for p, _ in options]
    assert plans and all(isinstance(p, HeldPlan) for p in plans)
    assert len({p.layout() for p in plans}) == len(plans)
    assert all(p.calls == tuple(c.id for c in dag.calls) for p in plans)  # the two-kernel cover


def test_given_shapes_each_come_with_and_without_holding():
    shapes = [held.parse_shape("512x8x128"), held.parse_shape("256x8x64")]
    _, _, options = held.held_plans("sgemvt", "float32", 4096, shapes)
    assert {p.producer.shape for p, _ in options} == set(shapes)
    for p, seconds in options:
        assert (seconds is None) == (p.registers == p.shared == 0)  # nothing held: the sibling's parts
    assert any(p.registers or p.shared for p, _ in options)


def test_a_bad_shape_or_case_exits_2_before_anything_runs():
    with pytest.raises(Exception, match="BLOCKxITERSxROWS"):
        held.parse_shape("512x8")
    for shape in ("512x128x8", "500x8x128", "256x0x64"):  # 16 rows of threads, 8 tile rows: none each
        with pytest.raises(Exception, match="ROWS a multiple of BLOCK/32"):
            held.parse_shape(shape)
    for bad in (["--shape", "512-8-128"], ["--case", "float16:4096"]):
        done = subprocess.run([sys.executable, "-m", "bench.held", *bad], cwd=ROOT, capture_output=True, text=True)
        assert done.returncode == 2 and ("BLOCKxITERSxROWS" in done.stderr or "float16" in done.stderr)
