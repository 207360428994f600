"""bench/solvers.py without a GPU: the tolerance keyword each cg signature takes, the
iteration counts of ``--iterations-on-cpu`` (against SciPy's own count where SciPy is
importable), the systems it draws, the report's to-tolerance table, and the plot of a run."""

from __future__ import annotations

import json

import numpy as np
import pytest

from bench import solvers as B
from fusec.solvers.methods import BICGSTAB, CG, METHODS


class Recorder:
    """Stand-ins of both signatures: each records the keywords it was called with."""

    def __init__(self):
        self.calls = []

    def old(self, A, b, x0=None, tol=1e-5, maxiter=None, M=None, callback=None, atol=None):
        """CuPy 10's ``cupyx.scipy.sparse.linalg.cg``."""
        self.calls.append({"tol": tol, "atol": atol, "maxiter": maxiter})
        return "x", 0

    def new(self, A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, M=None, callback=None):
        """CuPy's current ``cg``, after SciPy 1.12: keyword-only ``rtol``."""
        self.calls.append({"rtol": rtol, "atol": atol, "maxiter": maxiter})
        return "x", 0


def test_the_keyword_follows_the_signature():
    calls = Recorder()
    assert B.relative_tolerance_keyword(calls.old) == "tol"
    assert B.relative_tolerance_keyword(calls.new) == "rtol"
    with pytest.raises(TypeError, match="neither"):
        B.relative_tolerance_keyword(lambda A, b, x0=None: None)


@pytest.mark.parametrize("signature, keyword", [("old", "tol"), ("new", "rtol")])
def test_solve_to_passes_the_tolerance_under_the_name_the_solver_takes(signature, keyword):
    calls = Recorder()
    assert B.solve_to(getattr(calls, signature), np.eye(2), np.ones(2), 1e-5, 7) == ("x", 0)
    assert calls.calls == [{keyword: 1e-5, "atol": 0.0, "maxiter": 7}]


def test_solve_to_runs_scipys_cg_to_the_tolerance():
    linalg = pytest.importorskip("scipy.sparse.linalg")
    rng = np.random.default_rng(0)
    m = rng.standard_normal((40, 40))
    A, b = m @ m.T / 40 + np.eye(40), rng.uniform(-0.5, 0.5, 40)
    x, info = B.solve_to(linalg.cg, A, b, 1e-8, 1000)
    assert info == 0
    assert np.linalg.norm(b - A @ x) <= 1e-8 * np.linalg.norm(b)


@pytest.mark.parametrize("needed, every, run", [(18, 16, 32), (16, 16, 16), (13, 16, 16), (13, 1, 13), (29, 4, 32)])
def test_iterations_run_round_up_to_the_next_check(needed, every, run):
    assert B.iterations_run(needed, every) == run


def test_cpu_system_is_symmetric_with_the_spectrum_asked_for():
    n = 2100  # past one block of the in-place symmetrisation, and not a multiple of it
    A, b = B.cpu_system(n, "float64", seed=3)
    np.testing.assert_array_equal(A, A.T)
    eigenvalues = np.linalg.eigvalsh(A)
    assert 0.9 < eigenvalues[0] < 1.1 and 9.9 < eigenvalues[-1] < 10.1  # linspace(1, 10) + a small part
    assert b.shape == (n,) and np.abs(b).max() <= 0.5
    A32, _ = B.cpu_system(64, "float32", seed=3)
    assert A32.dtype == np.float32


def test_iterations_needed_is_scipys_count():
    # SciPy's cg calls back once per iteration and stops at the first residual below the rule
    linalg = pytest.importorskip("scipy.sparse.linalg")
    A, b = B.cpu_system(300, "float64", seed=0)
    count = []
    linalg.cg(A, b, rtol=1e-8, atol=0.0, maxiter=1000, callback=lambda x: count.append(1))
    assert B.iterations_needed(CG, A, b, 1e-8) == len(count) > 1


