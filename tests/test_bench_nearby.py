"""bench.nearby's table and bench.peers's label for a borrowed plan, without a GPU."""

from __future__ import annotations

from bench import nearby, peers


def report(rows):
    return {"gpu": "NVIDIA H100 80GB HBM3", "when": "2026-11-24 06:00 UTC", "command": "python -m bench.nearby",
            "library": "a1e9687250ce2922", "rounds": 5, "rows": rows}


def test_the_table_gives_each_point_its_ratio_and_the_summary_the_range():
    rows = [
        {"script": "sgemv", "dtype": "float32", "sizes": {"m": 10001, "n": 10001}, "tuned_at": {"m": 16384, "n": 16384},
         "borrowed_us": 129.8, "predicted_us": 154.1, "borrowed_plan": "z=sgemv_ab [256t,2it,32r,cols]",
         "predicted_plan": "z=sgemv_ab(band) [band 1024t,2r,3p,38it]"},
        {"script": "gemver", "dtype": "float32", "sizes": {"m": 12000, "n": 12000},
         "tuned_at": {"m": 16384, "n": 16384},
         "borrowed_us": 577.5, "predicted_us": 539.5, "borrowed_plan": "S{...}", "predicted_plan": "S{...}"},
        {"script": "atax", "dtype": "float32", "sizes": {"m": 6000, "n": 6000}, "tuned_at": None},
        {"script": "madd", "dtype": "float32", "sizes": {"m": 5000, "n": 5000}, "tuned_at": {"m": 4096, "n": 4096},
         "borrowed_us": "wrong: differs from the oracle", "predicted_us": 96.1, "borrowed_plan": "a",
         "predicted_plan": "b"},
    ]
    text = nearby.markdown(report(rows))
    assert "| sgemv | float32 | m=10001,n=10001 | m=16384,n=16384 | 129.8 | 154.1 | 0.842 |" in text
    assert "| gemver | float32 | m=12000,n=12000 | m=16384,n=16384 | 577.5 | 539.5 | 1.070 |" in text
    assert "| atax | float32 | m=6000,n=6000 | none within 2× |" in text
    assert "| madd | float32 | m=5000,n=5000 | m=4096,n=4096 | wrong: differs from the oracle | 96.1 | — |" in text
    assert "2 points: borrowed / predicted from 0.842 to 1.070, geometric mean 0.950." in text


def test_bench_peers_labels_a_plan_tuned_here_or_nearby():
    assert peers._origin({"tuned": "tuned on ...", "nearby": None}) == " (tuned)"
    assert peers._origin({"tuned": None, "nearby": "tuned for the nearest size, m=16384, n=16384 (...)"}) \
        == " (tuned nearby)"
    assert peers._origin({"tuned": None}) == ""
