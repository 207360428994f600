"""The body of a band kernel: nested functions' band implementations, whole rows per block.

A block walks ITERS instances of BAND_ROWS whole rows (block b: rows from
``b * ITERS * BAND_ROWS``); thread t holds the 16-byte pieces ``j * BLOCK + t``
of every row (``fusec/data/blas/band.cuh``). The analysis is the tile geometry's
with the serial loop along the rows (:func:`~fusec.lower.kernel.build_kernel`):
vectors indexed by column are loaded once before the loop, column sums
accumulate over it. What differs is in two places:

- a sum along the rows (sgemv's) is whole inside the block once its compute
  has met the block's warps: its finish epilogue is applied right there, row
  by row, and a later call of the kernel may read it (ATAX's ``t`` feeds
  ``y = A^T t`` in the same pass over A; :func:`~fusec.space.fusions.why_not_fusible`);
- a sum along the columns (sgemtv's) is added once per block into one
  accumulator with vector atomics (its store), and the last block to arrive
  writes the finished outputs and clears the accumulator for the next launch.
"""

from __future__ import annotations

import dataclasses

from ..errors import PlanError
from ..ir.barriers import LOOP, POST, PRE
from ..ir.dag import Dag
from ..ir.kernel import Kernel, Threads
from ..ir.steps import function_of
from ..library.model import Library, RoutineKind
from ..lower.kernel import whole_in_block
from .ops import emit_loop_ops, emit_op, finish_expression
from .scalars import emit_scalars
from .writer import CudaWriter

FULL = "c.full = c.vec_ok && cols == BAND_COLS && c.row0 + BAND_ROWS <= rows;"


def emit_band_body(w: CudaWriter, kernel: Kernel, dag: Dag, library: Library, threads: Threads, by_value,
                   hold=None) -> None:
    """Indices, the loop over the block's rows, the column sums' finish (after the
    memory declarations, which are the tile geometry's). ``hold``: a held
    kernel's part (:mod:`.held`) keeps or takes its held instances of rows."""
    if threads.part:
        raise PlanError("a band kernel runs alone (not as a part of a horizontal fusion)")
    w("// indices: each block walks ITERS instances of BAND_ROWS whole rows; thread t holds")
    w("// the 16-byte pieces j*BLOCK + t of each row")
    w("fusec_band c;")
    w(f"c.t = {threads.tid};")
    w("c.rows = rows;")
    w("c.cols = cols;")
    w("c.aligned = aligned;")
    w("c.vec_ok = aligned && cols % VEC == 0;")
    w(f"c.row0 = {threads.item} * (ITERS * BAND_ROWS);")
    w(FULL + "  // no guards needed in this instance")
    if kernel.sums_after_barrier:
        w("// the column sums go to this launch's half of their accumulators (held.py: finish_after)")
        w("const long long fusec_half = (long long)(launch_round & 1) * fusec_region(cols);")
    pre = [op for op in kernel.ops if op.section == PRE]
    loop = [op for op in kernel.ops if op.section == LOOP]
    post = [op for op in kernel.ops if op.section == POST]
    if pre:
        w()
        w("// before the loop: invariant loads, clears of accumulated reductions")
        for op in pre:
            if op.step is not None and op.step.kind is RoutineKind.LOAD and op.value in kernel.given:
                e = by_value[op.value]
                w(f"// {dag.value(op.value).label}: finished after the barrier by this thread, not loaded")
                w("#pragma unroll")
                w(f"for (int s = 0; s < {e.size_expr}; ++s) {e.var}[s] = given_{dag.value(op.value).c_name}[s];")
                continue
            emit_op(w, op, kernel, dag, library, by_value, threads=threads)
    ahead = kernel.loaded_ahead() if kernel.plan.ahead else ()
    loads = [op for op in loop if op.step is not None and op.step.kind is RoutineKind.LOAD and op.value in ahead]
    if loads:
        _emit_first_loads(w, loads, kernel, dag, library, by_value, threads, hold)

    def finish_rows(op) -> None:
        if op.step is not None and op.step.kind is RoutineKind.COMPUTE:
            _emit_row_finish(w, op.step.call, kernel, dag, library, by_value)

    def body(hold) -> None:
        w(FULL)
        if loads:
            _emit_loads_ahead(w, loads, kernel, dag, library, by_value, threads, hold)
        emit_loop_ops(w, [op for op in loop if op not in loads], kernel, dag, library, by_value, threads, hold,
                      after=finish_rows)

    w()
    if hold is not None and hold.unrolled:
        # Only the iterations holding registers are unrolled (`it` a constant in each copy
        # indexes them); the rest stay one rolled copy: unrolled whole, the loop waited on
        # instruction fetch (docs/design/kernel-families.md).
        # `continue`, not `break`: with an exit of its own nvcc left a loop with a block
        # barrier rolled (the consumer's, 1 row of 4 pieces), its held registers on the stack
        w(f"// the first {hold.registers} instances, held in registers: unrolled")
        w("#pragma unroll")
        w.open(f"for (int it = 0; it < {hold.registers}; ++it, c.row0 += BAND_ROWS)")
        w("if (c.row0 >= rows) continue;")
        body(hold)
        w.close()
        w("// the others")
        w.open(f"for (int it = {hold.registers}; it < ITERS && c.row0 < rows; ++it, c.row0 += BAND_ROWS)")
        body(dataclasses.replace(hold, registers_here=False))
        w.close()
    else:
        w.open("for (int it = 0; it < ITERS && c.row0 < rows; ++it, c.row0 += BAND_ROWS)")
        body(hold)
        w.close()
    if post:
        w()
        w("// after the loop: the block's column sums, into their accumulators")
        for op in post:
            emit_op(w, op, kernel, dag, library, by_value, threads=threads)
    if kernel.reductions and kernel.sums_after_barrier:
        _emit_clear_other_halves(w, kernel, dag, threads)
    elif kernel.reductions:
        _emit_column_finishes(w, kernel, dag, library, threads)


