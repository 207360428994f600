"""CPU tier: the parts of bench/distributed.py that need no GPU: its report, the
sizes its rule table gives, and shipping a latency table."""

from __future__ import annotations

import json

import pytest

import bench.distributed as bench
import fusec.distributed as fd

pytestmark = pytest.mark.unit


def _latency(seconds: float, ranks: int = 2, broadcast: float | None = None) -> fd.Latency:
    points = tuple((op, ranks, b, broadcast if op == "broadcast" and broadcast is not None else seconds)
                   for op in bench.OPS for b in (4, 1 << 26))
    return fd.Latency("GPU", points, 3e-6)


def test_the_rule_table_gives_the_size_from_which_all_gpus_are_used():
    """The planner's rule (every rank gets s) trades the local work saved, as the H100's
    model prices it, for the all-reduce's cost over the broadcast's; the launch advice for the
    collective's whole cost."""
    rules = bench.rule_sizes(_latency(30e-6, broadcast=10e-6), 2, ["bicgk", "gesummv"], ["float32"], gpu="h100")
    bicgk = rules["bicgk float32"]
    assert bicgk["picks"][256] == 1 and bicgk["picks"][65536] == 2
    assert bicgk["all_ranks_from"] == min(n for n, a in bicgk["picks"].items() if a == 2)
    assert bicgk["launch_from"] >= bicgk["all_ranks_from"]
    # GESUMMV needs no collective: splitting its rows pays as soon as the model prices half the
    # rows below all of them (at a few hundred rows both are a launch), and from there on
    gesummv = rules["gesummv float32"]
    assert gesummv["all_ranks_from"] == gesummv["launch_from"] <= 1024 < bicgk["all_ranks_from"]
    assert all(a == 2 for n, a in gesummv["picks"].items() if n >= gesummv["all_ranks_from"])
    slower = bench.rule_sizes(_latency(300e-6, broadcast=10e-6), 2, ["bicgk"], ["float32"], gpu="h100")
    assert slower["bicgk float32"]["all_ranks_from"] > bicgk["all_ranks_from"]


def test_report_lists_every_case():
    rows = [{"script": "bicgk", "dtype": "float32", "n": 16384, "ranks": 2, "one_gpu_us": 349.0, "p_gpus_us": 190.0,
             "speedup": 349 / 190, "target": 1.85, "local_us": 170.0, "collective_us": 17.0,
             "collective_bytes": 65536, "collectives": ["all-reduce s"], "one_gpu_queued_us": 348.0,
             "p_gpus_queued_us": 180.0, "queued_speedup": 348 / 180},
            {"script": "sgemvt", "dtype": "float32", "n": 8192, "ranks": 2, "one_gpu_us": 120.0, "p_gpus_us": 70.0,
             "speedup": 120 / 70, "target": None, "local_us": 60.0, "collective_us": 9.0,
             "collective_bytes": 32768, "collectives": ["all-reduce x"]},
            {"script": "atax", "dtype": "float64", "n": 32768, "skipped": "not run (--budget)"}]
    points = [(op, 2, b, 1e-5) for op in bench.OPS for b in (4, 1024)]
    meta = {"gpu": "GPU", "ranks": 2, "nccl": 22800, "bandwidth": 3e12, "repeat": 20, "date": "2026-11-27",
            "command": "mpirun -n 2 python -m mpi4py -m bench.distributed"}
    rules = {"bicgk float32": {"all_ranks_from": 4096, "launch_from": 8192}}
    text = bench.report(rows, {"skipped": "needs 41 GB"}, points, 3e-6, rules, meta)
    assert ("| bicgk | float32 | 16384 | 349.0 | 190.0 | 1.84× | 1.85× | 170.0 | 17.0 | 65536 | all-reduce s |"
            " 348.0 | 180.0 | 1.93× |") in text
    assert "| 32768 | all-reduce x | not timed |  |  |" in text  # a run from before the queued samples
    assert "queued: per call of 10 calls back to back a sample" in text
    assert "| atax | float64 | 32768 | not run (--budget) |" in text
    assert "not run (needs 41 GB)" in text and "| bicgk float32 | 4096 | 8192 |" in text
    assert "| 1024 | 10.0 | 10.0 | 10.0 | 10.0 |" in text


@pytest.mark.parametrize("gpu_bytes,n", [
    (85_520_000_000, 104_000),  # an 80 GB H100: 100000's 80 GB matrix would fit it
    (150_754_820_096, 138_000),  # an H200
    (16 * 2 ** 30, 100_000),  # a small GPU: the least n
    (80_000_000_000, 101_000),  # exactly 100000's matrix: one step more
])
def test_the_weak_case_holds_more_than_one_gpu(gpu_bytes, n):
    assert bench.weak_size(gpu_bytes) == n
    assert n * n * 8 > gpu_bytes and n % 1000 == 0
    assert n == bench.WEAK_N or (n - 1000) ** 2 * 8 <= gpu_bytes


