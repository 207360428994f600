"""GPU tier of ``fusec tune``: every candidate it measures on BiCGK passes the
oracle, the winner lands in the tuning cache, and ``fusec.compile`` (and
``fusec compile``) then build that plan and say so. The cache is this test's
own ($FUSEC_CACHE_DIR), so the nvcc cache starts empty too.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import fusec
from fusec import cli, oracle
from fusec.frontend import load_script
from fusec.tune.search import OK, report, tune
from tests.helpers import DTYPES, LIBRARY, ROOT, library, own_cache

pytestmark = pytest.mark.gpu

BICGK = ROOT / "scripts" / "bicgk.script"
CASES = [{"m": 1000, "n": 1000}, {"m": 1501, "n": 1000}]  # square, and m = n + n/2 + 1 (sblat2)


@pytest.fixture(autouse=True)
def cache(monkeypatch, tmp_path):
    return own_cache(monkeypatch, tmp_path)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sizes", CASES, ids=lambda s: f"m{s['m']}n{s['n']}")
def test_tune_passes_every_candidate_and_compile_uses_the_winner(sizes, dtype):
    dag = load_script(BICGK, library())
    result = tune(dag, library(), dtype, sizes, top=3, repeat=10, warmup=2, progress=False)
    text = report(result)
    assert len(result.rows) >= 3, text  # the top 3, and the twins of horizontal fusions among them
    assert all(r.measurement.verdict == OK for r in result.rows), text
    assert all(math.isfinite(r.measured) and r.measured > 0 and r.gbps > 0 for r in result.rows), text
    assert result.winner.measured == min(r.measured for r in result.rows)
    assert result.cache_path is not None and result.cache_path.is_file(), text

    program = fusec.compile(BICGK, library(), dtype, sizes=sizes)
    assert program.generated.plan == result.winner.plan
    assert program.tuned == result.entry.describe() and program.tuned.startswith("tuned on ")
    inputs = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(7))
    results = program.run(inputs, poison=True)
    checks = oracle.check_outputs(dag, library(), inputs, dict(zip(program.outputs, results)), dtype)
    assert all(c.passed for c in checks), checks
    assert fusec.compile(BICGK, library(), dtype, sizes=sizes, tuned=False).tuned is None


def test_the_command_line_tunes_then_compile_says_where_the_plan_came_from(capsys, tmp_path):
    code = cli.main(["tune", str(BICGK), "--library", str(LIBRARY), "--size", "n=1000", "--top", "2",
                     "--repeat", "5"])
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert "winner: rank" in out and "tuning cache: wrote" in out
    assert "measuring" in err  # progress on stderr
    code = cli.main(["compile", str(BICGK), "--library", str(LIBRARY), "--size", "n=1000", "--no-nvcc",
                     "-o", str(tmp_path / "out")])
    out, err = capsys.readouterr()
    assert code == 0, err
    assert "plan: from the tuning cache (tuned on " in out


def test_emptying_l2_leaves_every_array_as_it_was():
    """The sweep writes only fusec's own buffer and drops those lines without writing them
    back: a program's inputs and results after it are what they were before it."""
    from fusec.runtime import cuda
    prog = fusec.compile(ROOT / "scripts" / "bicgk.script", library(), "float32", tuned=False, reproducible=True)
    assert prog.generated.reproducible  # so the results compare bit for bit
    sizes = {"m": 1000, "n": 777}
    inputs = oracle.random_inputs(prog.dag, sizes, "float32", np.random.default_rng(3))
    before = prog(**inputs)
    with cuda.context() as ctx:
        clock = cuda.gpu_clock(ctx)
        assert clock.l2_bytes > 0
        for _ in range(2):
            clock.empty_l2()
        cuda.synchronize()
    after = prog(**inputs)
    for a, b in zip(before, after):
        np.testing.assert_array_equal(a, b)
    prog.release()


def test_fusec_run_checks_and_says_whether_its_bits_repeat(capsys):
    atax = ROOT / "scripts" / "atax.script"
    for extra in ([], ["--reproducible"]):
        code = cli.main(["run", str(atax), "--library", str(LIBRARY), "--size", "n=2048", "--repeat", "3", *extra])
        out, err = capsys.readouterr()
        assert code == 0, out + err
        assert "check  y: test ratio" in out and "FAILED" not in out
        program = fusec.compile(atax, library(), sizes={"m": 2048, "n": 2048}, reproducible=bool(extra))
        assert ("bits   two runs may differ" in out) == (not program.generated.reproducible), out
    assert "bits " not in out  # --reproducible


@pytest.mark.parametrize("dtype", DTYPES)
def test_compile_with_measure_tunes_quickly_once_and_the_program_is_right(dtype, cache):
    """fusec.compile(measure=True) at an untuned size: a quick tune on this GPU, its winner
    correct and cached; the next compile finds it without measuring."""
    import time
    sizes = {"m": 1733, "n": 1291}
    dag = load_script(BICGK, library())
    start = time.perf_counter()
    program = fusec.compile(BICGK, library(), dtype, sizes=sizes, measure=True)
    first = time.perf_counter() - start
    assert program.tuned and program.tuned.startswith("tuned on "), program.origin
    assert list((cache / "tuning").rglob("*.json")), "the quick tune's winner is not in the tuning cache"
    inputs = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(3))
    results = program.run(inputs, poison=True)
    checks = oracle.check_outputs(dag, library(), inputs, dict(zip(program.outputs, results)), dtype)
    assert all(c.passed for c in checks), checks
    start = time.perf_counter()
    again = fusec.compile(BICGK, library(), dtype, sizes=sizes, measure=True)
    assert again.generated.plan == program.generated.plan and again.tuned == program.tuned
    assert time.perf_counter() - start < first, "the second compile measured again"
