"""The band geometry without a GPU: the library's band implementations, the fusion
rule that lets a sum along the rows feed the same kernel, the band shapes, the
kernels' analysis and code, nvcc on every band kernel of the scripts, and the
runtime's refusal of rows wider than a kernel holds."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
from concurrent.futures import ThreadPoolExecutor

import pytest

from fusec import nvcc
from fusec.cost.analytic import DEFAULT
from fusec.cost.registers import estimate
from fusec.emit.program import generate
from fusec.errors import FusecError, LibraryValidationError, PlanError, RowWidthError
from fusec.families import build_kernel, emit
from fusec.frontend import load_script
from fusec.ir import geometry as geo
from fusec.ir.plan import KernelPlan, ProgramPlan
from fusec.library.loader import load_library
from fusec.library.model import Geometry
from fusec.runtime.program import check_row_widths
from fusec.space.combinations import build_space
from fusec.space.fusions import Fusion, fusions, why_not_fusible
from fusec.space.implementations import MAX_BAND_WORDS, band_shapes, implementations
from tests.helpers import DTYPES, LIBRARY, ROOT, library

NESTED = ("atax", "bicgk", "gemver", "gesummv", "madd", "sgemv", "sgemvt")


def dag_of(script):
    return load_script(ROOT / "scripts" / f"{script}.script", library())


def band_program(script: str, dtype: str, sizes: dict[str, int], rows: int | None = None,
                 ahead: bool | None = None) -> ProgramPlan:
    """The best-predicted combination whose nested kernels are all band kernels
    (of ``rows`` rows at a time, and loading ahead or not, where given): in each
    cover, each kernel's best band option (the best option for vector kernels),
    the cover of least total."""
    dag = dag_of(script)
    space = build_space(dag, library(), dtype, sizes, DEFAULT, horizontal=False, striped=False)

    def wanted(option):
        plan = option[0]
        return plan.geometry is Geometry.VECTOR or (
            plan.geometry is Geometry.BAND and (rows is None or plan.shape.tile_rows == rows)
            and (ahead is None or plan.ahead == ahead))
    best = None
    for cover in space.covers:
        picked = [next((o for o in space.options[slot] if wanted(o)), None) for slot in cover]
        if all(picked) and any(o[0].geometry is Geometry.BAND for o in picked):
            total = sum(o[2] for o in picked)
            if best is None or total < best[0]:
                best = (total, ProgramPlan(tuple(o[0] for o in picked)))
    assert best is not None, f"no band combination for {script} {dtype} {sizes}"
    return best[1]


# -- the library ------------------------------------------------------------------------


def test_every_nested_function_has_a_band_implementation():
    """Except those of one stored triangle (``square A``: strmv, strmtv_strict, ssyr, ssyr2),
    whose loads skip what lies below the diagonal in the tile geometry only (a band of whole
    rows has no load that skips a row's lower part yet)."""
    for function in library().functions.values():
        geometries = {function.geometry_of(i.name) for i in function.implementations}
        if function.square:
            assert geometries == {Geometry.TILE}, function.name
        elif function.hof.nested:
            assert Geometry.BAND in geometries and Geometry.TILE in geometries, function.name
        else:
            assert geometries == {Geometry.VECTOR}, function.name


def _with_metadata(tmp_path, name, old, new):
    copy = tmp_path / "lib"
    shutil.copytree(LIBRARY, copy)
    path = copy / f"{name}.cu"
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return copy, next(i for i, line in enumerate(text.split("\n"), 1) if old in line)


def test_an_implementation_names_no_geometry_but_band(tmp_path):
    copy, line = _with_metadata(tmp_path, "sgemv", "implementation band band", "implementation band tile")
    with pytest.raises(FusecError, match="unknown geometry 'tile'") as info:
        load_library(copy)
    assert info.value.coord.file.endswith("sgemv.cu") and info.value.coord.line == line


def test_a_band_implementation_of_an_unnested_function_is_refused(tmp_path):
    copy = tmp_path / "lib"
    shutil.copytree(LIBRARY, copy)
    path = copy / "saxpy.cu"
    text = path.read_text()
    first = next(line for line in text.split("\n") if line.startswith("load "))
    path.write_text(text.replace(first, "implementation wide band\n" + first, 1))
    with pytest.raises(LibraryValidationError, match="band geometry is for nested functions") as info:
        load_library(copy)
    assert info.value.coord.file.endswith("saxpy.cu")
    assert info.value.coord.line == text.split("\n").index(first) + 1


def test_a_band_routine_takes_no_threads_option(tmp_path):
    copy, line = _with_metadata(
        tmp_path, "sger", "store      B band_store as band", "store      B band_store as band threads 32")
    with pytest.raises(LibraryValidationError, match="band routine runs on every thread") as info:
        load_library(copy)
    assert info.value.coord.line == line


# -- fusion -------------------------------------------------------------------------------


def test_a_row_sum_may_feed_the_same_kernel_in_the_band_geometry_only():
    dag = dag_of("atax")
    both = tuple(c.id for c in dag.calls)
    assert "final result of a reduction" in why_not_fusible(dag, library(), both)
    assert why_not_fusible(dag, library(), both, Geometry.BAND) is None
    assert Fusion(both) in fusions(dag, library())
    plans = implementations(dag, library(), Fusion(both), "float32", sizes=dict(m=4096, n=4096))
    assert plans and all(plan.geometry is Geometry.BAND for plan, _ in plans)
    assert not implementations(dag, library(), Fusion(both), "float32")  # no sizes: no band shapes


def test_a_column_sum_still_needs_a_global_barrier_in_the_band_geometry():
    dag = dag_of("sgemvt")  # x = beta A^T y + z; w = alpha A x: x sums over the rows
    both = tuple(c.id for c in dag.calls)
    assert "final result of a reduction" in why_not_fusible(dag, library(), both, Geometry.BAND)


def test_a_call_without_a_band_implementation_does_not_fuse_in_the_band_geometry(tmp_path):
    copy = tmp_path / "lib"
    shutil.copytree(LIBRARY, copy)
    path = copy / "sgemtv.cu"
    text = path.read_text()
    start = text.index("implementation band band")
    path.write_text(text[:start] + text[text.index("@*/"):])
    lib = load_library(copy)
    dag = load_script(ROOT / "scripts" / "atax.script", lib)
    reason = why_not_fusible(dag, lib, tuple(c.id for c in dag.calls), Geometry.BAND)
    assert "has no band implementation" in reason and "sgemtv" in reason


# -- shapes, analysis, code -------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows,cols", [(16384, 16384), (4096, 4096), (1000, 777), (1, 33)])
def test_band_shapes_cover_a_row_and_fit_their_registers(dtype, rows, cols):
    shapes = band_shapes(rows, cols, dtype, DEFAULT.target.sms)
    assert shapes
    for shape in shapes:
        m = shape.macros(dtype)
        assert m["BAND_COLS"] >= cols > m["BAND_COLS"] - m["BLOCK"] * m["VEC"]  # the fewest pieces
        assert m["BAND_ROWS"] * m["PIECES"] * 4 <= MAX_BAND_WORDS
        grid = -(-rows // (m["BAND_ROWS"] * m["ITERS"]))
        assert grid <= 2 * 132


def test_a_row_sum_is_finished_in_the_block_and_a_column_sum_with_atomics():
    dag = dag_of("bicgk")
    plan = band_program("bicgk", "float32", dict(m=4096, n=4096)).kernels[0]
    kernel = build_kernel(dag, library(), plan, "float32", 0)
    q, s = (dag.call(c).result for c in plan.calls)
    assert [r.value for r in kernel.reductions] == [s]  # q is whole in the block: no partials
    roles = {(a.role, a.value) for a in kernel.args}
    assert ("workspace", s) in roles and ("workspace", q) not in roles and ("out", q) in roles
    assert kernel.zeroed_workspace
    assert kernel.reduction_buffers(kernel.reductions[0], dict(m=4096, n=4096)) == (4096, 1)
    assert "band_cols_partial_store(r_v4_s, ws_v4_s, c);" in emit(kernel, dag, library())
    assert "band_rows_store(r_v3_q, g_v3_q, c);" in emit(kernel, dag, library())
    assert "fusec_last[0] = fusec_came_last(cnt_v4_s, got[0], gridDim.x);" in emit(kernel, dag, library())
    assert "tile_load" not in emit(kernel, dag, library())  # the tile routines beside the band ones stay out


def test_the_last_block_loads_every_column_sum_before_it_stores():
    """The finish's L2 loads stay in order with its stores: one loop of both waited
    for each load in turn, on the launch's critical path. Each thread takes its own
    columns, all loads first."""
    dag = dag_of("bicgk")
    plan = band_program("bicgk", "float32", dict(m=4096, n=4096)).kernels[0]
    source = emit(build_kernel(dag, library(), plan, "float32", 0), dag, library())
    finish = source[source.index("if (fusec_last[0])"):]
    loads, clears = finish.index("__ldcg(ws_v4_s + i)"), finish.index("ws_v4_s[i] = real(0);")
    assert loads < clears
    assert finish.count("__ldcg(") == 1 and "real sums_v4_s[PIECES * VEC];" in finish
    assert finish.count("band_col(s / VEC, c) + s % VEC") == 2  # the thread's own columns, in both


def test_a_row_sum_s_finish_is_applied_where_the_sum_is_whole():
    dag = dag_of("gemver")
    plan = band_program("gemver", "float32", dict(m=1000, n=777))
    sources = generate(dag, library(), plan, "float32").source
    assert re.search(r"if \(i < rows\) r_v\d+_w\[u\] = scale_finish\(acc, v\d+_alpha\);", sources)  # row by row
    assert re.search(r"g_v\d+_x\[i\] = axpby_finish\(acc, v\d+_beta, real\(1\.0\), g_v\d+_z\[i\]\);", sources)


def test_a_band_kernel_whose_rows_would_not_fit_in_registers_is_refused():
    dag = dag_of("atax")
    calls = tuple(c.id for c in dag.calls)
    plan = implementations(dag, library(), Fusion(calls), "float32", sizes=dict(m=4096, n=4096))[0][0]
    wide = dataclasses.replace(plan, shape=geo.Shape(Geometry.BAND, 1024, 4, 2, 8))
    with pytest.raises(PlanError, match="registers per thread"):
        build_kernel(dag, library(), wide, "float32", 0)


def test_a_band_plan_round_trips_through_json():
    plan = band_program("atax", "float64", dict(m=1000, n=777))
    assert ProgramPlan.from_json(plan.to_json()) == plan
    assert '"pieces"' in plan.to_json()
    tile = KernelPlan.from_json({**plan.kernels[0].to_json(), "shape": {"geometry": "tile", "block": 256,
                                                                          "iters": 4, "tile_rows": 32}})
    assert tile.shape.pieces == 0 and '"pieces"' not in ProgramPlan((tile,)).to_json()


def test_rows_wider_than_a_band_kernel_holds_are_refused_naming_it():
    dag = dag_of("atax")
    plan = band_program("atax", "float32", dict(m=1000, n=777))
    kernels = generate(dag, library(), plan, "float32").kernels
    widest = kernels[0].macros()["BAND_COLS"]
    check_row_widths(kernels, dict(m=50000, n=widest))  # more rows are fine
    with pytest.raises(RowWidthError, match=f"{kernels[0].name} holds whole rows of at most {widest} columns"):
        check_row_widths(kernels, dict(m=10, n=widest + 1))


# -- nvcc -----------------------------------------------------------------------------------

MAIN = {"float32": 16384, "float64": 8192}  # the main sizes
NVCC_CASES = [(s, d, n) for s in ("atax", "bicgk", "gemver") for d in DTYPES for n in (4096, MAIN[d])]


@pytest.fixture(scope="module")
def band_cubins():
    programs = {}
    for script, dtype, n in NVCC_CASES:
        dag = dag_of(script)
        for rows in (1, 2):
            try:
                plan = band_program(script, dtype, {s: n for s in dag.sizes}, rows)
            except AssertionError:
                continue  # no shape of two rows at a time fits this width
            programs[script, dtype, n, rows] = generate(dag, library(), plan, dtype)

    def build(source):
        return nvcc.compile_cubin(source, arch="sm_90", use_cache=False)
    with ThreadPoolExecutor(max_workers=2) as pool:
        cubins = dict(zip(programs, pool.map(build, [p.source for p in programs.values()])))
    return programs, cubins


@pytest.mark.nvcc
@pytest.mark.parametrize("script,dtype,n", NVCC_CASES)
def test_nvcc_compiles_every_band_kernel_without_spills(band_cubins, script, dtype, n):
    programs, cubins = band_cubins
    keys = [k for k in programs if k[:3] == (script, dtype, n)]
    assert keys
    for key in keys:
        bands = [k.name for k in programs[key].kernels if k.plan.geometry is Geometry.BAND]
        assert bands, key
        for name in bands:
            r = cubins[key].resources[name]
            assert (r.spill_stores, r.spill_loads, r.stack_bytes) == (0, 0, 0), (key, name, r)


# -- reproducibility ------------------------------------------------------------------------

@pytest.mark.parametrize("script", ["atax", "bicgk", "sgemv", "gesummv"])
def test_a_band_kernel_is_reproducible_unless_it_adds_column_sums_with_atomics(script):
    """Kernel.reproducible and the space's adds_with_atomics agree on every band option:
    a row sum is whole in its block, a column sum is added with atomics."""
    from fusec.space.fusions import adds_with_atomics
    dag = dag_of(script)
    space = build_space(dag, library(), "float32", {s: 4096 for s in dag.sizes}, DEFAULT)
    bands = [(plan, kernel) for options in space.options.values() for plan, kernel, _ in options
             if getattr(plan, "geometry", None) is Geometry.BAND]
    assert bands
    for plan, kernel in bands:
        assert kernel.reproducible == (not adds_with_atomics(dag, library(), plan)), plan
    # ATAX's and BiCGK's gemv-T adds down the columns (alone or fused); gemv sums whole rows
    expected = {True, False} if script in ("atax", "bicgk") else {True}
    assert {kernel.reproducible for _, kernel in bands} == expected


@pytest.mark.parametrize("script", ["atax", "bicgk"])
@pytest.mark.slow
def test_reproducible_leaves_out_the_kernels_that_add_with_atomics(script):
    """fusec.compile(reproducible=True) picks the best plan whose every run gives the same
    bits; without it the predictor may pick a band kernel with column sums."""
    import fusec
    predicted = fusec.compile(ROOT / "scripts" / f"{script}.script", library(), "float32", tuned=False,
                              predictor=DEFAULT)
    kept = fusec.compile(ROOT / "scripts" / f"{script}.script", library(), "float32", tuned=False,
                         predictor=DEFAULT, reproducible=True)
    assert not predicted.generated.reproducible  # ATAX and BiCGK: a band kernel ranks first
    assert kept.generated.reproducible and not kept.generated.plan.uses_band


# -- loads one instance ahead ----------------------------------------------------------------

def test_a_band_kernel_may_load_its_next_instance_ahead():
    """With ``ahead`` the loop's loads of the next instance leave before this
    instance's computes, into a second copy that the estimate of registers counts;
    the plan says so in JSON and in its summary, and only band kernels have it."""
    dag = dag_of("bicgk")
    sizes = {s: 4096 for s in dag.sizes}
    plan = band_program("bicgk", "float32", sizes, ahead=False)
    (kernel_plan,) = plan.kernels
    ahead_plan = dataclasses.replace(kernel_plan, ahead=True)
    again = KernelPlan.from_json(json.loads(json.dumps(ahead_plan.to_json())))
    assert again == ahead_plan and "ahead" not in kernel_plan.to_json()
    assert ",ahead" in ProgramPlan((ahead_plan,)).summary(dag)
    plain = build_kernel(dag, library(), kernel_plan, "float32", 0)
    early = build_kernel(dag, library(), ahead_plan, "float32", 0)
    assert early.loaded_ahead() and set(early.loaded_ahead()) <= {e.value for e in early.elements}
    extra = sum(e.size for e in early.elements if e.value in early.loaded_ahead())
    assert estimate(early) == min(255, estimate(plain) + extra)
    source = emit(early, dag, library())
    body = source[source.index("for (int it = 0;"):]
    for value in early.loaded_ahead():
        var = next(e.var for e in early.elements if e.value == value)
        assert f"real {var}_next[" in source
        assert f"{var}[s] = {var}_next[s];" in body
        # the next instance's load leaves before this instance's first compute
        assert body.index(f"{var}_next, cn);") < body.index("_compute(")
    assert "cn.row0 = c.row0 + BAND_ROWS;" in body
    tile = next(p for p, _ in implementations(dag, library(), Fusion(kernel_plan.calls), "float32")
                if p.geometry is Geometry.TILE)
    with pytest.raises(PlanError, match="only a band kernel loads"):
        build_kernel(dag, library(), dataclasses.replace(tile, ahead=True), "float32", 0)


def test_fusec_compile_reproducible_leaves_them_out_and_the_plan_says_which(capsys, tmp_path):
    from fusec import cli
    args = ["compile", ROOT / "scripts" / "atax.script", "--no-nvcc", "--gpu", "h100", "--size", "n=16384",
            "--no-tuned"]
    assert cli.main([str(a) for a in args + ["-o", tmp_path / "band"]]) == 0
    text = (tmp_path / "band" / "atax.float32.plan.txt").read_text()
    assert "bits: two runs may differ in the last bits (a band kernel adds its column sums" in text
    assert cli.main([str(a) for a in args + ["-o", tmp_path / "kept", "--reproducible"]]) == 0
    text = (tmp_path / "kept" / "atax.float32.plan.txt").read_text()
    assert "bits:" not in text and "band" not in text
    capsys.readouterr()
    for command in ("compile", "run"):
        with pytest.raises(SystemExit):
            cli.main([command, "--help"])
        assert "--reproducible" in capsys.readouterr().out


# -- the column sums' atomics, priced -----------------------------------------------------

def _band_kernel(dtype: str, n: int):
    """BiCGK's best-predicted band kernel (sgemv's row sums, sgemtv's column sums) at n."""
    dag = dag_of("bicgk")
    sizes = {s: n for s in dag.sizes}
    plan = band_program("bicgk", dtype, sizes)
    kernel = next(k for k in generate(dag, library(), plan, dtype).kernels if k.plan.geometry is Geometry.BAND)
    return dag, sizes, kernel


@pytest.mark.parametrize("dtype, adds_per_line", [("float32", 8), ("float64", 16)])
def test_a_band_kernels_column_sum_atomics_queue_at_their_lines_after_the_streaming(dtype, adds_per_line):
    """Every block adds into every 128-byte line of the accumulator as it ends: one add
    per 16-byte piece in fp32 (vector atomics), per element in fp64; one wave's adds
    queue after the streaming, atomic_line_add each. (Measured on the H100: BiCGK fp64
    n = 1024's band plans, 256 blocks, took 16.3-18.4 us where 10.4 was priced.)"""
    from fusec.families.band import band_atomic_seconds, band_seconds
    dag, sizes, kernel = _band_kernel(dtype, 1024)
    grid = kernel.grid(sizes)
    assert kernel.reductions and grid <= 8 * DEFAULT.sms  # one wave
    queued = band_atomic_seconds(DEFAULT, kernel, sizes, slots=10 ** 6)
    assert queued == pytest.approx(grid * adds_per_line * DEFAULT.atomic_line_add)
    with_atomics, without = (band_seconds(DEFAULT, kernel, dag, sizes, DEFAULT.launch, DEFAULT.bandwidth,
                                          DEFAULT.sms, atomics=a) for a in (True, False))
    assert with_atomics - without == pytest.approx(queued)
    # only the last wave's adds wait: earlier waves' overlap the later waves' loads
    assert band_atomic_seconds(DEFAULT, kernel, sizes, slots=grid // 4) == pytest.approx(queued / 4)


def test_a_kernel_without_column_sums_queues_no_atomics():
    from fusec.families.band import band_atomic_seconds
    dag = dag_of("sgemv")
    sizes = {s: 1024 for s in dag.sizes}
    kernel = generate(dag, library(), band_program("sgemv", "float64", sizes), "float64").kernels[0]
    assert kernel.plan.geometry is Geometry.BAND and not kernel.reductions
    assert band_atomic_seconds(DEFAULT, kernel, sizes, slots=10 ** 6) == 0.0


def test_small_fp64_bicgk_is_not_first_priced_as_a_band_kernel():
    """With its atomics priced, BiCGK fp64 n = 1024's first choice is no longer a band
    kernel (measured 16.3-18.4 us against the winner's 7.6, a kernel of tiles)."""
    dag = dag_of("bicgk")
    sizes = {s: 1024 for s in dag.sizes}
    first = build_space(dag, library(), "float64", sizes, DEFAULT).top(1)[0]
    assert all(k.geometry is not Geometry.BAND for k in first.plan.kernels if hasattr(k, "geometry"))


# -- registers: the matrices live at once ------------------------------------------------------

def _gesummv_band_kernels(shape: tuple[int, int, int]):
    """GESUMMV's fused t1 + t2 band kernels at fp32 n = 6000 of one (block, rows, pieces),
    not loading ahead, by load phases."""
    from fusec.space.implementations import load_phases
    dag = dag_of("gesummv")
    sizes = {s: 6000 for s in dag.sizes}
    fused = next(f for f in fusions(dag, library()) if len(f.calls) == 2)
    out = {}
    for plan, kernel in implementations(dag, library(), fused, "float32", sizes=sizes):
        if (plan.geometry is Geometry.BAND and not plan.ahead
                and (plan.shape.block, plan.shape.tile_rows, plan.shape.pieces) == shape):
            out.setdefault(load_phases(plan), (plan, kernel))
    return dag, out


def test_matrices_loaded_in_one_phase_are_all_counted_in_registers():
    """GESUMMV loads A and B: in one phase both are in registers at once (ptxas, fp32
    n = 6000, 512 threads of 3 pieces and 2 rows: 84 registers, 64 estimated when only
    the widest matrix counted; loading ahead too, it spilled 224 bytes at the 128 a
    thread may have), in two phases one at a time (64 registers)."""
    dag, by_phases = _gesummv_band_kernels((512, 2, 3))
    (one_plan, one), (_, two) = by_phases[1], by_phases[2]
    matrix = next(e.size for e in one.elements if e.mapping == "band")
    assert (one.live_band_slots, two.live_band_slots) == (2 * matrix, matrix)
    assert estimate(one) == estimate(two) + matrix  # fp32: a word a slot
    assert estimate(one) >= 84  # what ptxas used
    with pytest.raises(PlanError, match="registers per thread"):  # 136 of 128: it spilled
        build_kernel(dag, library(), dataclasses.replace(one_plan, ahead=True), "float32", 0)


def test_a_computed_matrix_takes_the_registers_of_the_one_it_came_from():
    """GEMVER's B1 = A + u1 v1^T and B = B1 + u2 v2^T, elementwise: one matrix at a time."""
    dag = dag_of("gemver")
    plan = band_program("gemver", "float32", {s: 4096 for s in dag.sizes})
    heavy = next(k for k in generate(dag, library(), plan, "float32").kernels
                 if k.plan.geometry is Geometry.BAND and len(k.plan.calls) == 3)
    sizes = [e.size for e in heavy.elements if e.mapping == "band"]
    assert len(sizes) == 3 and heavy.live_band_slots == max(sizes)  # A, B1, B