def test_report_says_what_the_weak_case_held():
    meta = {"gpu": "GPU", "ranks": 2, "nccl": 22800, "bandwidth": 4e12, "repeat": 20, "date": "2026-11-30",
            "command": "mpirun -n 2 python -m mpi4py -m bench.distributed"}
    weak = {"n": 138000, "matrix_gb": 152.352, "gpu_gb": 150.75, "p_gpus_us": 20000.0, "gb_per_s_per_gpu": 3800.0,
            "of_copy_bandwidth": 0.9}
    text = bench.report([], weak, [], 3e-6, {}, meta)
    assert ("BiCGK fp64 n = 138000 (152.4 GB matrix; one GPU has 150.8 GB) over 2 GPUs: 20000 µs a call,"
            " 3800 GB/s a GPU (0.90 of the copy bandwidth).") in text
    skipped = bench.report([], {"n": 138000, "skipped": "needs 76.2 GB a GPU, 40.0 GB free"}, [], 3e-6, {}, meta)
    assert "BiCGK fp64 n = 138000: not run (needs 76.2 GB a GPU, 40.0 GB free)." in skipped


def test_ship_merges_tables_by_rank_count(tmp_path, monkeypatch):
    monkeypatch.setattr(bench, "ROOT", tmp_path)
    (tmp_path / "fusec" / "data").mkdir(parents=True)
    bench.ship(_latency(10e-6, ranks=2), "gpu")
    bench.ship(_latency(20e-6, ranks=4), "gpu")
    bench.ship(_latency(30e-6, ranks=2), "gpu")
    merged = fd.Latency.load(tmp_path / "fusec" / "data" / "collectives" / "gpu.json")
    assert merged.seconds("all-reduce", 2, 4) == pytest.approx(30e-6)
    assert merged.seconds("all-reduce", 4, 4) == pytest.approx(20e-6)


def test_rules_from_recomputes_a_runs_rule_table(tmp_path):
    """--rules-from (no GPU): the run's measurements kept, its rule table recomputed with this
    fusec for the run's GPU, the report saying so."""
    meta = {"gpu": "NVIDIA H100 80GB HBM3", "ranks": 2, "nccl": 22800, "bandwidth": 3e12, "repeat": 20,
            "date": "2026-11-27", "command": "mpirun -n 2 python -m mpi4py -m bench.distributed"}
    rows = [{"script": "sgemvt", "dtype": "float32", "n": 16384, "ranks": 2, "one_gpu_us": 466.8,
             "p_gpus_us": 292.7, "speedup": 466.8 / 292.7, "target": None, "local_us": 255.5,
             "collective_us": 32.5, "collective_bytes": 65536, "collectives": ["all-reduce x"]}]
    run = tmp_path / "h100-p2-distributed.json"
    run.write_text(json.dumps({"meta": meta, "strong": rows, "weak": None, "rule": {}}))
    (tmp_path / "h100-p2-collectives.json").write_text(_latency(10e-6, broadcast=7e-6).to_json())
    assert bench.main(["--rules-from", str(run)]) == 0
    again = json.loads(run.read_text())
    assert again["strong"] == rows and again["rule"]["sgemvt float32"]["all_ranks_from"] is not None
    text = (tmp_path / "h100-p2-distributed.md").read_text()
    assert "recomputed after the run: `python -m bench.distributed --rules-from h100-p2-distributed.json`" in text
    assert "| sgemvt | float32 | 16384 | 466.8 | 292.7 |" in text


def test_rules_from_a_file_that_is_no_run_is_a_usage_error(tmp_path, capsys):
    bad = tmp_path / "h100-p2-distributed.json"
    bad.write_text("{}")
    with pytest.raises(SystemExit) as exited:
        bench.main(["--rules-from", str(bad)])
    assert exited.value.code == 2
    assert f"--rules-from {bad}: not a bench.distributed run's JSON" in capsys.readouterr().err


class _FakeCupy:
    """Enough of CuPy for bench.distributed.Timer: a GPU clock that a call moves on by
    ``per_call`` ms and a spin by 1 ms, events that read it when recorded."""

    def __init__(self, per_call: float):
        self.now, self.per_call, self.calls = 0.0, per_call, 0
        clock = self

        class Event:
            def record(self, stream=None):
                self.at = clock.now

            def synchronize(self):
                pass

        class Stream:
            ptr = 0

            def synchronize(self):
                pass

        class cuda:  # noqa: N801 (CuPy's name)
            pass

        cuda.Event = Event
        cuda.get_current_stream = staticmethod(lambda: Stream())
        cuda.get_elapsed_time = staticmethod(lambda a, b: b.at - a.at)
        self.cuda = cuda

    def call(self):
        self.now += self.per_call
        self.calls += 1


def test_the_timer_gives_a_call_s_time_of_queued_calls():
    fake = _FakeCupy(per_call=0.25)
    barriers = []

    class Ranks:
        def barrier(self):
            barriers.append(fake.calls)

    timer = bench.Timer.__new__(bench.Timer)
    timer.cupy, timer.ranks = fake, Ranks()
    timer.clock = type("Clock", (), {"spin": lambda self: setattr(fake, "now", fake.now + 1.0)})()
    assert timer.samples_ms(fake.call, repeat=4, warmup=2, calls=10) == [0.25] * 4
    assert fake.calls == 2 + 4 * 10 and barriers == [2, 12, 22, 32]  # the ranks meet once a sample
    assert timer.samples_ms(fake.call, repeat=3, warmup=0, together=False) == [0.25] * 3
    assert len(barriers) == 4
