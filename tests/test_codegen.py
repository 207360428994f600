"""Generated CUDA (fusec/codegen) without a GPU: its text, its structure, and nvcc.

Two plans of every script: the one ``fusec.compile`` chooses by default, and
the unfused plan (one kernel per call), whose structure is known by hand. The
structure tests follow the paper's Algorithm 1: invariant loads and clears of
accumulated reductions before the serial loop, per-iteration work inside it,
stores of accumulated reductions after it, then the cross-block finish.
"""

from __future__ import annotations

import dataclasses
import functools
import re
import subprocess
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

import fusec
from fusec import data, nvcc
from fusec.cost.perfdb import predictor_for
from fusec.emit.program import generate
from fusec.errors import CompileError, FusecWarning
from fusec.frontend import load_script
from fusec.ir.barriers import LOOP, POST, PRE
from fusec.ir.plan import HeldPlan, HorizontalPlan, ProgramPlan
from fusec.library.model import Geometry, RoutineKind
from fusec.space import COLS, ROWS, unfused_plan
from fusec.space.combinations import build_space
from tests.helpers import DTYPES, ROOT, library, program, script_names, tile_program

# These tests compile without naming a GPU: where none is present fusec says it predicts with the
# analytic model, as it should, and that is not what they test.
pytestmark = pytest.mark.filterwarnings("ignore:no GPU here and none named:fusec.cost.perfdb.store.PerfdbWarning")

CASES = [(s, d) for s in script_names() for d in DTYPES]
IDS = [f"{s}-{d}" for s, d in CASES]
PLANS = ("default", "unfused")


def path_of(script: str) -> Path:
    return ROOT / "scripts" / f"{script}.script"


@functools.lru_cache(maxsize=None)
def unfused(script: str, dtype: str):
    lib = library()
    plan = unfused_plan(load_script(path_of(script), lib), lib)
    return compile_program(path_of(script), lib, dtype, plan=plan)


def compiled(plan: str, script: str, dtype: str):
    return program(script, dtype) if plan == "default" else unfused(script, dtype)


def kernel_named(prog, function: str):
    (kernel,) = [k for k in prog.kernels if k.name.endswith("_" + function)]
    return kernel


_SOURCES: dict = {}  # kernel -> its CUDA, for every program the tests here compiled


def remembered(make):
    """``make`` (a function returning a program), remembering each kernel's source."""
    @functools.wraps(make)
    def wrapper(*args, **kwargs):
        prog = make(*args, **kwargs)
        _SOURCES.update(zip(prog.generated.kernels, prog.generated.sources))
        return prog
    return wrapper


compile_program = remembered(fusec.compile)
program = remembered(program)
tile_program = remembered(tile_program)


def source_of(kernel) -> str:
    """A kernel's CUDA, as its program printed it."""
    return _SOURCES[kernel]


def routine_of(prog, kernel, step):
    """The library routine a step calls (what the generated comment must name)."""
    function = library().functions[prog.dag.call(step.call).function]
    impl = next(i for i in function.implementations
                if i.name == kernel.plan.implementation_of(step.call))
    if step.kind is RoutineKind.LOAD:
        return impl.load_of(step.param)
    return impl.compute if step.kind is RoutineKind.COMPUTE else impl.store


def body(source: str, kernel) -> str:
    """The kernel function's text, from its signature to the end."""
    start = source.index(f"__launch_bounds__(BLOCK) {kernel.name}(")
    return source[start:source.index("\n}\n", start) + 3]


def split_at_loop(kernel) -> tuple[str, str, str]:
    """Kernel text before the serial loop, inside it, and after it."""
    text = body(source_of(kernel), kernel)
    head, rest = text.split("  for (int it = 0; it < ITERS", 1)
    loop, tail = rest.split("\n  }\n", 1)
    return head, loop, tail


def ops(kernel, section: str) -> list:
    return [op for op in kernel.ops if op.section == section]


def describe_ops(kernel, section: str) -> list[tuple[str, str | None]]:
    """(what, param) of each op in a section: ("clear", None), ("load", "x"), ..."""
    out = []
    for op in ops(kernel, section):
        out.append(("clear", None) if op.step is None else (op.step.kind.value, op.step.param))
    return out


# -- every script, both precisions ------------------------------------------------------


# GEMVER's and GESUMMV's spaces take seconds to search: their cases are in the slow tier
SLOW_SCRIPTS = ("gemver", "gesummv")
TIERED_CASES = [pytest.param(s, d, id=f"{s}-{d}", marks=[pytest.mark.slow] if s in SLOW_SCRIPTS else [])
                for s, d in CASES]


