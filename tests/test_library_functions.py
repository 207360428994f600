"""The BLAS-1 functions added to fusec/data/blas (snrm2, sasum, saxpby, scopy, svmul, svdiv)
without a GPU: their metadata and reference semantics, that each fuses with a neighbour in the
optimization space, that the generated code compiles (nvcc), and that the performance
database's probes cover their routines. Numerics on the GPU: tests/gpu/test_library_functions.py.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.api import script_dag
from fusec.cost.analytic import DEFAULT
from fusec.cost.perfdb import probes as P
from fusec.cost.perfdb import store
from fusec.library.model import Geometry
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from fusec.space.implementations import VECTOR_SHAPES
from tests.helpers import DTYPES, library
from tests.library_scripts import CHAINED, FUSED, NEW_FUNCTIONS, SCRIPTS, TRIANGLE_FUNCTIONS

# the compute (and finish) routine each new function defines in its own file
OWN_ROUTINES = {"snrm2": "nrm2_compute", "sasum": "asum_compute", "saxpby": "axpby_compute",
                "scopy": "copy_compute", "svmul": "vmul_compute", "svdiv": "vdiv_compute"}


def dag_of(name: str):
    return script_dag(None, SCRIPTS[name], f"{name}.script", library())


def test_the_new_functions_are_unnested_and_load_with_their_references():
    lib = library()
    expected = {
        "snrm2": ("snrm2(x: vector[n]) -> r: scalar", "reduce(+)", "sqrt(dot(x, x))", "sqrt_finish"),
        "sasum": ("sasum(x: vector[n]) -> r: scalar", "reduce(+)", "sum(abs(x))", None),
        "saxpby": ("saxpby(alpha: scalar, x: vector[n], beta: scalar, y: vector[n]) -> z: vector[n]", "map",
                   "alpha * x + beta * y", None),
        "scopy": ("scopy(x: vector[n]) -> y: vector[n]", "map", "x", None),
        "svmul": ("svmul(x: vector[n], y: vector[n]) -> z: vector[n]", "map", "x * y", None),
        "svdiv": ("svdiv(x: vector[n], y: vector[n]) -> z: vector[n]", "map", "x / y", None),
    }
    assert set(expected) == set(NEW_FUNCTIONS) <= set(lib.functions)
    for name, (signature, hof, reference, finish) in expected.items():
        f = lib.functions[name]
        assert (f.signature(), str(f.hof), f.reference) == (signature, hof, reference), name
        assert (f.finish.routine if f.finish else None) == finish
        assert f.hof.geometry is Geometry.VECTOR
        (impl,) = f.implementations
        assert impl.compute.name == OWN_ROUTINES[name]
        assert lib.routine_homes[OWN_ROUTINES[name]].endswith(f"{name}.cu")


def test_references_are_the_blas_semantics():
    """The oracle's float64 value of each script is what NumPy computes directly."""
    rng = np.random.default_rng(46)
    n = 257
    x, y, w = (rng.uniform(-0.5, 0.5, n) for _ in range(3))
    alpha, beta = 0.7, -1.3
    cases = {
        "nrm2": ({"x": x}, [np.linalg.norm(x)]),
        "asum": ({"x": x}, [np.abs(x).sum()]),
        "axpby": ({"alpha": alpha, "x": x, "beta": beta, "y": y}, [alpha * x + beta * y]),
        "copy": ({"x": x}, [x]),
        "vmul": ({"x": x, "y": y}, [x * y]),
        "vdiv": ({"x": x, "y": y}, [x / y]),
        "axpby_dot": ({"alpha": alpha, "x": x, "beta": beta, "y": y, "w": w},
                      [alpha * x + beta * y, (alpha * x + beta * y) @ w]),
        "axpy_nrm2": ({"alpha": alpha, "q": x, "r": y}, [alpha * x + y, np.linalg.norm(alpha * x + y)]),
        "vmul_asum": ({"x": x, "y": y}, [np.abs(x * y).sum()]),
        "vdiv_dot": ({"x": x, "y": y, "w": w}, [(x / y) @ w]),
        "copy_axpy": ({"alpha": alpha, "r": x, "q": y}, [x, alpha * x + y]),
        "nrm2_asum": ({"x": x}, [np.linalg.norm(x), np.abs(x).sum()]),
    }
    assert set(cases) == set(SCRIPTS) - set(CHAINED)
    for name, (inputs, want) in cases.items():
        dag = dag_of(name)
        values = oracle.evaluate(dag, library(), inputs)
        for vid, expected in zip(dag.outputs, want, strict=True):
            np.testing.assert_allclose(values[vid], expected, rtol=1e-13, atol=0, err_msg=name)
    A = rng.uniform(-0.5, 0.5, (40, n))
    dag = dag_of("gemv_nrm2")
    values = oracle.evaluate(dag, library(), {"A": A, "x": x})
    assert values[dag.outputs[1]] == pytest.approx(np.linalg.norm(A @ x), rel=1e-13)