def test_iterations_needed_is_none_without_convergence_or_at_a_breakdown():
    A, b = B.cpu_system(100, "float64", seed=0)
    assert B.iterations_needed(CG, A, b, 1e-12, maxiter=3) is None
    skew = np.array([[0.0, 1.0], [-1.0, 0.0]])  # p . A p = 0: the first iteration divides by zero
    with np.errstate(all="ignore"):
        assert B.iterations_needed(BICGSTAB, skew, np.array([1.0, 2.0]), 1e-8) is None


def test_iterations_on_cpu_table():
    table = B.iterations_on_cpu([("float64", 200)], ["cg", "bicgstab"], [0, 1], check_every=16)
    A, b = B.cpu_system(200, "float64", seed=1)
    needed = B.iterations_needed(METHODS["cg"], A, b, B.TOLERANCE["float64"])
    row = next(line for line in table.splitlines() if line.startswith("| cg |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[:3] == ["cg", "float64", "200"]
    assert cells[3].split(", ")[1] == str(needed)
    assert cells[4].split(", ")[1] == str(B.iterations_run(needed, 16))


def test_true_residual_a_block_of_rows_at_a_time():
    rng = np.random.default_rng(1)
    A, b, x = rng.standard_normal((50, 50)).astype(np.float32), rng.standard_normal(50), rng.standard_normal(50)
    expected = np.linalg.norm(b - A.astype(np.float64) @ x) / np.linalg.norm(b)
    assert B.true_residual(np, A, b, x, rows=7) == pytest.approx(expected, rel=1e-12)


def test_report_shows_iterations_run_and_needed_and_residuals():
    row = {"solver": "cg", "dtype": "float32", "n": 1024, "floor_us": 1.4, "over_floor": 8.0,
           "us_per_iteration": {"fusec": 11.2, "jax": 31.7}, "difference": {"jax": 7.5e-6},
           "skipped": {"cupy": "TypeError: no"},
           "to_tolerance": {"ms": {"fusec": 4.66, "fusec_unchecked": 4.21, "fusec_new": 6.25, "fusec_every_1": 3.1,
                                   "jax": 0.80},
                            "info": {"fusec": 0, "fusec_every_1": 0},
                            "iterations": {"fusec": 32, "fusec_every_1": 18},
                            "residual": {"fusec": 2e-7, "fusec_unchecked": 2e-7, "fusec_new": 3e-7,
                                         "fusec_every_1": 8e-6, "jax": 9e-6}}}
    text = B.report([row], "GPU", 2.9e12, "python -m bench.solvers", [])
    line = next(x for x in text.splitlines() if x.startswith("| cg | float32 | 1024 | 4.66"))
    assert "| 32 / 18 | 4.21 (2.0e-07) | 6.25 (3.0e-07) | 3.10 (8.0e-06) |" in line and "0.80 (9.0e-06)" in line
    assert "- cupy: TypeError: no" in text


def test_plot_from_a_runs_json(tmp_path):
    row = {"solver": "cg", "dtype": "float32", "n": 1024, "floor_us": 1.4, "over_floor": 8.0,
           "us_per_iteration": {"fusec": 11.2, "jax": 31.7}, "to_tolerance": {"ms": {"fusec": 0.54, "jax": 0.59}}}
    older = {k: v for k, v in row.items() if k != "to_tolerance"} | {"n": 4096,
                                                                     "to_tolerance_ms": {"fusec": 5.3, "jax": 1.3}}
    source = tmp_path / "run.json"
    source.write_text(json.dumps({"device": "GPU", "rows": [row, older]}))
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        with pytest.raises(SystemExit, match="needs matplotlib"):
            B.main(["--plot-from", str(source)])
        return
    assert B._to_tolerance_ms(older) == {"fusec": 5.3, "jax": 1.3}
    assert B.main(["--plot-from", str(source)]) == 0
    assert (tmp_path / "run.png").read_bytes().startswith(b"\x89PNG")


@pytest.mark.parametrize("text", [None, "{not json", '{"rows": []}'], ids=["missing", "not-json", "no-device"])
def test_plot_from_a_file_that_is_no_run_names_the_argument(tmp_path, text):
    source = tmp_path / "run.json"
    if text is not None:
        source.write_text(text)
    with pytest.raises(SystemExit, match=f"--plot-from {source}: not a run's JSON"):
        B.main(["--plot-from", str(source)])