@pytest.mark.parametrize("plan", PLANS)
@pytest.mark.parametrize("script,dtype", TIERED_CASES)
def test_generated_source(script, dtype, plan):
    prog = compiled(plan, script, dtype)
    source, dag = prog.source, prog.dag
    assert f"typedef {'float' if dtype == 'float32' else 'double'} real;" in source
    assert f"// dtype:   {dtype}" in source

    # Every call runs in exactly one kernel, in an order that respects the script.
    calls = [c for k in prog.kernels for c in k.plan.calls]
    assert sorted(calls) == [c.id for c in dag.calls]
    if plan == "unfused":
        assert [k.plan.calls for k in prog.kernels] == [(c.id,) for c in dag.calls]
    kernel_of = {c: k.index for k in prog.kernels for c in k.plan.calls}
    for call in dag.calls:
        assert all(kernel_of[p] <= kernel_of[call.id] for p in dag.predecessors(call.id)), call
    assert [k.index for k in prog.kernels] == list(range(len(prog.kernels)))
    assert len(re.findall(r"__global__", source)) == sum(len(k.function_names) for k in prog.kernels)
    for kernel in prog.kernels:
        bounds = "__launch_bounds__(BLOCK)"
        if isinstance(kernel.plan, HorizontalPlan):  # no register bound, or HFuse's
            bounds = f"__maxnreg__({kernel.plan.bound})" if kernel.plan.bound else "__launch_bounds__(BLOCK, 1)"
        if isinstance(kernel.plan, HeldPlan):  # every block resident: per_sm of them on each SM
            bounds = f"__launch_bounds__(BLOCK, {kernel.plan.per_sm})"
        assert f'extern "C" __global__ void {bounds} {kernel.name}(' in source
        assert source_of(kernel) in source
        # first of all, it waits for the kernel before it (launched while that one runs: support.cuh); one
        # whose sums run apart lets them be launched at its end, not at once
        first = "fusec_wait_previous" if kernel.function_names[1:] else "fusec_follow_previous"
        assert re.search(rf"{kernel.name}\([^)]*\)\n\{{\n  {first}\(\);\n", source), kernel.name
        for later in kernel.function_names[1:]:
            assert re.search(rf"{later}\([^)]*\)\n\{{\n  fusec_follow_previous\(\);\n", source)

    # Comments name each call's script line and the routine behind every step.
    name = Path(dag.file).name
    for kernel in prog.kernels:
        for call in map(dag.call, kernel.plan.calls):
            assert (f"{name}:{call.coord.line}  {dag.value(call.result).label} = {call.function}("
                    in source_of(kernel)), (kernel.name, call)
        for op in kernel.ops:
            if op.step is not None:
                routine = routine_of(prog, kernel, op.step)
                line = dag.call(op.step.call).coord.line
                assert re.search(rf"// {re.escape(name)}:{line} .*\[{routine.name}\]", source_of(kernel)), \
                    (kernel.name, op.step)
                assert f"{routine.name}(" in source_of(kernel)

    # Library code may only synchronise through BARRIER(), which fusec defines once.
    lines = [line for line in source.splitlines() if "__syncthreads" in line]
    assert lines == ["#define BARRIER() __syncthreads()"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_generated_source_is_deterministic(dtype):
    a = compile_program(path_of("gemver"), library(), dtype)
    assert a.source == program("gemver", dtype).source
    assert a.generated.source_hash == program("gemver", dtype).generated.source_hash
    b = compile_program(path_of("gemver"), library(), dtype, plan=unfused("gemver", dtype).generated.plan)
    assert b.source == unfused("gemver", dtype).source


def test_precisions_differ_only_where_they_must():
    f, d = unfused("bicgk", "float32"), unfused("bicgk", "float64")
    assert "#define VEC 4" in f.source and "#define VEC 2" in d.source
    assert "#define TILE_COLS 128" in f.source and "#define TILE_COLS 64" in d.source


# -- nvcc on every script ---------------------------------------------------------------


@pytest.fixture(scope="module")
def cubins():
    """Every plan x script x precision compiled for sm_90, two at a time (CI has 2 cores)."""
    sources = {compiled(*case).source for case in NVCC_CASES}

    def build(source):
        try:
            return nvcc.compile_cubin(source, arch="sm_90", use_cache=False)
        except CompileError as exc:
            return exc
    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(zip(sources, pool.map(build, sources)))


NVCC_CASES = [(plan, s, d) for plan in PLANS for s, d in CASES]


@pytest.mark.nvcc
@pytest.mark.parametrize("plan,script,dtype", NVCC_CASES, ids=[f"{p}-{s}-{d}" for p, s, d in NVCC_CASES])
def test_nvcc_compiles_without_spills(cubins, plan, script, dtype):
    prog = compiled(plan, script, dtype)
    result = cubins[prog.source]
    assert not isinstance(result, Exception), str(result)
    assert result.cubin and not result.cached and result.arch == "sm_90"
    assert set(result.resources) == {f for k in prog.kernels for f in k.function_names}, result.log
    for name, r in result.resources.items():
        assert (r.spill_stores, r.spill_loads, r.stack_bytes) == (0, 0, 0), (name, r)
        assert 0 < r.registers <= 255


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", DTYPES)
def test_each_l2_policy_of_a_vector_kernel_compiles_to_its_cache_hints(dtype, tmp_path):
    """A vector kernel's L2 policy reaches its full chunks' 16-byte accesses: evict-first
    loads are ld.global.cs, streaming stores st.global.cs, plain neither; nvcc compiles
    each without spills."""
    from fusec.ir.plan import L2_NAMES, ProgramPlan
    base = program("waxpby", dtype)
    for l2, name in L2_NAMES.items():
        plan = ProgramPlan(tuple(dataclasses.replace(k, l2=l2) for k in base.generated.plan.kernels))
        prog = compile_program(path_of("waxpby"), library(), dtype, plan=plan)
        assert f"#define STREAM_LOADS {int(name == 'ld.cs')}" in prog.source
        assert f"#define STREAM_STORES {int(name == 'st.cs')}" in prog.source
        source = tmp_path / f"{name}.cu"
        source.write_text(prog.source)
        subprocess.run([nvcc.nvcc_path(), "-ptx", "-arch=sm_90", "-O3", "-std=c++17", str(source),
                        "-o", str(tmp_path / f"{name}.ptx")], check=True, capture_output=True)
        ptx = (tmp_path / f"{name}.ptx").read_text()
        assert ("ld.global.cs.v" in ptx) == (name == "ld.cs")
        assert ("st.global.cs.v" in ptx) == (name == "st.cs")
        for r in nvcc.compile_cubin(prog.source, arch="sm_90", use_cache=False).resources.values():
            assert (r.spill_stores, r.spill_loads, r.stack_bytes) == (0, 0, 0)



@pytest.mark.nvcc
def test_the_kept_blocks_load_plainly_and_the_others_evict_first(tmp_path):
    """The PTX of a kernel with kept blocks has both loads of its tile: ld.global.cs in the
    blocks before the tail, a plain 16-byte load in the tail."""
    prog = tile_program("sgemv", "float32")
    assert prog.kernels[0].keep_blocks
    source = tmp_path / "sgemv.cu"
    source.write_text(prog.source)
    subprocess.run([nvcc.nvcc_path(), "-ptx", "-arch=sm_90", "-O3", "-std=c++17", str(source),
                    "-o", str(tmp_path / "sgemv.ptx")], check=True, capture_output=True)
    ptx = (tmp_path / "sgemv.ptx").read_text()
    rows = prog.kernels[0].macros()["TILE_ROWS"] // prog.kernels[0].macros()["BLOCK_Y"]
    evict_first = len(re.findall(r"ld\.global\.cs\.v4\.f32", ptx))
    plain = len(re.findall(r"ld\.global\.(?:nc\.)?v4\.f32", ptx))
    assert evict_first >= rows and plain >= rows

# -- Algorithm 1 on known cases ---------------------------------------------------------


@pytest.mark.parametrize("script", ["atax", "bicgk"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_sgemv_walks_columns_and_accumulates(script, dtype):
    prog = unfused(script, dtype)
    kernel = kernel_named(prog, "sgemv")
    result = prog.dag.call(kernel.plan.calls[0]).result
    assert kernel.plan.geometry is Geometry.TILE
    assert kernel.plan.serial == COLS and kernel.dims == ("m", "n")
    # Before the loop only the clear of the partial; A and x change with every column tile.
    assert describe_ops(kernel, PRE) == [("clear", None)]
    assert ops(kernel, PRE)[0].clear == result
    assert describe_ops(kernel, LOOP) == [("load", "A"), ("load", "x"), ("compute", None)]
    assert describe_ops(kernel, POST) == [("store", "y")]
    (element,) = [e for e in kernel.elements if e.value == result]
    assert element.reduction and element.accumulated
    assert [(r.value, r.axis) for r in kernel.reductions] == [(result, COLS)]

    head, loop, tail = split_at_loop(kernel)
    assert "along columns (n)" in source_of(kernel)
    assert "c.col0 += TILE_COLS)" in loop.splitlines()[0]
    q = prog.dag.value(result).c_name
    assert f"r_{q}[s] = real(0);" in head
    assert "tile_load(" in loop and "cols_load(" in loop and "gemv_compute(" in loop
    assert "rows_partial_store(" not in head + loop
    # partials go to the region of the block's row tile, the block's slice of it
    assert (f"rows_partial_store(r_{q}, ws_{q} + (long long)(c.row0 / TILE_ROWS)"
            " * fusec_region((long long)grid_cols * TILE_ROWS)"
            " + (long long)block_col * TILE_ROWS - c.row0, c);") in tail


@pytest.mark.parametrize("script", ["atax", "bicgk"])
def test_sgemtv_walks_rows_and_accumulates(script):
    prog = unfused(script, "float32")
    kernel = kernel_named(prog, "sgemtv")
    result = prog.dag.call(kernel.plan.calls[0]).result
    assert kernel.plan.serial == ROWS
    assert describe_ops(kernel, PRE) == [("clear", None)]
    # x is indexed by rows, the axis the loop walks: loaded in every iteration.
    assert describe_ops(kernel, LOOP) == [("load", "A"), ("load", "x"), ("compute", None)]
    assert describe_ops(kernel, POST) == [("store", "y")]
    head, loop, tail = split_at_loop(kernel)
    assert "along rows (m)" in source_of(kernel)
    assert "c.row0 += TILE_ROWS)" in loop.splitlines()[0]
    assert "rows_load(" in loop and "rows_load(" not in head
    s = prog.dag.value(result).c_name
    assert (f"cols_partial_store(r_{s}, ws_{s} + (long long)(c.col0 / TILE_COLS)"
            " * fusec_region((long long)grid_rows * TILE_COLS)"
            " + (long long)block_row * TILE_COLS - c.col0, smem + ") in tail
    # The store sums over the block's warps in shared memory: its scratch is allocated.
    (store,) = ops(kernel, POST)
    assert store.scratch is not None and store.scratch.offset % 4 == 0
    assert kernel.shared_reals >= store.scratch.offset + store.scratch.size


def test_sger_loads_its_column_vector_before_a_row_loop():
    prog = unfused("gemver", "float32")
    for kernel in prog.kernels[:2]:
        assert kernel.name.endswith("_sger") and kernel.plan.serial == ROWS
        # v is indexed by columns: the same for every row tile the block walks.
        assert describe_ops(kernel, PRE) == [("load", "v")]
        assert describe_ops(kernel, LOOP) == [("load", "A"), ("load", "u"), ("compute", None),
                                              ("store", "B")]
        assert ops(kernel, POST) == [] and kernel.reductions == ()
        head, loop, _ = split_at_loop(kernel)
        assert "cols_load(" in head and "cols_load(" not in loop
        assert "rows_load(" in loop and "tile_store(" in loop
        assert "fusec_arrive" not in source_of(kernel) and "__shared__" not in source_of(kernel)


def swapped(script: str, dtype: str = "float32"):
    """The unfused plan with every tile kernel walking the other axis."""
    lib = library()
    prog = unfused(script, dtype)
    plan = prog.generated.plan
    other = {ROWS: COLS, COLS: ROWS, None: None}
    plan = ProgramPlan(tuple(dataclasses.replace(k, serial=other[k.serial]) for k in plan.kernels))
    return compile_program(path_of(script), lib, dtype, plan=plan)


def test_row_loop_hoists_the_column_vector_and_stores_the_reduction_every_iteration():
    prog = swapped("bicgk")
    kernel = kernel_named(prog, "sgemv")
    result = prog.dag.call(kernel.plan.calls[0]).result
    assert kernel.plan.serial == ROWS
    # x (p) is indexed by columns: invariant along a row loop. q sums along the
    # columns, which this block no longer walks: cleared and stored per row tile.
    assert describe_ops(kernel, PRE) == [("load", "x")]
    assert describe_ops(kernel, LOOP) == [("load", "A"), ("clear", None), ("compute", None),
                                          ("store", "y")]
    assert ops(kernel, POST) == []
    (element,) = [e for e in kernel.elements if e.value == result]
    assert element.reduction and not element.accumulated
    head, loop, tail = split_at_loop(kernel)
    assert "cols_load(g_v1_p, r_v1_p, c);" in head and "cols_load(" not in loop
    assert "r_v3_q[s] = real(0);" in loop and "r_v3_q[s] = real(0);" not in head
    assert "rows_partial_store(" in loop and "rows_partial_store(" not in tail
    # The finish visits every output tile this block's row loop touched (by the last block to
    # arrive, without dependent launches), or the sums apart every tile of the grid.
    last_block = kernel_named(without_dependent_launches(prog), "sgemv")
    _, _, tail = split_at_loop(last_block)
    assert "first_v3_q = block_row * ITERS, end_v3_q = min(first_v3_q + ITERS, row_tiles)" in tail
    assert kernel.sums_apart and "if (block < row_tiles * " in source_of(kernel)


def test_column_loop_hoists_the_row_vector():
    kernel = kernel_named(swapped("bicgk"), "sgemtv")
    assert kernel.plan.serial == COLS
    assert describe_ops(kernel, PRE) == [("load", "x")]
    head, loop, _ = split_at_loop(kernel)
    assert "rows_load(g_v2_r, r_v2_r, c);" in head and "rows_load(" not in loop


def test_scratch_reused_every_iteration_is_fenced_by_a_barrier():
    # cols_partial_store writes scratch by (tx, ty), synchronises, then reads it by
    # output column: threads read words others wrote. In a column loop it runs in
    # every iteration, so iteration k+1's writes race with iteration k's reads
    # unless a barrier lies between them.
    kernel = kernel_named(swapped("bicgk"), "sgemtv")
    loop = ops(kernel, LOOP)
    (store,) = [op for op in loop if op.step and op.step.kind is RoutineKind.STORE]
    assert store.scratch is not None
    assert any(op.barrier for op in loop)


def staged_bicgk(serial: str):
    """bicgk unfused, with sgemv staging its tile and vector in shared memory."""
    lib = library()
    if "staged" not in [i.name for i in lib.functions["sgemv"].implementations]:
        pytest.skip("the library has no staged sgemv")
    plan = unfused("bicgk", "float32").generated.plan
    first = dataclasses.replace(plan.kernels[0], implementations=("staged",), serial=serial)
    return compile_program(path_of("bicgk"), lib, "float32", plan=ProgramPlan((first,) + plan.kernels[1:]))


def test_a_kernel_declaring_more_static_shared_memory_than_a_block_may_is_refused():
    """A staged 128x128 tile is 66 KB of shared memory: nvcc would refuse it, so
    the plan is refused first (the space and the perfdb's probes skip it)."""
    from fusec.errors import PlanError
    from fusec.ir.geometry import Shape
    from fusec.lower.kernel import MAX_STATIC_SHARED, build_kernel
    lib = library()
    dag = load_script(path_of("bicgk"), lib)
    plan = unfused("bicgk", "float32").generated.plan
    staged = dataclasses.replace(plan.kernels[0], implementations=("staged",))
    assert build_kernel(dag, lib, staged, "float32", 0)  # the default shape fits
    wide = dataclasses.replace(staged, shape=Shape(Geometry.TILE, 512, 8, 128))
    with pytest.raises(PlanError, match=f"more than a block may declare \\({MAX_STATIC_SHARED} bytes\\)"):
        build_kernel(dag, lib, wide, "float32", 0)


@pytest.mark.parametrize("serial", [COLS, ROWS])
def test_shared_elements_get_barriers_where_mappings_change(serial):
    kernel = kernel_named(staged_bicgk(serial), "sgemv")
    shared = {e.value for e in kernel.elements if e.storage.value == "shared"}
    assert len(shared) == 2  # A and x
    loop = [(op.step.kind.value if op.step else "clear", op.step.param if op.step else None, op.barrier)
            for op in ops(kernel, LOOP)]
    # compute reads A by rows and x whole, written by (tx, ty) and by one warp: rule 1.
    assert ("compute", None, True) in loop
    # The next iteration's load of A overwrites words the last compute read with another
    # mapping: a barrier at the body's start (wrap-around).
    assert loop[0] == ("load", "A", True)
    assert sum(b for _, _, b in loop) == 2
    assert all(not op.barrier for op in ops(kernel, PRE) + ops(kernel, POST))
    # Live at once, A and x do not share words.
    a, x = (e.region for e in kernel.elements if e.value in shared)
    assert not a.overlaps(x) and kernel.shared_reals >= max(a.offset + a.size, x.offset + x.size)
    _, text, _ = split_at_loop(kernel)
    assert text.count("BARRIER();") == 2
    assert re.search(r"BARRIER\(\);\n\s+// \S+ +q = sgemv\(A, p\): compute", text)


@pytest.mark.nvcc
def test_swapped_and_staged_plans_compile():
    functions = {"k0_sgemv", "k0_sgemv_sums", "k1_sgemtv", "k1_sgemtv_sums"}  # each sums apart (sm_90)
    compiled = nvcc.compile_cubin(swapped("bicgk").source, arch="sm_90", use_cache=False)
    assert set(compiled.resources) == functions
    for serial in (COLS, ROWS):
        compiled = nvcc.compile_cubin(staged_bicgk(serial).source, arch="sm_90", use_cache=False)
        assert set(compiled.resources) == functions
        assert compiled.resources["k0_sgemv"].spill_stores == 0


@pytest.mark.parametrize("script,function,var", [("bicgk", "sgemv", "v3_q"), ("bicgk", "sgemtv", "v4_s"),
                                                 ("atax", "sgemtv", "v3_y"), ("axpydot", "sdot", "v5_r")])
def test_reductions_have_workspace_counters_and_a_finish(script, function, var):
    # the last block's finish: a scalar's everywhere, a tile's without dependent launches
    kernel = kernel_named(without_dependent_launches(unfused(script, "float32")), function)
    (reduction,) = kernel.reductions
    roles = {a.role: a for a in kernel.args if a.value == reduction.value}
    assert roles["out"].decl == f"real* __restrict__ g_{var}"
    assert roles["workspace"].decl == f"real* __restrict__ ws_{var}"
    assert roles["counters"].decl == f"unsigned* __restrict__ cnt_{var}"
    text = body(source_of(kernel), kernel)
    finish = text[text.index("// finish "):]
    # after the block's last store, before every finish: the barrier, then thread 0's fence
    barrier = text.rindex("BARRIER();", 0, text.index("__threadfence();"))
    fence = text.index("if (threadIdx.x == 0) __threadfence();")
    assert text.count("__threadfence();") == 1
    assert text.rindex("_store(", 0, text.index("// finish ")) < barrier < fence < text.index("// finish ")
    if kernel.plan.geometry is Geometry.VECTOR:  # a grid of one block: its partial is the sum, no ticket
        alone = text[barrier:fence]
        assert "if (gridDim.x == 1) {" in alone and "} else {" in alone
        assert f"g_{var}[i] = acc; }}(0, ws_{var}[0]);" in alone and "atomicAdd" not in alone
    else:
        assert "gridDim.x == 1" not in text
    # thread 0 takes the ticket after its fence; the tile's sum waits for its answer
    tickets = text[fence:text.index("// finish ")]
    assert f"atomicAdd(cnt_{var}" in tickets and f"fusec_came_last(cnt_{var}" in tickets
    assert "if (!fusec_last[" in finish or "if (fusec_last[0]) {" in finish
    # the summed partials leave L2 without being written back, after the sum's last barrier
    if kernel.plan.geometry is Geometry.TILE:
        assert f"real* const tile_partials = ws_{var} + tile * region;" in finish
        assert "fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * " in finish
        discard = "fusec_discard<BLOCK>(tile_partials, region, threadIdx.x);"
    else:
        # a scalar's partials, a few a thread: 8 in flight, not a tile's 16 (support.cuh)
        assert f"fusec_sum_partials<BLOCK, 0, 8>(ws_{var}, gridDim.x, 1, 0, 1, 1," in finish
        discard = f"fusec_discard<BLOCK>(ws_{var}, fusec_region(gridDim.x), threadIdx.x);"
    assert finish.index("fusec_sum_partials") < finish.index(discard)
    assert f"g_{var}[i] = " in finish
    assert "__shared__ bool fusec_last[1];" in text
    assert kernel.shared_reals >= kernel.macros()["BLOCK"]  # the finish sums in shared memory


def test_a_block_takes_all_its_tickets_before_it_waits_for_any():
    """BiCGK fused, walking the rows: the block accumulates s (one tile) and stores q in
    every iteration (ITERS tiles); thread 0 issues every atomicAdd before the first answer
    is used, and each tile is summed where its ticket came last."""
    (fused,) = tile_program("bicgk", "float32").generated.plan.kernels
    assert fused.calls == (0, 1)
    fused = dataclasses.replace(fused, serial=ROWS, shape=dataclasses.replace(fused.shape, iters=2))
    prog = compile_program(path_of("bicgk"), library(), "float32", plan=ProgramPlan((fused,)))
    (kernel,) = without_dependent_launches(prog).kernels  # the last block's finish
    assert kernel.plan.serial == ROWS and {r.axis for r in kernel.reductions} == {ROWS, COLS}
    text = body(source_of(kernel), kernel)
    assert "__shared__ bool fusec_last[1 + ITERS];" in text
    tickets = text[text.index("__threadfence();"):text.index("// finish ")]
    atomics = [m.start() for m in re.finditer(r"atomicAdd\(", tickets)]
    answers = [m.start() for m in re.finditer(r"fusec_came_last\(", tickets)]
    assert len(atomics) == len(answers) == 2 and max(atomics) < min(answers)
    # slots in the order of the kernel's reductions: q's ITERS tiles, s's one tile, or the reverse
    q_first = [prog.dag.value(r.value).c_name for r in kernel.reductions] == ["v3_q", "v4_s"]
    q_at, s_at = ("", "ITERS") if q_first else ("1", "")
    assert f"got[{s_at or 0}] = atomicAdd(cnt_v4_s + first_v4_s, 1u);" in tickets
    assert (f"got[{q_at + ' + ' if q_at else ''}it] = first_v3_q + it < end_v3_q"
            " ? atomicAdd(cnt_v3_q + first_v3_q + it, 1u) : 0u;" in tickets)
    assert f"if (!fusec_last[{s_at + ' + ' if s_at else ''}tile - first_v4_s]) continue;" in text
    assert f"if (!fusec_last[{q_at + ' + ' if q_at else ''}tile - first_v3_q]) continue;" in text
    assert text.count("BARRIER();") == text[:text.index("__threadfence();")].count("BARRIER();") + 1


def without_dependent_launches(prog):
    """``prog`` generated for the reference GPU as if it had no dependent launches (an A100's
    compute capability): its tile kernels' sums made by the last block to arrive."""
    target = dataclasses.replace(fusec.target.reference(), compute_capability="8.0")
    generated = generate(prog.dag, prog.generated.library, prog.generated.plan, prog.generated.dtype, target)
    _SOURCES.update(zip(generated.kernels, generated.sources))
    return generated


@pytest.mark.parametrize("dtype", DTYPES)
def test_a_tile_kernel_alone_sums_its_tiles_apart_where_the_gpu_launches_dependents(dtype):
    """BiCGK fused in one tile kernel (reference GPU: sm_90): its blocks store their partials
    and end, no ticket, no fence; a second function, launched after it with its arguments,
    sums each 128-byte line of every output tile over all the blocks' partials."""
    prog = tile_program("bicgk", dtype)
    (kernel,) = prog.kernels
    assert kernel.plan.geometry is Geometry.TILE and kernel.sums_apart
    assert kernel.function_names == (kernel.name, f"{kernel.name}_sums")
    source = source_of(kernel)
    text, sums = body(source, kernel), source[source.index(f"{kernel.name}_sums("):]
    for absent in ("atomicAdd(", "__threadfence()", "fusec_sum_partials", "fusec_last", "fusec_follow_previous"):
        assert absent not in text, absent
    assert text.index("fusec_wait_previous();") < text.rindex("_partial_store(") < text.index("fusec_release_next();")
    assert source.index(text) < source.index(sums) < source.index("#undef BLOCK")  # in the kernel's macros
    assert sums.index("fusec_follow_previous();") < sums.index("fusec_sum_partials<BLOCK>(")
    line = 128 // (4 if dtype == "float32" else 8)
    macros, sizes = kernel.macros(), {"m": 1000, "n": 3000}
    blocks = 0
    for reduction in kernel.reductions:
        var = prog.dag.value(reduction.value).c_name
        width, chunk = kernel.sums_chunk(reduction)
        assert width == macros["TILE_ROWS" if reduction.axis == COLS else "TILE_COLS"]
        assert chunk == (line if width > line else width) and width % chunk == 0
        tiles = "row_tiles" if reduction.axis == COLS else "col_tiles"
        assert f"if (block < {tiles} * {width // chunk}) {{" in sums
        assert f"(long long)tile * {'TILE_ROWS' if reduction.axis == COLS else 'TILE_COLS'} + first, {chunk}," in sums
        assert f"g_{var}[i] = acc;" in sums
        blocks += -(-sizes["m" if reduction.axis == COLS else "n"] // width) * (width // chunk)
    assert kernel.launches(sizes) == ((kernel.name, kernel.grid(sizes)), (kernel.sums_name, blocks))
    assert "fusec_discard_line_each<BLOCK>(tile_partials + first," in sums or "fusec_discard<BLOCK>(" in sums
    # without dependent launches the last block to arrive at a tile sums it, as before
    (last_block,) = without_dependent_launches(prog).kernels
    assert not last_block.sums_apart and last_block.function_names == (last_block.name,)
    assert "fusec_came_last(" in source_of(last_block) and "_sums(" not in source_of(last_block)


def test_only_a_tile_kernel_alone_with_tiles_to_sum_sums_apart():
    """A scalar's sum stays with the last block (which may be the grid's only one); so do the
    finishes of a striped kernel's parts, whose consumers wait on them."""
    assert not kernel_named(unfused("axpydot", "float32"), "sdot").sums_apart
    striped = compile_program(path_of("sgemvt"), library(), "float64", sizes={"m": 8192, "n": 8192}, gpu="h200")
    (kernel,) = striped.kernels
    assert kernel.plan.family == "striped" and len(kernel.leaves()) == 2
    assert not any(part.sums_apart for part in kernel.leaves()) and "_sums(" not in striped.source
    assert kernel.function_names == (kernel.name,)


def test_vector_reduction_finish_counts_every_block():
    kernel = kernel_named(unfused("axpydot", "float32"), "sdot")
    assert kernel.plan.geometry is Geometry.VECTOR
    assert [r.axis for r in kernel.reductions] == [None]
    assert describe_ops(kernel, PRE) == [("clear", None)]
    assert describe_ops(kernel, POST) == [("store", "r")]
    assert "got[0] = atomicAdd(cnt_v5_r, 1u);" in source_of(kernel)
    assert "fusec_last[0] = fusec_came_last(cnt_v5_r, got[0], gridDim.x);" in source_of(kernel)
    assert "if (fusec_last[0]) {" in source_of(kernel)
    # a block's partial goes to its work item's slot, whichever way the launch walks
    assert "partial_store(r_v5_r, ws_v5_r + fusec_item, smem + 0, c);" in source_of(kernel)


def test_maps_have_no_finish_and_no_workspace():
    for script in ("vadd", "waxpby", "madd", "sscal"):
        for kernel in unfused(script, "float32").kernels:
            assert kernel.reductions == ()
            assert not {"workspace", "counters"} & {a.role for a in kernel.args}
            assert "atomicAdd" not in source_of(kernel) and kernel.shared_reals == 0


def test_kernel_arguments_in_order():
    kernel = kernel_named(unfused("sgemv", "float64"), "sgemv_ab")
    assert [(a.role, a.decl) for a in kernel.args] == [
        ("in", "const real* __restrict__ g_v0_A"),
        ("in", "const real* __restrict__ g_v1_x"),
        ("in", "const real* __restrict__ g_v2_y"),
        ("out", "real* __restrict__ g_v5_z"),
        ("workspace", "real* __restrict__ ws_v5_z"),
        ("counters", "unsigned* __restrict__ cnt_v5_z"),
        ("scalar", "const real v3_alpha"),
        ("scalar", "const real v4_beta"),
        ("size", "const int rows"),
        ("size", "const int cols"),
        ("aligned", "const int aligned"),
        ("direction", "const int backwards"),
    ]


def test_kernels_that_touch_a_matrix_in_common_take_turns_together():
    from fusec.runtime.program import turn_groups
    assert turn_groups(unfused("atax", "float32").generated) == (0, 0)  # both walk A
    assert turn_groups(unfused("bicgk", "float32").generated) == (0, 0)
    # t1 = A x, t2 = B x, y = alpha t1 + beta t2: no matrix in common
    assert turn_groups(unfused("gesummv", "float32").generated) == (0, 1, 2)
    assert turn_groups(unfused("vadd", "float32").generated) == (0, 0)  # t is shared, no matrix
    gemver = unfused("gemver", "float64").generated
    assert turn_groups(gemver) == (0,) * len(gemver.kernels)  # B1, then B, passes through all


def test_kernels_alone_take_their_items_in_the_direction_the_launch_says():
    from fusec.runtime.program import Program
    for script, dtype in (("bicgk", "float32"), ("axpydot", "float64"), ("vadd", "float32")):
        prog = unfused(script, dtype)
        turning = "order    forwards and backwards through the grid on alternate launches"
        assert prog.describe().count(turning) == len(prog.kernels)
        assert Program(prog.generated, turning=False).describe().count("order    forwards through the grid\n")\
            == len(prog.kernels)
        with pytest.raises(TypeError, match="turning must be True or False, not 'no'"):
            Program(prog.generated, turning="no")
        with pytest.raises(AttributeError):  # prepared calls take it in: fixed once made
            prog.turning = False
        for kernel in prog.kernels:
            assert kernel.turns and kernel.args[-1].role == "direction"
            text = body(source_of(kernel), kernel).split("using namespace", 1)[1]  # its sums apart: not
            assert ("const int fusec_item = backwards ? (int)(gridDim.x - 1 - blockIdx.x)"
                    " : (int)blockIdx.x;") in text
            # every use of the block's index goes through the item but the item's own line
            assert text.count("blockIdx.x") == 2
            assert ("const int block_row = fusec_item / grid_cols;" in text if kernel.dims[1:]
                    else "long long base = (long long)fusec_item * ITERS * chunk;" in text)



def test_a_turning_kernel_that_streams_its_matrices_loads_its_last_blocks_plainly():
    """Kernel.keep_blocks: the blocks that run last load about keep_l2_bytes(target) of the matrices
    plainly (the next launch starts on their tiles). The count follows from the bytes of
    matrix a block loads (GESUMMV's fused kernel loads two); the kernel's namespace declares
    its own fusec_load16, which the library's tile_load there calls. Kernels that store a
    matrix (GEMVER's sger) and vector kernels keep the kernel's policy in every block."""
    from fusec.emit.kernel import emit_kernel
    from fusec.lower.kernel import build_kernel, keep_l2_bytes
    from fusec.space.fusions import Fusion
    from fusec.space.implementations import implementations
    from fusec.target import reference
    gesummv = load_script(path_of("gesummv"), library())
    plan, _ = implementations(gesummv, library(), Fusion((0, 1)), "float32")[0]
    both = build_kernel(gesummv, library(), plan, "float32", 0, turns=True)  # t1 = A x, t2 = B x: loads A and B
    _SOURCES[both] = emit_kernel(both, gesummv, library())
    for kernel, dtype, matrices in ((tile_program("bicgk", "float32").kernels[0], "float32", 1),  # A once, for both
                                    (tile_program("sgemv", "float64").kernels[0], "float64", 1), (both, "float32", 2)):
        m, itemsize = kernel.macros(), 4 if dtype == "float32" else 8
        per_block = matrices * m["TILE_ROWS"] * m["TILE_COLS"] * m["ITERS"] * itemsize
        assert kernel.turns and kernel.stream_matrices
        assert kernel.keep_blocks == keep_l2_bytes(reference()) // per_block > 0, kernel.name
        namespace = source_of(kernel).split("using namespace", 1)[0]
        for load, kind in (("fusec_load16", "fusec_vec"), ("fusec_load1", "real")):  # rows on and off 16 bytes
            assert (f"if (EVICT_FIRST && blockIdx.x + {kernel.keep_blocks}u >= gridDim.x)"
                    f" return ::{load}<false>(p);") in namespace
            assert namespace.index(f"__device__ __forceinline__ {kind} {load}(") < namespace.index("tile_load(")
    for script in ("gemver", "madd", "vadd", "waxpby"):
        for kernel in unfused(script, "float32").kernels:
            if not kernel.stream_matrices:
                assert kernel.keep_blocks == 0 and "::fusec_load16<false>" not in source_of(kernel), script
    assert any(k.keep_blocks for k in unfused("gemver", "float32").kernels)  # w = alpha B x streams B

# -- launch arithmetic ------------------------------------------------------------------

# bicgk, m=1000, n=500, tiles 32 x TILE_COLS (128 float, 64 double), ITERS = 8:
#   row tiles ceil(1000/32) = 32; column tiles ceil(500/128) = 4 or ceil(500/64) = 8.
#   sgemv walks columns: 32 x ceil(col tiles/8) = 32 x 1 blocks; partials: a region per
#     row tile of 1 block column x 32 rows, in whole 128-byte lines (32 reals: 128 or
#     256 bytes); counters one per row tile.
#   sgemtv walks rows: ceil(32/8) = 4 x col tiles blocks; partials: a region per column
#     tile of 4 block rows x TILE_COLS (2048 bytes either way); counters one per column tile.
BICGK = {"m": 1000, "n": 500}
BICGK_LAUNCH = {
    ("float32", "sgemv"): ((32, 1), 32, (32 * 32, 32)),
    ("float32", "sgemtv"): ((4, 4), 16, (4 * 4 * 128, 4)),
    ("float64", "sgemv"): ((32, 1), 32, (32 * 32, 32)),
    ("float64", "sgemtv"): ((4, 8), 32, (8 * 4 * 64, 8)),
}


@pytest.mark.parametrize("dtype,function", sorted(BICGK_LAUNCH))
def test_tile_kernel_launch(dtype, function):
    extent, blocks, buffers = BICGK_LAUNCH[(dtype, function)]
    kernel = kernel_named(unfused("bicgk", dtype), function)
    assert kernel.grid_extent(BICGK) == extent
    assert kernel.grid(BICGK) == blocks
    (reduction,) = kernel.reductions
    assert kernel.reduction_buffers(reduction, BICGK) == buffers


def test_tile_kernel_launch_walking_the_other_axis():
    # sgemv walking rows: ceil(32/8) = 4 x 4 blocks; q sums along columns it does not
    # walk: per row tile (32 of them, a counter each) 4 block columns x 32 rows.
    prog = swapped("bicgk")
    sgemv, sgemtv = kernel_named(prog, "sgemv"), kernel_named(prog, "sgemtv")
    assert sgemv.grid(BICGK) == 16
    assert sgemv.reduction_buffers(sgemv.reductions[0], BICGK) == (32 * 4 * 32, 32)
    assert sgemv.reduction_tiles(sgemv.reductions[0], BICGK) == (32, 4, 32)
    # sgemtv walking columns: 32 x ceil(4/8) = 32 blocks; per column tile 32 block rows x 128.
    assert sgemtv.grid(BICGK) == 32
    assert sgemtv.reduction_buffers(sgemtv.reductions[0], BICGK) == (4 * 32 * 128, 4)


@pytest.mark.parametrize("dtype,blocks,partials", [("float32", 245, 256), ("float64", 489, 496)])
def test_vector_kernel_launch(dtype, blocks, partials):
    # n = 10**6 in chunks of BLOCK*VEC = 1024 (float) or 512 (double) values:
    # 977 or 1954 chunks, ITERS = 4 per block. One partial per block, in whole
    # 128-byte lines: 980 bytes -> 1024 (256 floats), 3912 -> 3968 (496 doubles).
    kernel = kernel_named(unfused("axpydot", dtype), "sdot")
    sizes = {"n": 10 ** 6}
    assert kernel.grid_extent(sizes) == (blocks, 1)
    assert kernel.grid(sizes) == blocks
    assert kernel.reduction_buffers(kernel.reductions[0], sizes) == (partials, 1)


@pytest.mark.parametrize("n,blocks", [(1, 1), (1024, 1), (4096, 1), (4097, 2), (8192, 2)])
def test_vector_kernel_launch_edges(n, blocks):
    # One block covers ITERS * BLOCK * VEC = 4 * 256 * 4 = 4096 values.
    kernel = unfused("vadd", "float32").kernels[0]
    assert kernel.grid({"n": n}) == blocks


# -- nvcc: cache, resource report, errors ------------------------------------------------

TINY = 'extern "C" __global__ void fusec_tiny(float* x) { x[threadIdx.x] += 1.0f; }\n'


@pytest.fixture
def cache(tmp_path, monkeypatch):
    folder = tmp_path / "cache"
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(folder))
    return folder / "nvcc"


def cached_files(folder: Path) -> list[Path]:
    return sorted(p for p in folder.iterdir() if not p.name.startswith(".")) if folder.exists() else []


@pytest.mark.nvcc
def test_second_compile_is_cached(cache):
    first = nvcc.compile_cubin(TINY, arch="sm_90")
    second = nvcc.compile_cubin(TINY, arch="sm_90")
    assert (first.cached, second.cached) == (False, True)
    assert first.cubin == second.cubin and first.resources == second.resources
    assert set(second.resources) == {"fusec_tiny"}
    assert sorted(p.suffix for p in cached_files(cache)) == [".cubin", ".log"]
    # Another target is another key.
    assert nvcc.compile_cubin(TINY, arch="sm_80").cached is False


@pytest.mark.nvcc
def test_compile_without_cache_writes_nothing(cache):
    assert nvcc.compile_cubin(TINY, arch="sm_90", use_cache=False).cached is False
    assert cached_files(cache) == []
    assert nvcc.compile_cubin(TINY, arch="sm_90").cached is False


@pytest.mark.nvcc
def test_absent_log_is_a_miss(cache):
    nvcc.compile_cubin(TINY, arch="sm_90")
    (log,) = [p for p in cached_files(cache) if p.suffix == ".log"]
    log.unlink()
    again = nvcc.compile_cubin(TINY, arch="sm_90")
    assert again.cached is False and set(again.resources) == {"fusec_tiny"}
    assert log.is_file()  # written back
    assert nvcc.compile_cubin(TINY, arch="sm_90").cached is True


@pytest.mark.nvcc
def test_undecodable_log_is_a_miss(cache):
    nvcc.compile_cubin(TINY, arch="sm_90")
    (log,) = [p for p in cached_files(cache) if p.suffix == ".log"]
    log.write_bytes(b"\xff\xfe\x00 not a ptxas log \x80\x81")
    with pytest.warns(FusecWarning, match="damaged entry of the nvcc cache"):
        again = nvcc.compile_cubin(TINY, arch="sm_90")
    assert again.cached is False and set(again.resources) == {"fusec_tiny"}


@pytest.mark.nvcc
@pytest.mark.parametrize("text", ["", "garbage\n"], ids=["empty", "garbage"])
def test_unparsable_log_is_a_miss(cache, text):
    nvcc.compile_cubin(TINY, arch="sm_90")
    (log,) = [p for p in cached_files(cache) if p.suffix == ".log"]
    log.write_text(text)
    with pytest.warns(FusecWarning, match="damaged entry of the nvcc cache"):
        again = nvcc.compile_cubin(TINY, arch="sm_90")
    assert again.cached is False and set(again.resources) == {"fusec_tiny"}


SAMPLE_LOG = """\
/tmp/fusec-nvcc-x/program.cu(256): warning #177-D: variable "row_tiles" was declared but never referenced
ptxas info    : 0 bytes gmem
ptxas info    : Function properties for helper_not_a_kernel
    16 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Compiling entry function 'k1_sgemtv' for 'sm_90'
ptxas info    : Function properties for k1_sgemtv
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 38 registers, used 1 barriers, 4100 bytes smem
ptxas info    : Compile time = 26.305 ms
ptxas info    : Compiling entry function 'k0_sger' for 'sm_90'
ptxas info    : Function properties for k0_sger
    8 bytes stack frame, 12 bytes spill stores, 20 bytes spill loads
ptxas info    : Used 255 registers, used 0 barriers
ptxas info    : Compiling entry function 'k2_old' for 'sm_80'
ptxas info    : Function properties for k2_old
    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 32 registers, 4096 bytes smem, 400 bytes cmem[0]
"""


def test_parse_resources():
    resources = nvcc.parse_resources(SAMPLE_LOG)
    assert resources == {
        "k1_sgemtv": nvcc.Resources(registers=38, shared_bytes=4100, stack_bytes=0,
                                    spill_stores=0, spill_loads=0),
        "k0_sger": nvcc.Resources(registers=255, shared_bytes=0, stack_bytes=8,
                                  spill_stores=12, spill_loads=20),
        "k2_old": nvcc.Resources(registers=32, shared_bytes=4096, stack_bytes=0,
                                 spill_stores=0, spill_loads=0),
    }
    assert nvcc.parse_resources("") == {}


@pytest.mark.parametrize("arch", ["sm90", "90", "compute_90", "sm_", "sm_90 -G", "sm_90;true", ""])
def test_bad_arch_is_a_compile_error(arch):
    with pytest.raises(CompileError, match="bad architecture"):
        nvcc.compile_cubin(TINY, arch=arch)


@pytest.mark.parametrize("arch", ["sm_75", "sm_70", "sm_8", "sm_61"])
def test_an_arch_older_than_sm_80_is_a_compile_error_before_nvcc(arch, monkeypatch):
    """The kernels use PTX that sm_80 brought (discard.global.L2): ptxas would fail on every
    use, a screen of errors; the check names the floor instead, with nvcc on PATH or not."""
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: pytest.fail("nvcc was looked for"))
    with pytest.raises(CompileError, match=f"architecture '{arch}': fusec's kernels need sm_80 or later"):
        nvcc.compile_cubin(TINY, arch=arch)


@pytest.mark.parametrize("arch", ["sm_80", "sm_86", "sm_90a", "sm_100", "sm_120"])
def test_an_arch_of_sm_80_or_later_is_taken(arch):
    nvcc.check_arch(arch)


@pytest.mark.nvcc
def test_nvcc_failure_is_a_compile_error_with_the_log(cache):
    broken = TINY + '\nextern "C" __global__ void broken(float* x) { x[0] = undefined_name; }\n'
    with pytest.raises(CompileError) as info:
        nvcc.compile_cubin(broken, arch="sm_90")
    message = str(info.value)
    assert "nvcc failed" in message and "sm_90" in message
    assert "undefined_name" in message and "error" in message
    assert cached_files(cache) == []  # nothing cached for a failure


def test_a_one_block_grid_writes_its_sums_in_a_part_of_a_horizontal_fusion_too():
    """CG's horizontal fusions at n = 1024 (a dot beside the gemv, or beside the residual's
    update): a vector part works out its own grid, and one of a single block writes its partial
    as the sum on its own threads, its tickets in the else."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        dag = load_script(data.SOLVERS / "cg.script", library())
        space = build_space(dag, library(), "float32", {"n": 1024}, predictor_for(library(), "h200"))
    plan = next(c.plan for c in space.ranked() if any(k.family == "horizontal" for k in c.plan.kernels))
    source = generate(dag, library(), plan, "float32").source
    checked = 0
    for part in re.findall(r"namespace (k\d+p\d+_\w+) \{", source):
        body = source[source.index(f"namespace {part} {{"):source.index(f"}}  // namespace {part}")]
        if "// finish " not in body or "fusec_chunk c;" not in body:  # no reduction, or a tile part's
            continue
        alone = body[body.index("if (part_grid == 1) {"):body.index("__threadfence();")]
        assert "if (tid == 0) {" in alone and "(0, ws_" in alone and "} else {" in alone
        assert "atomicAdd" not in alone
        checked += 1
    assert checked >= 1
