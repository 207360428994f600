"""out= arrays in place of an input (BLAS's A := A + x y^T): which results may take an input's
own memory, for every plan of the space, and the refusals, named (no GPU needed; the GPU tier
runs them: tests/gpu/test_in_place.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.api import default_sizes
from fusec.cost.analytic import DEFAULT
from fusec.errors import ArgumentError, LibraryValidationError
from fusec.ir.plan import ProgramPlan
from fusec.library.reference import reads_pointwise, reference_value
from fusec.runtime.in_place import overwrites
from fusec.space import unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import ROOT, library, no_gpu_named, program, script_names

pytestmark = pytest.mark.unit

# script (under scripts/), the result, the input whose memory it may be
IN_PLACE = [("gemver", "B", "A"), ("madd", "C", "A"), ("madd", "C", "B"),
            ("triangle/syr2", "B", "A"), ("triangle/syr2_lower", "B", "A"),
            ("triangle/syr_symv", "B", "A"), ("triangle/syr_symv_lower", "B", "A")]


@pytest.mark.parametrize("function, param, pointwise", [
    ("sger", "A", True), ("sger", "u", False), ("smadd", "A", True), ("smadd", "B", True),
    ("ssyr", "A", True), ("ssyr2", "A", True), ("ssyr_lower", "A", True),
    ("sgemv", "A", False), ("sgemtv", "A", False), ("strmv", "A", False), ("strmtv_strict", "A", False),
    ("saxpy", "x", False), ("sger", "nothing", False),
])
def test_which_parameters_a_function_reads_pointwise(function, param, pointwise):
    assert reads_pointwise(library().function(function), param) is pointwise


def test_a_map_reading_the_transpose_does_not_read_pointwise():
    """ssyr with A.T: B(i, j) reads A(j, i), which another block stores B(j, i) over."""
    ssyr = library().function("ssyr")
    transposed = dataclasses.replace(ssyr, reference="triu(A.T + alpha * outer(x, x))")
    assert reads_pointwise(ssyr, "A")
    assert not reads_pointwise(transposed, "A")
    with pytest.raises(LibraryValidationError):  # a reference that does not check is no answer either
        reads_pointwise(dataclasses.replace(ssyr, reference="A @ A"), "A")


def _compile(script, dtype: str = "float32", plan: ProgramPlan | None = None):
    path = script if not isinstance(script, str) else ROOT / "scripts" / f"{script}.script"
    with no_gpu_named():
        return fusec.compile(path, library(), dtype, plan=plan)


def _plans(script: str, dtype: str) -> list[ProgramPlan]:
    """The first choices of the space, its layouts, its held fusions, a draw of the rest and the
    unfused plan: every family it has, in one kernel or several."""
    dag = _compile(script, dtype).dag
    space = build_space(dag, library(), dtype, default_sizes(dag, None), DEFAULT)
    held = [c for _, c in zip(range(4), space.with_held())]
    drawn = space.sample(24, np.random.default_rng(7))
    return list(dict.fromkeys([c.plan for c in space.top(8) + space.layouts(8) + held + drawn]
                              + [unfused_plan(dag, library())]))


@pytest.mark.parametrize("script, result, given", IN_PLACE)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_an_update_may_write_over_its_matrix_in_every_plan(script, result, given, dtype):
    """Whatever the plan (one kernel or several, tile, band, held or striped), the matrix an update
    reads pointwise may hold its result: check_out takes A itself as out[B]."""
    families, kernels = set(), set()
    for plan in _plans(script, dtype):
        prog = _compile(script, dtype, plan)
        families |= {k.family for k in plan.kernels}
        kernels.add(len(plan.kernels))
        ids = {prog.dag.value(v).name: v for v in prog.dag.inputs + prog.dag.outputs}
        allowed = overwrites(prog.generated)
        assert (ids[result], ids[given]) in allowed.in_place | allowed.after_reads, plan
        inputs = oracle.random_inputs(prog.dag, {s: 9 for s in prog.dag.sizes}, dtype, np.random.default_rng(0))
        chosen = prog.check_out(prog.bind(inputs), {result: inputs[given]})
        assert [a.name for a in chosen.values()] == [f"out[{result!r}]"]
    if script == "gemver":
        assert {"tile", "band", "held", "striped"} <= families and len(kernels) > 2, (families, kernels)


def test_part_of_the_matrix_is_not_its_place():
    """out[B] over A shifted by one row overlaps A without being it: refused, naming both."""
    prog = _compile("gemver")
    inputs = oracle.random_inputs(prog.dag, {"m": 9, "n": 9}, "float32", np.random.default_rng(0))
    room = np.empty(10 * 9, np.float32)
    inputs["A"] = room[:81].reshape(9, 9)
    with pytest.raises(ArgumentError, match="overlaps part of the input 'A'") as caught:
        prog.check_out(prog.bind(inputs), {"B": room[9:].reshape(9, 9)})
    assert caught.value.argument == "out['B']"


def test_a_matrix_another_call_reads_in_the_same_kernel_is_not_overwritten(tmp_path):
    """B = sger(A); q = sgemv(A, p): where one kernel runs both, sgemv reads A beside the update's
    stores (other blocks' rows of A), so B may not be A; where sgemv runs first, it may."""
    script = tmp_path / "ger_gemv.script"
    script.write_text("matrix A[m, n], B[m, n];\nvector u[m], v[n], p[n], q[m];\ninput A, u, v, p;\n"
                      "B = sger(A, u, v);\nq = sgemv(A, p);\nreturn B, q;\n")
    first = _compile(script)
    space = build_space(first.dag, library(), "float32", {"m": 4096, "n": 4096}, DEFAULT)
    seen = set()
    for combination in space.top(20) + space.layouts(20):
        prog = _compile(script, plan=combination.plan)
        kernel_of = {c: k.index for k in prog.kernels for c in k.plan.calls}
        ger, gemv = (c.id for c in prog.dag.calls)
        inputs = oracle.random_inputs(prog.dag, {"m": 9, "n": 9}, "float32", np.random.default_rng(0))
        out = {"B": inputs["A"]}
        if kernel_of[gemv] < kernel_of[ger]:
            prog.check_out(prog.bind(inputs), out)
            seen.add("gemv first")
        else:
            with pytest.raises(ArgumentError, match="which the program still reads"):
                prog.check_out(prog.bind(inputs), out)
            seen.add("together" if kernel_of[gemv] == kernel_of[ger] else "gemv after")
    assert "together" in seen


def test_every_shipped_result_over_an_input_is_taken_exactly_where_it_may_be():
    """Every shipped script, every result over every input of its dimensions: check_out takes it
    where the program's overwrites allow (after the input's last read, or in place), else names
    the input it still reads; and the in-place ones are the updates above."""
    found = set()
    for script in script_names():
        prog = program(script, "float32")
        dag = prog.dag
        allowed = overwrites(prog.generated)
        inputs = oracle.random_inputs(dag, {s: 9 for s in dag.sizes}, "float32", np.random.default_rng(1))
        for output in dag.outputs:
            for given in dag.inputs:
                if dag.value(given).dims != dag.value(output).dims or not dag.value(output).dims:
                    continue
                out = {dag.value(output).name: inputs[dag.value(given).name]}
                if (output, given) in allowed.after_reads | allowed.in_place:
                    assert prog.check_out(prog.bind(inputs), out)
                    if (output, given) in allowed.in_place:
                        found.add((script, dag.value(output).name, dag.value(given).name))
                else:
                    with pytest.raises(ArgumentError, match="still reads"):
                        prog.check_out(prog.bind(inputs), out)
    assert found == {case for case in IN_PLACE if "/" not in case[0]}


def test_the_plan_text_names_the_results_a_caller_may_write_in_place():
    assert "in place: out={'C': A} or out={'C': B}:" in _compile("madd").describe()
    assert "in place" not in _compile("bicgk").describe()


def _bundled_matrix_parameters():
    lib = library()
    return [(f.name, p.name) for f in lib.functions.values() if hasattr(f, "params")
            for p in f.params if p.kind.value == "matrix"]


@pytest.mark.parametrize("function, param", _bundled_matrix_parameters())
def test_pointwise_means_one_entry_of_the_matrix_moves_one_entry_of_the_result(function, param):
    """What reads_pointwise answers from the reference's form, its values show: changing A(i, j)
    (in the triangle the function reads) of a pointwise parameter changes the result at (i, j)
    alone; of a matrix parameter read otherwise (a reduce's), something else."""
    f = library().function(function)
    rng = np.random.default_rng(11)
    n = 6
    env = {p.name: np.asarray(rng.uniform(0.5, 1.5, (n,) * len(p.dims)) if p.dims else 0.7) for p in f.params}
    base = reference_value(f, env)
    moved = dict(env)
    moved[param] = env[param].copy()
    entry = [4, 2] if f.triangle(param) == "tril" else [2, 4]  # in the triangle the function reads
    moved[param][tuple(entry)] += 0.25
    changed = np.argwhere(np.atleast_1d(reference_value(f, moved) != base))
    if reads_pointwise(f, param):
        assert changed.tolist() == [entry], changed.tolist()
    else:
        assert changed.tolist() != [entry], (function, param)
