"""bench.graphs' report, without a GPU: the target is judged on the better way to capture."""

from bench.graphs import report


def row(replay, pair, gpu=20.0):
    return {"sequence": "axpydot", "n": 4096, "gpu_us": gpu, "gpu_forwards_us": 26.0, "warm_us": 23.0,
            "warm_out_us": 21.0, "replay_us": replay, "pair_replay_us": pair,
            "replay_over_gpu": min(replay, pair) / gpu, "torch_reduce_overhead_us": 90.0}


def test_a_pair_replay_within_the_target_meets_it_and_both_ways_are_shown():
    text = report([row(replay=26.9, pair=21.5)], "GPU", "python -m bench.graphs")
    line = next(x for x in text.splitlines() if x.startswith("| axpydot"))
    cells = [c.strip() for c in line.strip("|").split("|")]
    assert cells[6:10] == ["26.9", "21.5", "1.07", "met"]


def test_both_ways_past_the_target_miss_it():
    text = report([row(replay=26.9, pair=25.0)], "GPU", "python -m bench.graphs")
    assert "| 1.25 | MISSED |" in text
