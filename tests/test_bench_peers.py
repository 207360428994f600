"""bench.peers and bench.sweeps without a GPU: every sequence's framework
formulation against the float64 oracle, the report's arithmetic and tables,
peers that are missing or wrong, the timing loops on fakes, and --plot-only.

The oracle's pass rule is TESTING.md's (ratio < 16, or 16 sqrt(k) for an
output summing k terms). PyTorch and JAX cases skip, with the reason, where
the framework is not installed; --plot-only's test skips without matplotlib.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import types

import numpy as np
import pytest

from bench import peers as P
from bench import sweeps as S
from fusec import oracle
from fusec.frontend import load_script
from tests.helpers import ROOT, library, script_names

SIZE_CASES = ({"m": 33, "n": 17}, {"m": 17, "n": 33}, {"m": 1, "n": 1})
VECTOR_N = 1000


# ---------------------------------------------------------------------------
# The formulations against the oracle
# ---------------------------------------------------------------------------

def _numpy():
    return np, lambda a: a, np.asarray


def _jax():
    pytest.importorskip("jax", reason="JAX is not installed here")
    jax, jnp = P.import_jax()
    return jnp, jnp.asarray, np.asarray


def _torch():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed here")
    return torch, torch.from_numpy, lambda t: t.numpy()


BACKENDS = {"numpy": _numpy, "jax": _jax, "torch": _torch}


def test_every_script_has_one_formulation():
    assert sorted(P.SEQUENCES) == sorted(P.SCRIPTS) == script_names()


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("backend", sorted(BACKENDS))
@pytest.mark.parametrize("script", script_names())
def test_formulation_agrees_with_the_oracle(script, backend, dtype):
    xp, to_array, to_numpy = BACKENDS[backend]()
    dag = load_script(ROOT / "scripts" / f"{script}.script", library())
    names = [dag.value(v).name for v in dict.fromkeys(dag.outputs)]
    has_matrix = any(dag.value(v).kind.value == "matrix" for v in dag.inputs)
    cases = [{s: c.get(s, c["n"]) for s in dag.sizes} for c in SIZE_CASES] if has_matrix else \
        [{s: n for s in dag.sizes} for n in (1, VECTOR_N)]
    for seed, sizes in enumerate(cases):
        inputs = oracle.random_inputs(dag, sizes, dtype, seed)
        theirs = P.SEQUENCES[script](xp, {k: to_array(v) if isinstance(v, np.ndarray) else v
                                          for k, v in inputs.items()})
        assert isinstance(theirs, tuple) and len(theirs) == len(names)
        outputs = {name: to_numpy(value) for name, value in zip(names, theirs)}
        for name, value in outputs.items():
            assert np.asarray(value).dtype == np.dtype(dtype), f"{name} is {np.asarray(value).dtype}"
        checks = oracle.check_outputs(dag, library(), inputs, outputs, dtype)
        assert all(c.passed for c in checks), (sizes, [str(c) for c in checks])


def test_script_sizes_and_vector_default():
    lib = library()
    bicgk = load_script(ROOT / "scripts" / "bicgk.script", lib)
    vadd = load_script(ROOT / "scripts" / "vadd.script", lib)
    assert P.script_sizes(bicgk, 16384, 99) == {"m": 16384, "n": 16384}
    assert P.script_sizes(vadd, 16384, 99) == {"n": 99}
    assert P.default_vector_size(16384, "float32") == 1 << 26
    assert P.default_vector_size(8192, "float64") == 1 << 25


# ---------------------------------------------------------------------------
# Peers: missing, failing, wrong, right
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("name, module", [("cublas", "cupy"), ("torch", "torch"), ("torch.compile", "torch"),
                                          ("jax", "jax")])
def test_a_missing_peer_is_skipped_with_the_reason(monkeypatch, name, module):
    monkeypatch.setitem(sys.modules, module, None)  # import raises ImportError
    (peer,) = P.make_peers([name])
    assert peer.name == name
    # PyTorch's peers import CuPy first (for the timing): where CuPy is missing too, it is named
    missing = [module] + (["cupy"] if module == "torch" and importlib.util.find_spec("cupy") is None else [])
    assert peer.reason and any(m in peer.reason for m in missing)
    result = P._run_peer(peer, "bicgk", {}, "float32", (), 20, 1, 1.0, np)
    assert result == {"status": "skipped", "reason": peer.reason}


def test_an_unknown_peer_is_an_error():
    with pytest.raises(ValueError, match="unknown peer 'mkl'"):
        P.make_peers(["mkl"])


class FakePeer(P.Peer):
    """A peer whose results and times are given; ``cupy`` in the tests is NumPy
    (it has every function bench.fusion.relative_difference calls)."""

    name = "fake"

    def __init__(self, outputs=None, error=None):
        self.outputs, self.error = outputs, error
        super().__init__()

    def setup(self):
        self.version = "fake 1.0"

    def prepare(self, script, inputs, dtype):
        if self.error:
            raise self.error
        return P.Prepared(self.outputs, gpu=lambda r: ([0.5] * r, 2), host=lambda r: [0.6] * r,
                          pipelined=lambda r: [0.55] * r, compile_s=1.5, note="graph breaks")


OURS = (np.arange(1.0, 5.0, dtype=np.float32), np.array(3.0, dtype=np.float32))


def test_a_peer_that_fails_to_run_is_skipped():
    result = P._run_peer(FakePeer(error=RuntimeError("no triton\nmore")), "bicgk", {}, "float32", OURS,
                         20, 1000, 1e12, np)
    assert result == {"status": "skipped", "reason": "failed to run: RuntimeError: no triton"}
    result = P._run_peer(FakePeer(error=P.Skip("compile failed")), "bicgk", {}, "float32", OURS, 20, 1, 1.0, np)
    assert result == {"status": "skipped", "reason": "compile failed"}


@pytest.mark.parametrize("theirs, why", [
    ((OURS[0] * 1.01, OURS[1]), "differs from fusec by 1.00e-02"),
    ((OURS[0].astype(np.float64), OURS[1]), "float64, expected (4,) float32"),
    ((OURS[0][:3], OURS[1]), "shape (3,)"),
    ((OURS[0],), "1 results, expected 2"),
    ((np.full(4, np.nan, np.float32), OURS[1]), "differs from fusec by nan"),
])
def test_a_peer_that_disagrees_is_wrong_and_untimed(theirs, why):
    result = P._run_peer(FakePeer(theirs), "bicgk", {}, "float32", OURS, 20, 1000, 1e12, np)
    assert result["status"] == "wrong"
    assert why in result["reason"]
    assert "gpu_us" not in result


def test_a_peer_that_fails_while_timed_is_skipped():
    peer = FakePeer(OURS)
    prepared = peer.prepare("bicgk", {}, "float32")
    prepared.host = lambda r: (_ for _ in ()).throw(MemoryError("out of memory"))
    peer.prepare = lambda *args: prepared
    result = P._run_peer(peer, "bicgk", {}, "float32", OURS, 20, 1000, 1e12, np)
    assert result == {"status": "skipped", "reason": "failed while checked or timed: MemoryError: out of memory"}


def test_a_peer_that_agrees_is_timed():
    theirs = (OURS[0] + np.float32(1e-6), OURS[1])
    result = P._run_peer(FakePeer(theirs), "bicgk", {}, "float32", OURS, 20, 1000, 4e12, np)
    assert result["status"] == "ok"
    assert result["difference"] == pytest.approx(1e-6 / 4, rel=0.1)
    assert result["gpu_us"] == 500 and result["host_us"] == 600 and result["pipelined_us"] == 550
    assert result["late"] == 2 and result["compile_s"] == 1.5 and result["note"] == "graph breaks"
    assert result["gbs"] == pytest.approx(1000 / 500e-6 / 1e9)
    assert result["of_copy"] == pytest.approx(1000 / 500e-6 / 4e12)


def test_float64_limit_is_tighter():
    assert P.compare(np, (OURS[0].astype(np.float64) * (1 + 1e-8),), (OURS[0].astype(np.float64),),
                     "float64")[1]
    assert not P.compare(np, (OURS[0] * np.float32(1 + 1e-6),), (OURS[0],), "float32")[1]


# ---------------------------------------------------------------------------
# Timing loops on fakes
# ---------------------------------------------------------------------------

def test_pipelined_queues_depth_calls_per_wait():
    log = []
    times = P.pipelined_ms(lambda: log.append("call") or len(log), lambda r: log.append("wait"), repeat=3,
                           depth=4, warmup=1)
    assert len(times) == 3
    assert log == ["call", "wait"] + (["call"] * 4 + ["wait"]) * 3


def test_host_timer_waits_for_each_call():
    log = []
    times = P.host_timer_ms(lambda: log.append("call"), lambda r: log.append("wait"), repeat=2, warmup=1)
    assert len(times) == 2 and log == ["call", "wait"] * 3


class FakeEvent:
    def __init__(self, log):
        self.log, self.t = log, None

    def synchronize(self):
        self.log.append("sync")


def _fake_clock(log, spin_s):
    clock = P.Clock(None, 0, lambda: FakeEvent(log), lambda e: (log.append("record"), setattr(e, "t", len(log))),
                    lambda a, b: float(b.t - a.t))
    clock.spin = lambda: log.append("spin")
    clock.spin_seconds = lambda: spin_s
    return clock


def test_clock_spins_before_the_start_event_and_counts_late_samples():
    from fusec.runtime.cuda import RETAKES
    log = []
    times, late = _fake_clock(log, spin_s=0.0).times(lambda: log.append("run"), 2, gpu_only=True, warmup=1)
    # any queuing outlasts a spin of 0 s: each sample is taken again RETAKES times, then counted
    assert log == ["run"] + ["spin", "record", "run", "record", "sync"] * 2 * (RETAKES + 1)
    assert times == [2.0, 2.0] and late == 2
    log.clear()
    times, late = _fake_clock(log, spin_s=60.0).times(lambda: log.append("run"), 2, gpu_only=True, warmup=0)
    assert log == ["spin", "record", "run", "record", "sync"] * 2 and late == 0  # queued within the spin
    log.clear()
    times, late = _fake_clock(log, spin_s=60.0).times(lambda: log.append("run"), 2, gpu_only=False, warmup=0)
    assert "spin" not in log and late == 0


def test_fusec_reports_the_samples_its_clock_kept_late(monkeypatch):
    from fusec.runtime import cuda

    class Program:
        def time(self, arrays, *, repeat, host):
            assert host is False
            clock.late_samples += 2  # what GpuClock.seconds counts when retakes stay late
            return [1.0] * repeat

    clock = types.SimpleNamespace(late_samples=5)  # late samples of earlier timings are not this one's
    monkeypatch.setitem(cuda._CLOCKS, "fake context", clock)
    assert P.fusec_gpu_times(Program(), {}, 3) == ([1.0, 1.0, 1.0], 2)


def test_freeing_collects_garbage_before_it_returns_the_pools(monkeypatch):
    log = []
    pool = types.SimpleNamespace(free_all_blocks=lambda: log.append("free CuPy's pool"))
    cupy = types.SimpleNamespace(
        cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(deviceSynchronize=lambda: log.append("sync"))),
        get_default_memory_pool=lambda: pool)
    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(empty_cache=lambda: log.append("empty torch's cache")))
    monkeypatch.setattr(P.gc, "collect", lambda: log.append("collect"))
    P._free(cupy, [types.SimpleNamespace(torch=torch), types.SimpleNamespace()])
    assert log == ["collect", "sync", "free CuPy's pool", "empty torch's cache"]


# ---------------------------------------------------------------------------
# Ratios, targets, tables
# ---------------------------------------------------------------------------

def ok(us, host=None, method="spin + events", compile_s=None):
    host = host or us * 1.05
    return {"status": "ok", "gpu_us": us, "gpu_quartiles_us": [us * 0.99, us * 1.01], "gpu_method": method,
            "late": 0 if method != "pipelined" else None, "host_us": host,
            "host_quartiles_us": [host, host], "pipelined_us": us * 1.02, "compile_s": compile_s, "note": "",
            "gbs": 1e9 / us / 1e3, "of_copy": 0.5, "difference": 1e-7}


def fake_row(script="bicgk", dtype="float32", n=16384, fusec_us=373.4, host_us=394.2, peers=None,
             floor_us=358.0, nbytes=1_073_872_896):
    fusec = ok(fusec_us, host_us)
    fusec.update(tuned="tuned on h100 2026-11-22", kernels=[["sgemv", "sgemtv"]], compile_s=2.0)
    peers = peers if peers is not None else {
        "cublas": ok(711.8, 727.6),
        "torch": ok(720.0, 760.0),
        "torch.compile": ok(400.0, 480.0, compile_s=6.2),
        "jax": ok(380.0, 395.0, method="pipelined", compile_s=0.3),
    }
    sizes = {"m": n, "n": n} if script in ("bicgk", "gemver", "atax") else {"n": n * n // 4}
    return P.summarize({"script": script, "dtype": dtype, "n": n, "sizes": sizes, "minimum_bytes": nbytes,
                        "floor_us": floor_us, "copy_gbs": 3000.0, "fusec": fusec, "peers": peers})


def test_summary_ratios_and_best_peer():
    row = fake_row()
    assert row["of_floor"] == pytest.approx(373.4 / 358.0)
    assert row["speedup"]["cublas"] == pytest.approx(711.8 / 373.4)
    assert row["best_peer"] == "jax" and row["speedup_best"] == pytest.approx(380.0 / 373.4)
    assert row["best_peer_host"] == "jax" and row["speedup_best_host"] == pytest.approx(395.0 / 394.2)
    assert row["targets"] == [["≤ 1.08× floor", True], ["≥ best peer", True], ["≥ 1.8× best peer", False]]


def test_wrong_and_skipped_peers_are_never_the_best():
    row = fake_row(peers={"cublas": ok(900.0), "jax": {"status": "wrong", "reason": "differs", "difference": 1.0},
                          "torch": {"status": "skipped", "reason": "No module named 'torch'"}})
    assert row["best_peer"] == "cublas" and set(row["speedup"]) == {"cublas"}
    row = fake_row(peers={"torch": {"status": "skipped", "reason": "x"}})
    assert row["best_peer"] is None and row["speedup_best"] is None
    assert row["targets"] == [["≤ 1.08× floor", True]]


def test_targets_depend_on_size():
    assert fake_row(script="gemver", dtype="float64", n=8192)["targets"][-1] == ["≥ 1.15× best peer", False]
    small = fake_row(n=4096, fusec_us=30.0, host_us=50.0, floor_us=40.0)
    assert small["targets"] == [["with host ≤ 1.5× floor (1.25×)", True], ["pipelined ≤ 1.5× floor (0.77×)", True]]
    assert fake_row(n=2048)["targets"] == []


def report(rows, peers=None):
    peers = peers if peers is not None else [
        {"name": "cublas", "reason": None, "version": "CuPy 13, cuBLAS 130000"},
        {"name": "torch", "reason": None, "version": "PyTorch 2.9"},
        {"name": "torch.compile", "reason": "triton is not installed", "version": ""},
        {"name": "jax", "reason": None, "version": "JAX 0.7"}]
    return {"device": "NVIDIA H100 80GB HBM3", "when": "2026-11-23 10:00 UTC", "command": "python -m bench.peers",
            "repeat": 20, "dtypes": ["float32", "float64"], "copy_bandwidth": {"float32": 3.0e12, "float64": 3.0e12},
            "peers": peers, "rows": rows}


def test_markdown_report():
    skipped = {"status": "skipped", "reason": "triton is not installed"}
    rows = [fake_row(), fake_row(script="vadd", n=16384, peers={
        "cublas": ok(775.7), "torch": {"status": "wrong", "reason": "differs from fusec by 1.00e-02 (limit 1e-03)",
                                       "difference": 1e-2},
        "torch.compile": skipped, "jax": ok(350.0, method="pipelined")}),
        fake_row(dtype="float64", n=8192)]
    text = P.markdown(report(rows))
    assert text.startswith("# fusec against cuBLAS, PyTorch, torch.compile and JAX on NVIDIA H100 80GB HBM3")
    assert "- torch.compile: skipped: triton is not installed" in text
    assert "- PyTorch: PyTorch 2.9" in text
    assert "## float32" in text and "## float64" in text and "Copy bandwidth measured in this run: 3000 GB/s." in text
    summary = next(line for line in text.splitlines() if line.startswith("| bicgk (tuned) | 16384 |"))
    assert "| 373.4 |" in summary and "| 711.8 (1.91×) |" in summary and "| 380.0† (1.02×) |" in summary
    assert "| JAX | 1.02× |" in summary and "≥ 1.8× best peer MISSED" in summary and "≤ 1.08× floor met" in summary
    vadd = next(line for line in text.splitlines() if line.startswith("| vadd (tuned) |"))
    assert "| WRONG |" in vadd and "| skipped |" in vadd
    assert "## Wrong results" in text and "- vadd float32: PyTorch wrong: differs from fusec by 1.00e-02" in text
    detail = [line for line in text.splitlines() if line.startswith("| bicgk | ")]
    assert len(detail) == 2 * 5  # fusec and four peers, two dtypes
    assert any("| torch.compile |" in line and "| 6.2 |" in line for line in detail)
    assert any(line.startswith("| bicgk | fusec | 373.4 |") and "| reference |" in line for line in detail)
    header, rule = text.splitlines()[text.splitlines().index(summary) - 2:text.splitlines().index(summary)]
    assert header.count("|") == rule.count("|") == summary.count("|")


def test_markdown_when_every_peer_is_skipped():
    peers = [{"name": p, "reason": f"No module named '{p}'", "version": ""} for p in P.PEERS]
    row = fake_row(peers={p: {"status": "skipped", "reason": f"No module named '{p}'"} for p in P.PEERS})
    text = P.markdown(report([row], peers))
    line = next(x for x in text.splitlines() if x.startswith("| bicgk (tuned) |"))
    assert line.count("skipped") == 4 and "| — | — |" in line
    assert "Wrong results" not in text


# ---------------------------------------------------------------------------
# Command lines (checked before CuPy is imported)
# ---------------------------------------------------------------------------

@pytest.mark.parametrize("argv, message", [
    (["--scripts", "bicgk,nope"], "no sequence 'nope'"),
    (["--peers", "cublas,mkl"], "unknown peer 'mkl'"),
    (["--size", "m=5"], "expected n=VALUE"),
    (["--size", "n=x"], "expected n=VALUE"),
    (["--dtype", "float16"], "invalid choice"),
])
def test_bad_arguments(capsys, argv, message):
    with pytest.raises(SystemExit) as exc:
        P.main(argv)
    assert exc.value.code == 2 and message in capsys.readouterr().err


def test_parse_size_and_dtypes():
    assert P.parse_size(["n=4096"]) == 4096 and P.parse_size([]) is None
    assert P.dtypes_of("both") == ["float32", "float64"] and P.dtypes_of("float64") == ["float64"]
    assert P.command_line("bench.peers", ["--repeat", "30", "--out", "/tmp/x"]) == "python -m bench.peers --repeat 30"
    assert P.default_name("NVIDIA H100 80GB HBM3", "peers") == "h100-peers"


# ---------------------------------------------------------------------------
# Sweeps
# ---------------------------------------------------------------------------

def sweep_report():
    rows = []
    for dtype in ("float32", "float64"):
        for script in ("bicgk", "gemver"):
            for n, fusec_us in ((512, 9.0), (1024, 12.0), (2048, 20.0)):
                peers = {"cublas": ok(fusec_us * 1.8), "torch": ok(fusec_us * 2.0),
                         "torch.compile": ok(fusec_us * (1.1 if n == 1024 else 1.5)),
                         "jax": ok(fusec_us * 1.3, method="pipelined")}
                rows.append(fake_row(script, dtype, n, fusec_us, fusec_us * 2, peers, fusec_us, n * n * 4))
    return report(rows)


def test_sweep_series_takes_the_best_other_peer():
    s = S.series(sweep_report()["rows"], "bicgk", "float32")
    assert s["n"] == [512, 1024, 2048]
    assert s["best_name"] == ["jax", "torch.compile", "jax"]  # cuBLAS is its own line
    assert s["fusec"][0] == pytest.approx(512 * 512 * 4 / 9e-6 / 1e9)
    assert s["cublas"][0] == pytest.approx(s["fusec"][0] / 1.8)
    host = S.series(sweep_report()["rows"], "bicgk", "float32", "host_us")
    assert host["fusec"][0] == pytest.approx(s["fusec"][0] / 2)


def test_sweep_markdown():
    text = S.markdown(sweep_report())
    assert "## bicgk, float32 (copy bandwidth 3000 GB/s)" in text and "## gemver, float64" in text
    assert "| 1024 |" in text and "| torch.compile |" in text and "| 1.80× |" in text


def test_plot_only(tmp_path, capsys):
    pytest.importorskip("matplotlib", reason="matplotlib is not installed here")
    data = sweep_report()
    f32 = dict(data, dtypes=["float32"], rows=[r for r in data["rows"] if r["dtype"] == "float32"])
    f64 = dict(data, dtypes=["float64"], rows=[r for r in data["rows"] if r["dtype"] == "float64"])
    (tmp_path / "h100-sweep.json").write_text(json.dumps(f32))
    (tmp_path / "f64.json").write_text(json.dumps(f64))
    assert S.main(["--plot-only", str(tmp_path / "h100-sweep.json"), str(tmp_path / "f64.json"),
                   "--out", str(tmp_path)]) == 0
    for script in ("bicgk", "gemver"):
        png = tmp_path / f"h100-sweep-{script}.png"
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert "## gemver, float64" in (tmp_path / "h100-sweep.md").read_text()


def test_plot_only_without_matplotlib(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    (tmp_path / "s.json").write_text(json.dumps(sweep_report()))
    assert S.main(["--plot-only", str(tmp_path / "s.json"), "--out", str(tmp_path)]) == 1
    assert "matplotlib is not installed here" in capsys.readouterr().err
    assert (tmp_path / "s.md").exists()


def test_sweep_tune_is_refused_below_zero(capsys):
    with pytest.raises(SystemExit) as exit:
        S.main(["--tune", "-1"])
    assert exit.value.code == 2 and "--tune -1" in capsys.readouterr().err


@pytest.mark.parametrize("script", ["gemver", "bicgk"])
def test_sweep_tunes_a_point_as_fusec_tune_does(script, monkeypatch):
    """n x n matrices, the precision and TOP as given, the winner stored (tune's default)."""
    seen = {}

    def fake_tune(dag, library, dtype, point_sizes, **options):
        seen.update(calls=len(dag.calls), dtype=dtype, sizes=dict(point_sizes), options=options)
        return types.SimpleNamespace(winner=None)
    monkeypatch.setattr("fusec.tune.search.tune", fake_tune)
    lines = []
    S.tune_point(script, "float64", 512, 7, log=lines.append)
    assert seen["dtype"] == "float64" and set(seen["sizes"].values()) == {512} and seen["calls"] >= 2
    assert seen["options"] == {"top": 7, "progress": False}
    assert lines == [f"{script:8s} float64  n = 512: tuned, no candidate passed (the predictor's plan runs)"]


def test_two_pass_sequences_are_held_to_their_two_pass_floor():
    """ATAX reads its 16384^2 matrix twice for now: its floor counts the matrix twice."""
    matrix = 16384 * 16384 * 4
    nbytes = matrix + 3 * 16384 * 4  # A once, x, t... the one-pass minimum
    row = fake_row(script="atax", fusec_us=700.0, nbytes=nbytes, floor_us=nbytes / 3000e9 * 1e6)
    assert row["two_pass_floor_us"] == pytest.approx((nbytes + matrix) / 3000e9 * 1e6)
    what, met = row["targets"][0]
    assert what.startswith("≤ 1.05× two-pass floor") and met  # 700 us against ~716 us
    slow = fake_row(script="atax", fusec_us=800.0, nbytes=nbytes, floor_us=nbytes / 3000e9 * 1e6)
    assert slow["targets"][0][1] is False
    assert "two_pass_floor_us" not in fake_row()  # BiCGK reads A once


def test_two_pass_sequences_at_n4096_are_judged_with_host_on_their_two_pass_floor():
    n = 4096
    matrix = n * n * 4
    nbytes = matrix + 3 * n * 4
    floor = nbytes / 3000e9 * 1e6  # ~22 us; two-pass ~45 us
    row = fake_row(script="atax", n=n, fusec_us=45.0, host_us=60.0, nbytes=nbytes, floor_us=floor)
    (what, met), (what_pipelined, met_pipelined) = row["targets"]
    assert what.startswith("with host ≤ 1.5× two-pass floor") and met
    assert what_pipelined.startswith("pipelined ≤ 1.5× two-pass floor") and met_pipelined  # 45.9 us
    assert row["of_floor_host"] > 2  # against the one-pass floor it would fail
    slow = fake_row(script="atax", n=n, fusec_us=45.0, host_us=70.0, nbytes=nbytes, floor_us=floor)
    assert [met for _, met in slow["targets"]] == [False, True]


def test_at_n4096_one_call_and_calls_back_to_back_are_both_judged():
    row = fake_row(script="sscal", n=4096, fusec_us=9.0, host_us=20.0, nbytes=32 << 20, floor_us=11.1)
    assert row["targets"] == [["with host ≤ 1.5× floor (1.80×)", False], ["pipelined ≤ 1.5× floor (0.83×)", True]]


def test_gemver_reports_its_three_pass_floor_but_is_judged_on_its_floor():
    n = 16384
    matrix = n * n * 4
    nbytes = 2 * matrix + 7 * n * 4  # A read, B written, the vectors
    floor = nbytes / 3000e9 * 1e6
    row = fake_row(script="gemver", fusec_us=1091.0, nbytes=nbytes, floor_us=floor)
    assert row["three_pass_floor_us"] == pytest.approx((nbytes + matrix) / 3000e9 * 1e6)
    assert row["of_three_pass_floor"] == pytest.approx(1091.0 / row["three_pass_floor_us"])
    assert row["targets"][0] == ["≤ 1.08× floor", False]
