"""experiments.finish_cost, cluster_finish, finish_tail, spread_finish and second_kernel_finish
rewrite generated CUDA by its text: each variant must find what it rewrites in today's generated
code (or say the program has none),
and the rewritten code must still compile. A change to the finish's emission that the studies no
longer match fails here, on the CPU, instead of on the GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from fusec import compile as fusec_compile
from fusec import nvcc

finish_cost = pytest.importorskip("experiments.finish_cost",
                                  reason="experiments/ is beside the source, not in the wheel")
last_block = pytest.importorskip("experiments.source_runs").last_block

# A tile kernel with two reductions finished across blocks (reproducible: no band atomics),
# and a vector kernel whose dot may run as one block.
SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"
CASES = (("bicgk", {"m": 4096, "n": 4096}), ("axpydot", {"n": 1 << 20}))


def generated(script: str, sizes: dict) -> str:
    return program(script, sizes).source


# BiCGK's plan in the studies (its tuned plan on the H200 at n = 4096), pinned: the one the
# predictor ranks first moves with the model
BICGK = "q=sgemv(registers)+s=sgemtv [256t,1it,64r,rows; q>s, 1 load phase]"


def program(script: str, sizes: dict):
    """The studies' program: its tile kernels' sums by the last block (source_runs.last_block)."""
    plan = None
    if script == "bicgk":
        from fusec.cost.perfdb import predictor_for
        from fusec.frontend import load_script
        from fusec.space.combinations import ALL_LAYOUTS, build_space
        from tests.helpers import library
        dag = load_script(SCRIPTS / "bicgk.script", library())
        space = build_space(dag, library(), "float32", sizes, predictor_for(library(), "h200"))
        (plan,) = {c.plan for c in space.top(ALL_LAYOUTS) if c.plan.summary(dag) == BICGK}
    compiled = fusec_compile(SCRIPTS / f"{script}.script", dtype="float32", sizes=sizes, gpu="h200",
                             reproducible=True, plan=plan)
    return last_block(compiled, "h200")


@pytest.mark.parametrize("script,sizes", CASES)
def test_every_variant_rewrites_what_it_names(script, sizes):
    source = generated(script, sizes)
    assert finish_cost.FINISH in source
    for name in finish_cost.VARIANTS[1:]:
        rewritten = finish_cost.variant(source, name)
        if name in ("columns first", "accumulated", "sums never run") and script == "axpydot":
            assert rewritten is None  # a vector kernel: no grid of tiles, no tile partials
            continue
        assert rewritten is not None and rewritten != source, name
    assert not finish_cost.FENCE.search(finish_cost.variant(source, "no fence"))
    per_warp = finish_cost.variant(source, "fence per warp")
    assert not finish_cost.FENCE.search(per_warp) and "  __threadfence();\n  BARRIER();\n" in per_warp
    assert "fusec_sum_partials<BLOCK>(" not in finish_cost.variant(source, "no sums")
    assert "fusec_sum_partials<BLOCK>(" not in finish_cost.variant(source, "no finish")
    for loads in (8, 32):
        assert f"int LOADS = {loads}, class Emit>" in finish_cost.variant(source, f"{loads} loads in flight")


def test_columns_first_walks_down_each_column_of_tiles():
    rewritten = finish_cost.variant(generated(*CASES[0]), "columns first")
    assert "block_row = fusec_item % grid_rows;" in rewritten
    assert "block_col = fusec_item / grid_rows;" in rewritten and "/ grid_cols;" not in rewritten


def test_the_accumulated_variant_reads_one_partial_and_keeps_it_zero():
    rewritten = finish_cost.variant(generated(*CASES[0]), "accumulated")
    assert rewritten.count("atomicAdd(y + ") == 2  # the rows' and the columns' partial stores
    assert "block_col * TILE_ROWS" not in rewritten and "block_row * TILE_COLS" not in rewritten
    assert rewritten.count("fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * TILE_ROWS, 1, ") == 1
    assert rewritten.count("fusec_sum_partials<BLOCK>(tile_partials - (long long)tile * TILE_COLS, 1, ") == 1
    assert rewritten.count("tile_partials[i] = real(0);  // kept zero") == 2
    assert "fusec_discard<BLOCK>(tile_partials" not in rewritten


@pytest.mark.nvcc
@pytest.mark.parametrize("script,sizes", CASES)
def test_every_variant_compiles(script, sizes):
    source = generated(script, sizes)
    for name in finish_cost.VARIANTS[1:]:
        rewritten = finish_cost.variant(source, name)
        if rewritten is not None:
            nvcc.compile_cubin(rewritten, arch="sm_90", use_cache=False)


def test_sums_never_run_keeps_their_code_behind_a_test_the_compiler_cannot_fold():
    rewritten = finish_cost.variant(generated(*CASES[0]), "sums never run")
    assert rewritten.count("|| backwards >= 0) continue;") == 2  # q's and s's finishes
    assert rewritten.count("fusec_sum_partials<BLOCK>(tile_partials") == 2


cluster_finish = pytest.importorskip("experiments.cluster_finish")
finish_tail = pytest.importorskip("experiments.finish_tail")
spread_finish = pytest.importorskip("experiments.spread_finish")
second_kernel_finish = pytest.importorskip("experiments.second_kernel_finish")


def test_clusters_add_the_column_sums_of_k_blocks_before_one_store():
    source = generated(*CASES[0])  # 64 rows of 64 x 128 tiles, one a block
    rewritten = cluster_finish.clustered(source, 4, 4096, {"k0_sgemv_sgemtv": 64})
    assert "__launch_bounds__(BLOCK, 4) __cluster_dims__(4, 1, 1) k0_sgemv_sgemtv(" in rewritten
    assert "const int block_row = fusec_item / 4 / grid_cols * 4 + fusec_cluster_rank;" in rewritten
    assert "cols_partial_stash(r_v4_s, fusec_stash + " in rewritten and "cols_partial_store(" not in rewritten[
        rewritten.index('extern "C"'):]
    assert "(long long)(block_row / 4) * TILE_COLS" in rewritten  # one partial a cluster
    assert "(fusec_cluster_rank == 0 && fusec_came_last(cnt_v4_s + first_v4_s, got[ITERS], grid_rows / 4))" in rewritten
    assert "TILE_COLS, grid_rows / 4, TILE_COLS," in rewritten  # the last block sums a quarter as many
    assert "fusec_came_last(cnt_v3_q + first_v3_q + it, got[it], grid_cols)" in rewritten  # rows unchanged
    assert cluster_finish.clustered(source, 8, 4096 - 64 * 3) is None  # 61 rows of tiles: no clusters of 8
    assert cluster_finish.clustered(generated("axpydot", {"n": 1 << 20}), 2, 1 << 20) is None


def test_finish_tail_notes_three_times_a_block():
    rewritten = finish_tail.instrumented(generated(*CASES[0]))
    assert rewritten.startswith(finish_tail.TIMER)
    assert rewritten.count("fusec_times[3 * blockIdx.x") == 3
    assert rewritten.index("fusec_t0 = fusec_now()") < rewritten.index("fusec_times[3 * blockIdx.x + 1]") \
        < rewritten.index(finish_cost.FINISH) < rewritten.index("fusec_times[3 * blockIdx.x + 2]")


def test_the_column_sums_spread_over_the_last_blocks_leave_their_tickets():
    source = generated(*CASES[0])
    rewritten = spread_finish.spread(source, 64)
    assert rewritten.startswith(spread_finish.DONE)
    assert "atomicAdd(cnt_v4_s" not in rewritten and "fusec_came_last(cnt_v4_s" not in rewritten
    assert "fusec_came_last(cnt_v3_q + first_v3_q + it, got[it], grid_cols)" in rewritten  # the rows' stay
    assert "finishers = min(total, 64u)" in rewritten and "chunk += min((int)gridDim.x, 64)" in rewritten
    assert rewritten.count("fusec_sum_partials<BLOCK>(") == 2 and "g_v4_s[i] = acc;" in rewritten
    assert spread_finish.spread(generated("axpydot", {"n": 1 << 20}), 64) is None


@pytest.mark.nvcc
def test_each_study_names_its_variants_or_why_a_program_has_none():
    bicgk, axpydot = program(*CASES[0]), program(*CASES[1])
    assert set(finish_cost.sources(bicgk, CASES[0][1])) == set(finish_cost.VARIANTS[1:])
    assert set(cluster_finish.sources(bicgk, CASES[0][1])) == set(cluster_finish.VARIANTS[1:])
    assert set(spread_finish.sources(bicgk, CASES[0][1])) == set(spread_finish.VARIANTS[1:])
    assert cluster_finish.sources(axpydot, CASES[1][1]) == "no tile kernel's column sums to cluster"
    assert spread_finish.sources(axpydot, CASES[1][1]) == "no single tile kernel's column sums"
    striped = fusec_compile(SCRIPTS / "sgemvt.script", dtype="float64", sizes={"m": 8192, "n": 8192}, gpu="h200")
    assert finish_cost.sources(striped, {"m": 8192, "n": 8192}) == "striped: its consumers wait on the finish"


@pytest.mark.nvcc
def test_the_cluster_and_tail_rewrites_compile():
    source = generated(*CASES[0])
    for k in cluster_finish.SIZES:
        compiled = nvcc.compile_cubin(cluster_finish.clustered(source, k, 4096, {"k0_sgemv_sgemtv": 64}),
                                      arch="sm_90", use_cache=False)
        assert compiled.resources["k0_sgemv_sgemtv"].registers <= 64  # the generated kernel's 4 blocks an SM
    for name in finish_tail.VARIANTS:
        nvcc.compile_cubin(finish_tail.instrumented(finish_cost.variant(source, name)), arch="sm_90", use_cache=False)
    for finishers in spread_finish.FINISHERS:
        nvcc.compile_cubin(spread_finish.spread(source, finishers), arch="sm_90", use_cache=False)


def test_the_second_kernel_makes_the_last_blocks_sums_one_block_a_tile():
    bicgk = program(*CASES[0])
    rewritten, finishes = second_kernel_finish.split(bicgk.source, lines=False)
    assert [(f.value, f.arrivals, f.width, f.length) for f in finishes["k0_sgemv_sgemtv"]] == [
        ("v3_q", "grid_cols", "TILE_ROWS", "rows"), ("v4_s", "grid_rows", "TILE_COLS", "cols")]
    first, second = rewritten.split('k0_sgemv_sgemtv_sums(')
    kernels = rewritten[rewritten.index('extern "C"'):]
    assert "atomicAdd(" not in kernels and "__threadfence()" not in kernels  # the launch boundary orders
    assert "fusec_sum_partials<" not in first.split('k0_sgemv_sgemtv(')[1]
    assert second.index("fusec_follow_previous();") < second.index("fusec_sum_partials<BLOCK>(")
    assert second.count("fusec_sum_partials<BLOCK>(") == 2 and "g_v4_s[i] = acc;" in second
    split = second_kernel_finish.two_kernels(bicgk, lines=False, dependent=True)
    sums = split.kernels[1]
    assert [k.name for k in split.kernels] == ["k0_sgemv_sgemtv", "k0_sgemv_sgemtv_sums"]
    assert sums.index == 0 and "direction" not in {a.role for a in sums.args} and not sums.reductions
    macros, sizes = bicgk.kernels[0].macros(), CASES[0][1]
    assert sums.grid(sizes) == 4096 // macros["TILE_ROWS"] + 4096 // macros["TILE_COLS"]
    lines = second_kernel_finish.two_kernels(bicgk, lines=True, dependent=False).kernels[1]
    assert lines.grid(sizes) == 4096 // 32 * 2  # a block per 128-byte line of outputs, of each reduction
    assert second_kernel_finish.sources(program(*CASES[1]), CASES[1][1]) == "no tile kernel's finish"


@pytest.mark.nvcc
def test_the_second_kernel_rewrites_compile():
    source = program(*CASES[0]).source
    for lines in (False, True):
        compiled = nvcc.compile_cubin(second_kernel_finish.split(source, lines)[0], arch="sm_90", use_cache=False)
        assert set(compiled.resources) == {"k0_sgemv_sgemtv", "k0_sgemv_sgemtv_sums"}