def _emit_clear_other_halves(w: CudaWriter, kernel: Kernel, dag: Dag, threads: Threads) -> None:
    """One block clears the halves the launch before read after its barrier: the
    launch after adds into them."""
    w()
    w("// the other halves, read after the barrier by the launch before, cleared for the launch after")
    w.open(f"if ({threads.item} == {threads.grid} - 1)")
    w("const long long other = fusec_region(cols) - fusec_half;")
    for reduction in kernel.reductions:
        c = dag.value(reduction.value).c_name
        w(f"for (long long i = {threads.tid}; i < cols; i += BLOCK) ws_{c}[other + i] = real(0);")
    w.close()


def finish_after_barrier(kernel: Kernel, dag: Dag, library: Library) -> tuple[str, ...]:
    """The device function ``finish_sums`` of a producer whose column sums are
    finished after the grid barrier (``Kernel.sums_after_barrier``): every thread
    finishes its own columns of this launch's half of each accumulator into
    ``sums_<c>`` (the consumer's ``given`` values), and block 0 stores the
    outputs. Its parameters are ``run``'s, then the round and the arrays."""
    names = [dag.value(r.value).c_name for r in kernel.reductions]
    params = [a.decl for a in kernel.args] + ["const int item", "const unsigned long long launch_round"]
    params += [f"real (&sums_{c})[PIECES * VEC]" for c in names]
    w = CudaWriter()
    w("// the column sums, finished after the grid barrier: this thread's columns of this launch's")
    w("// half of each accumulator (every block has added into it), every load before any store")
    joined = ",\n    ".join(params)
    w(f"__device__ __forceinline__ void finish_sums(\n    {joined})")
    w("{")
    w.depth += 1
    emit_scalars(w, kernel, dag)  # a finish may read scalars (sgemtv_ab's alpha, beta)
    w("fusec_band c;")
    w("c.t = threadIdx.x;")
    w("c.cols = cols;")
    w("const long long fusec_half = (long long)(launch_round & 1) * fusec_region(cols);")
    for k, reduction in enumerate(kernel.reductions):
        c = names[k]
        call = dag.value(reduction.value).producer
        w("#pragma unroll")
        w.open("for (int s = 0; s < PIECES * VEC; ++s)")
        w("const long long i = band_col(s / VEC, c) + s % VEC;")
        w(f"sums_{c}[s] = i < cols ? __ldcg(ws_{c} + fusec_half + i) : real(0);")
        w.close()
        w("#pragma unroll")
        w.open("for (int s = 0; s < PIECES * VEC; ++s)")
        w("const long long i = band_col(s / VEC, c) + s % VEC;")
        w("if (i >= cols) continue;")
        w(f"const real acc = sums_{c}[s];")
        w(f"sums_{c}[s] = {finish_expression(dag, library, call)};")
        w(f"if (item == 0) g_{c}[i] = sums_{c}[s];")
        w.close()
    w.close()
    return tuple(w.lines)


def _taken(hold, value: int) -> int:
    """The units of ``value`` a held consumer takes from chip (0: it loads them all)."""
    if hold is None or hold.keep or value != hold.value:
        return 0
    return hold.registers + hold.shared


def _next_elements(by_value, loads) -> dict:
    """The elements with the next instance's copies (``<var>_next``) of the loaded values."""
    out = dict(by_value)
    for op in loads:
        out[op.value] = dataclasses.replace(by_value[op.value], var=by_value[op.value].var + "_next")
    return out


def _emit_first_loads(w: CudaWriter, loads, kernel: Kernel, dag: Dag, library: Library, by_value, threads,
                      hold) -> None:
    """The next instance's copies of the loop's loads, and the first instance's loads into them."""
    w()
    w("// loads one instance ahead: the next instance's rows are in flight while this one computes")
    for op in dict((op.value, op) for op in loads).values():
        e = by_value[op.value]
        w(f"real {e.var}_next[{e.size_expr}];  // the next instance's {dag.value(op.value).label}")
    w("fusec_band cn = c;  // the next instance's indices")
    w.open("if (cn.row0 < rows)")
    _emit_next_loads(w, loads, kernel, dag, library, by_value, threads, hold, "0")
    w.close()