def test_the_gauge_of_a_norm_bounds_its_rounding():
    """snrm2's gauge (first order through the square root) is 1.5 ||x||: a float32 norm of
    a long vector, summed naively, passes the test ratio, and one a few eps off fails."""
    dag = dag_of("nrm2")
    x = np.random.default_rng(2).uniform(-0.5, 0.5, 1 << 16)
    expected = oracle.expect(dag, library(), {"x": x})
    (r,) = dag.outputs
    assert expected.gauge[r] == pytest.approx(1.5 * np.linalg.norm(x), rel=1e-14)
    naive = np.sqrt(np.float32(np.add.reduce(x.astype(np.float32) ** 2, dtype=np.float32)))
    [ok] = oracle.check_outputs(dag, library(), {"x": x}, {"r": naive}, np.float32, expected=expected)
    assert ok.passed, ok
    limit = oracle.threshold(expected.sum_lengths[r])
    wrong = np.float32(np.linalg.norm(x) * (1 + 2 * limit * np.finfo(np.float32).eps))
    [bad] = oracle.check_outputs(dag, library(), {"x": x}, {"r": wrong}, np.float32, expected=expected)
    assert not bad.passed


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(FUSED))
def test_the_space_fuses_each_with_its_neighbour(name, dtype):
    """The best-predicted combination runs both calls in one kernel (fewer kernels than
    calls); a result the script does not return is neither a kernel argument nor stored."""
    dag = dag_of(name)
    sizes = {s: 1 << 22 for s in dag.sizes}
    best = build_space(dag, library(), dtype, sizes, DEFAULT).best()
    assert len(best.plan.kernels) == 1 < len(dag.calls)
    program = fusec.compile(source=SCRIPTS[name], name=f"{name}.script", dtype=dtype, plan=best.plan)
    kept = {dag.value(c.result).c_name for c in dag.calls} - {dag.value(v).c_name for v in dag.outputs}
    for c_name in kept:
        assert f"g_{c_name}" not in program.generated.source


def _programs(names, plan_of):
    for name in names:
        dag = dag_of(name)
        for dtype in DTYPES:
            yield name, dtype, fusec.compile(source=SCRIPTS[name], name=f"{name}.script", dtype=dtype,
                                             plan=plan_of(dag))


@pytest.mark.nvcc
@pytest.mark.parametrize("plan", ["predicted", "unfused"])
def test_generated_code_compiles_with_nvcc(plan):
    """Every script, fused as the analytic model ranks first and unfused, in both
    precisions: nvcc compiles every kernel for sm_90 without spilling."""
    from fusec import nvcc

    def plan_of(dag):
        if plan == "unfused":
            return unfused_plan(dag, library())
        return build_space(dag, library(), "float32", {s: 1 << 22 for s in dag.sizes}, DEFAULT).best().plan
    programs = list(_programs(sorted(SCRIPTS), plan_of))
    compiled = nvcc.compile_many([p.generated.source for _, _, p in programs], "sm_90")
    for (name, dtype, program), cubin in zip(programs, compiled):
        assert set(cubin.resources) == {f for k in program.generated.kernels for f in k.function_names}, (name, dtype)
        assert all(r.spill_stores == 0 for r in cubin.resources.values()), (name, dtype)


@pytest.fixture(scope="module")
def new_probes():
    return [p for p in P.probes(library()) if p.function in NEW_FUNCTIONS]


def test_probes_cover_the_new_routines_in_every_shape(new_probes):
    """`fusec perfdb build` probes each new function's own routine in both precisions and
    every vector shape the space searches (its loads and stores are vector.cuh's, probed
    through the older functions too)."""
    for routine in OWN_ROUTINES.values():
        keys = {(p.key.dtype, p.key.block, p.key.iters) for p in new_probes if p.key.routine == routine}
        assert keys == {(d, s.block, s.iters) for d in DTYPES for s in VECTOR_SHAPES}, routine


def test_the_h100_database_is_used_and_lacks_only_the_new_routines():
    """The bundled H100 database timed the library before these functions; it is still
    the library's (every file it timed is unchanged), and what it lacks, which `fusec
    perfdb build --missing` times on the H100, is only the new functions' own routines
    and the probes of the triangle's functions (strmv, strmtv_strict, ssyr, ssyr2), nothing
    once that ran."""
    path = store.find("h100-80gb-hbm3")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        database = store.load(path, library())
    assert database is not None
    lacking = [p for p in P.probes(library()) if p.key not in database.timings]
    assert {p.key.routine for p in lacking if p.function not in TRIANGLE_FUNCTIONS} <= set(OWN_ROUTINES.values())


@pytest.mark.nvcc
def test_the_probes_of_the_new_routines_compile(new_probes):
    from fusec import nvcc
    mine = [p for p in new_probes if p.key.routine in OWN_ROUTINES.values()]
    sources = [source for source, _ in P.modules(library(), mine)]
    for compiled in nvcc.compile_many(sources, "sm_90"):
        assert compiled.resources and all(r.spill_stores == 0 for r in compiled.resources.values())
