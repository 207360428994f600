"""bench.held_grid without a GPU: the plans it would time, its report, bad arguments."""

from __future__ import annotations

import subprocess
import sys

from bench import held_grid
from fusec.space.implementations import load_phases
from fusec.ir.plan import HeldPlan
from helpers import ROOT


def test_the_grid_varies_the_shipped_held_plan_s_counts_with_and_without_stores_after():
    _, _, _, _, base, rows = held_grid.grid_plans("float32", 4096, (0, 3, 9), (0, 7))
    assert isinstance(base, HeldPlan) and base.registers == 3 and base.shared == 7  # the tuned plan
    assert [(r, s, a) for r, s, a, *_ in rows] == [(r, s, a) for r in (0, 3, 9) for s in (0, 7)
                                                   for a in (False, True)]
    for r, s, after, plan, why in rows:
        assert (plan is None) == (why is not None)
        if plan is not None:
            assert (plan.registers, plan.shared, plan.stores_after) == (r, s, after)
            assert plan.layout() == base.layout() or plan.producer == base.producer
    why = {(r, s, a): w for r, s, a, _, w in rows}
    assert "nothing is held" in why[(0, 0, True)]
    assert "registers a thread" in why[(9, 0, False)]  # more than a thread may hold
    assert why[(3, 7, True)] is None


def test_load_phase_twins_differ_only_in_routine_order():
    dag, _, _, _, groups = held_grid.phase_pairs("float32", 4096, 6)
    assert len(groups) == 6
    for group in groups:
        plans = [p for p, _ in group]
        phases = [sum(load_phases(x) for x in p.parts) for p in plans]
        assert phases[0] == min(phases) < max(phases)
        assert len({(p.producer.layout(), p.consumer.layout(), p.registers, p.shared, p.stores_after,
                     p.finish_after, p.per_sm) for p in plans}) == 1
    best = [min(s for _, s in g) for g in groups]
    assert best == sorted(best)


def test_the_report_puts_both_options_of_each_count_on_one_row():
    case = {"dtype": "float32", "n": 4096, "base": "B{...}", "grid": [
        {"registers": 3, "shared": 7, "stores_after": False, "why_not": None, "held": 0.625, "us": 66.6,
         "failed": "", "predicted_us": 62.1},
        {"registers": 3, "shared": 7, "stores_after": True, "why_not": None, "held": 0.625, "us": 58.0,
         "failed": "", "predicted_us": 56.3},
        {"registers": 0, "shared": 0, "stores_after": False, "why_not": None, "held": 0.0, "us": None,
         "failed": "WRONG: w: ratio 1e9", "predicted_us": 83.9},
        {"registers": 0, "shared": 0, "stores_after": True, "why_not": "nothing is held"}],
        "pairs": [[{"plan": "one", "phases": 2, "predicted_us": 56.3, "us": 57.6, "failed": ""},
                   {"plan": "three", "phases": 4, "predicted_us": 56.3, "us": 59.3, "failed": ""}]]}
    text = held_grid.report([case], "python -m bench.held_grid", "2026-11-23 00:00 UTC", "H100")
    assert "| 3 | 7 | 62% | 66.6 | 58.0 | 8.6 | 62.1 | 56.3 |" in text
    assert "| 0 | 0 | — | WRONG: w: ratio 1e9 | nothing is held | | | |" in text
    assert "median 0.971 (min 0.971, max 0.971, 1 of 1 faster)" in text
    assert held_grid.phase_ratios(case) == [57.6 / 59.3]


def test_bad_arguments_exit_2_before_anything_runs():
    for bad in (["--case", "float16:4096"], ["--registers", "1,x"], ["--shared", "-1"], ["--rounds", "0"]):
        done = subprocess.run([sys.executable, "-m", "bench.held_grid", *bad], cwd=ROOT, capture_output=True,
                              text=True)
        assert done.returncode == 2, done.stderr
        assert "bad case" in done.stderr or "bad counts" in done.stderr or "--rounds" in done.stderr
