"""bench.horizontal without a GPU: its tables, the target's verdict, the twin plans."""

from __future__ import annotations

from bench import horizontal as H
from fusec.frontend import load_script
from fusec.space import unfused_plan
from fusec.ir.plan import HorizontalPlan, ProgramPlan
from tests.helpers import library


def _row(rank, h, apart, streams):
    return {"rank": rank, "plan": f"H{{plan {rank}}}", "bound": 0, "grids": [12, 3], "predicted_us": 9.0,
            "horizontal_us": h, "sequential_us": apart, "streams_us": streams}


def test_tables_and_verdict():
    results = [{"pair": "two_gemv", "n": 1024, "rows": [_row(1, 10.0, 16.0, 14.0), _row(2, 8.0, 15.0, 12.0)]},
               {"pair": "bicgk", "n": 2048, "rows": [_row(1, 20.0, 30.0, 22.0), {"rank": 2, "plan": "x",
                                                                                   "wrong": ["ratio 1e9"]}],
                "vertical": {"plan": "q=sgemv+s=sgemtv", "us": 15.0}},
               {"pair": "gemv_dot", "n": 4096, "rows": [_row(1, 10.0, 30.0, 30.0)]}]
    text = H.table(results)
    assert "| two_gemv | 1024 | predicted first (#1) |" in text and "| two_gemv | 1024 | fastest (#2) |" in text
    assert "| 1.60× | 1.40× |" in text  # rank 1: 16/10 and 14/10
    assert "| bicgk | 2048 | vertical fusion | q=sgemv+s=sgemtv | | | 15.0 |" in text
    # the best ratio over two streams at n <= 2048: 12/8 = 1.5 (n = 4096's 3.0 does not count)
    assert H.verdict(results) == ("Target ≥ 1.3× over two streams at n ≤ 2048 for at least one pair: met"
                                  " (best 1.50×, two_gemv at n = 1024).")
    assert "MISSED" in H.verdict([{"pair": "p", "n": 1024, "rows": [_row(1, 10.0, 11.0, 11.0)]}])
    tunes = [{"pair": "two_gemv", "n": 1024, "candidates": [{"horizontal": True}, {"horizontal": False}],
              "winner": {"rank": 1, "plan": "H{a || b}", "us": 9.0, "horizontal": True, "retimed_us": 9.1,
                         "twin_us": 8.0}},
             {"pair": "bicgk", "n": 4096, "candidates": [{"horizontal": False}],
              "winner": {"rank": 1, "plan": "q+s", "us": 30.0, "horizontal": False}}]
    text = H.tune_table(tunes)
    assert "| two_gemv | 1024 | 1 of 2 | H{a || b} | 9.0 (again: 9.1) | 8.0 | SLOWER" in text
    assert "| bicgk | 4096 | 0 of 1 | q+s | 30.0 | | not horizontal |" in text


def test_twin_launches_the_parts_apart():
    dag = load_script(H.PAIRS["gemv_dot"], library())
    parts = unfused_plan(dag, library()).kernels
    assert H.twin(ProgramPlan((HorizontalPlan(parts, 40),))) == ProgramPlan(parts)
    assert H.twin(ProgramPlan(parts)) == ProgramPlan(parts)