def _emit_next_loads(w: CudaWriter, loads, kernel: Kernel, dag: Dag, library: Library, by_value, threads, hold,
                     index: str) -> None:
    """Loads of instance ``index`` (of the block's) into the next copies, with the
    indices ``cn``; a held consumer skips the units it will take from chip."""
    ahead = _next_elements(by_value, loads)
    for op in loads:
        taken = _taken(hold, op.value)
        if taken:
            w(f"// unless taken from chip (the first {taken} whole instances)")
            w.open(f"if (!(cn.full && {index} < {taken}))")
        emit_op(w, op, kernel, dag, library, ahead, ctx="cn", threads=threads)
        if taken:
            w.close()


def _emit_loads_ahead(w: CudaWriter, loads, kernel: Kernel, dag: Dag, library: Library, by_value, threads,
                      hold) -> None:
    """In the loop: this instance's values from their next copies (or a held consumer's
    from chip), then the next instance's loads, before any compute."""
    w("// this instance's loads arrived one instance ahead")
    for op in loads:
        e = by_value[op.value]

        def copy(e=e) -> None:
            w("#pragma unroll")
            w(f"for (int s = 0; s < {e.size_expr}; ++s) {e.var}[s] = {e.var}_next[s];")

        if _taken(hold, op.value):
            hold.emit_take(w, e.var, copy)
            continue
        copy()
        if hold is not None and hold.keep and op.value == hold.value:
            hold.emit_keep(w, e.var)
    w("// the next instance's loads leave now")
    w("cn.row0 = c.row0 + BAND_ROWS;")
    w("cn.full = cn.vec_ok && cols == BAND_COLS && cn.row0 + BAND_ROWS <= rows;")
    w.open("if (it + 1 < ITERS && cn.row0 < rows)")
    _emit_next_loads(w, loads, kernel, dag, library, by_value, threads, hold, "it + 1")
    w.close()


def _emit_row_finish(w: CudaWriter, call: int, kernel: Kernel, dag: Dag, library: Library, by_value) -> None:
    """A row sum is whole after its compute: its finish epilogue, row by row."""
    function = function_of(dag, library, call)
    if not (whole_in_block(function, kernel.plan) and function.finish):
        return
    var = by_value[dag.call(call).result].var
    w(f"// the rows' sums are whole: finish them ({function.finish.routine})")
    w("#pragma unroll")
    w.open("for (int u = 0; u < BAND_ROWS; ++u)")
    w("const long long i = c.row0 + u;")
    w(f"const real acc = {var}[u];")
    w(f"if (i < rows) {var}[u] = {finish_expression(dag, library, call)};")
    w.close()


def _emit_column_finishes(w: CudaWriter, kernel: Kernel, dag: Dag, library: Library, threads: Threads) -> None:
    """Every block has added its column sums; the last to arrive (one ticket per
    reduction, all taken at once) writes the outputs and clears the accumulators."""
    tid = threads.tid
    w()
    w("// every block's atomics must be done before the last block reads the accumulators:")
    w("// the block's barrier, then one fence by the thread that takes the tickets")
    w("BARRIER();")
    w(f"if ({tid} == 0) __threadfence();")
    names = [dag.value(r.value).c_name for r in kernel.reductions]
    w.open(f"if ({tid} == 0)")
    w(f"unsigned got[{len(names)}];")
    for k, c in enumerate(names):
        w(f"got[{k}] = atomicAdd(cnt_{c}, 1u);")
    for k, c in enumerate(names):
        w(f"fusec_last[{k}] = fusec_came_last(cnt_{c}, got[{k}], {threads.grid});")
    w.close()
    w("BARRIER();")
    for k, reduction in enumerate(kernel.reductions):
        c = names[k]
        call = dag.value(reduction.value).producer
        w()
        w(f"// finish {dag.value(reduction.value).label}: the last block writes every output and clears the")
        w("// accumulator for the next launch. Each thread takes its own columns (mapping band_cols),")
        w("// every load before any store: the compiler keeps L2 loads (__ldcg) in order with stores,")
        w("// so one loop of both waited for each load in turn, and every block waits for this one")
        w.open(f"if (fusec_last[{k}])")
        w("__threadfence();")
        w(f"real sums_{c}[PIECES * VEC];")
        w("#pragma unroll")
        w.open("for (int s = 0; s < PIECES * VEC; ++s)")
        w("const long long i = band_col(s / VEC, c) + s % VEC;")
        w(f"sums_{c}[s] = i < cols ? __ldcg(ws_{c} + i) : real(0);")
        w.close()
        w("#pragma unroll")
        w.open("for (int s = 0; s < PIECES * VEC; ++s)")
        w("const long long i = band_col(s / VEC, c) + s % VEC;")
        w("if (i >= cols) continue;")
        w(f"const real acc = sums_{c}[s];")
        w(f"ws_{c}[i] = real(0);")
        w(f"g_{c}[i] = {finish_expression(dag, library, call)};")
        w.close()
        w.close()
