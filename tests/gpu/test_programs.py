"""GPU tier: every script in both precisions against the float64 oracle.

Outputs (and fusec's own buffers) are poisoned with NaN before each run, so
an element no kernel writes fails; inputs are checked unchanged afterwards.
FUSEC_TEST_SIZES (e.g. "1,33,1000") narrows the sizes, for runs under
compute-sanitizer, which is slow.
"""

from __future__ import annotations

import importlib.util
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from fusec import oracle
from fusec.errors import ArgumentError
from tests.helpers import DTYPES, library, program, script_dag, script_names, size_cases, tile_program

pytestmark = pytest.mark.gpu

BASE_SIZES = [int(s) for s in os.environ.get("FUSEC_TEST_SIZES", "1,31,33,1000,4097").split(",")]
RECTANGULAR_BASES = [n for n in (33, 1000) if n in BASE_SIZES]


def _cases():
    out = []
    for script in script_names():
        dag = script_dag(script)
        squares = size_cases(dag, BASE_SIZES)[:len(BASE_SIZES)]
        rects = size_cases(dag, RECTANGULAR_BASES)[len(RECTANGULAR_BASES):]
        for sizes in squares + rects:
            out.append(pytest.param(script, sizes, id=f"{script}-" + "x".join(str(v) for v in sizes.values())))
    return out


def _seed(*parts) -> int:
    return zlib.crc32(repr(parts).encode())


def _check(prog, inputs, results) -> None:
    results = results if isinstance(results, tuple) else (results,)
    computed = {}
    for name, value in zip(prog.outputs, results):
        if hasattr(value, "get"):  # PyCUDA GPUArray, CuPy
            value = value.get()
        elif hasattr(value, "cpu"):  # PyTorch
            value = value.cpu().numpy()
        computed[name] = np.asarray(value)
    checks = oracle.check_outputs(prog.dag, library(), inputs, computed, prog.dtype)
    failed = [f"{c.name}: {c.reason}" for c in checks if not c.passed]
    assert not failed, "; ".join(failed)


def _unchanged(before, inputs) -> None:
    for name, array in before.items():
        after = inputs[name]
        after = after.get() if hasattr(after, "get") else (after.cpu().numpy() if hasattr(after, "cpu") else after)
        np.testing.assert_array_equal(np.asarray(after), array, err_msg=f"input {name} was modified")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script,sizes", _cases())
def test_numpy_against_oracle(script, sizes, dtype):
    prog = program(script, dtype)
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(_seed(script, sizes, dtype)))
    before = {k: v.copy() for k, v in inputs.items() if isinstance(v, np.ndarray)}
    results = prog.run(inputs, poison=True)
    _check(prog, inputs, results)
    _unchanged(before, inputs)
    for value in (results if isinstance(results, tuple) else (results,)):
        assert isinstance(value, (np.ndarray, np.floating))
        assert np.asarray(value).dtype == np.dtype(dtype)


VECTOR_SCRIPTS = ("sscal", "vadd", "waxpby", "axpydot")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", VECTOR_SCRIPTS)
def test_each_l2_policy_against_oracle(script, dtype):
    """Every vector kernel of the script in each L2 policy (evict-first loads, streaming
    stores), at sizes with full chunks and ragged edges: results against the oracle,
    and bit for bit the plain plan's (a cache hint changes no value)."""
    import dataclasses

    from fusec import compile as compile_script
    from fusec.ir.plan import L2_NAMES, ProgramPlan
    from tests.helpers import ROOT
    base = program(script, dtype)
    for sizes in size_cases(base.dag, [k for k in (33, 4097, 1 << 20) if k in BASE_SIZES or k == 1 << 20]):
        inputs = oracle.random_inputs(base.dag, sizes, dtype, np.random.default_rng(_seed(script, sizes, "l2")))
        plain = None
        for l2 in L2_NAMES:
            plan = ProgramPlan(tuple(dataclasses.replace(k, l2=l2) for k in base.generated.plan.kernels))
            prog = compile_script(ROOT / "scripts" / f"{script}.script", library(), dtype, plan=plan)
            results = prog.run(inputs, poison=True)
            _check(prog, inputs, results)
            results = results if isinstance(results, tuple) else (results,)
            plain = plain or results
            for a, b in zip(plain, results):
                np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
            prog.release()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", ["sgemv", "bicgk", "gesummv"])
def test_the_blocks_that_keep_their_tiles_in_l2_change_no_value(script, dtype):
    """A turning tile kernel's last blocks load its matrix plainly (Kernel.keep_blocks): at a
    size where its grid has blocks of both kinds, results against the oracle and bit for bit
    those of the same source with every block evict-first, on three calls (both directions)."""
    import dataclasses
    import re

    from fusec.runtime.program import Program
    prog = tile_program(script, dtype, plain=True)  # a band kernel's column sums (atomics) are not bit for bit
    sizes = {d: 4097 for d in prog.dag.sizes}
    kept = [k for k in prog.kernels if getattr(k, "keep_blocks", 0)]
    assert kept and all(0 < k.keep_blocks < k.grid(sizes) for k in kept)
    source, count = re.subn(r"blockIdx\.x \+ \d+u >= gridDim\.x", "false", prog.source)
    assert count == 2 * len(kept)  # its fusec_load16 and its fusec_load1 (4097: rows off 16 bytes)
    streaming = Program(dataclasses.replace(prog.generated, source=source))
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(_seed(script, "keep", dtype)))
    for _ in range(3):
        kept_results = prog.run(inputs, poison=True)
        _check(prog, inputs, kept_results)
        streamed = streaming.run(inputs, poison=True)
        for a, b in zip(*(r if isinstance(r, tuple) else (r,) for r in (kept_results, streamed))):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    streaming.release()


@pytest.mark.parametrize("iters", [2, 3])
@pytest.mark.parametrize("dtype", DTYPES)
def test_a_block_with_several_tickets(dtype, iters):
    """BiCGK fused, walking the rows: every block counts itself in on ITERS tiles of q
    and one of s, all tickets taken at once; at sizes with one tile, ragged tiles and
    a last block with fewer than ITERS tiles, twice (the counters reset themselves),
    against the oracle and bit for bit between the two runs. Built without dependent
    launches (helpers.last_block_sums): alone on sm_90 its sums would run apart, ticketless."""
    import dataclasses

    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.ir.plan import ProgramPlan
    from fusec.runtime.program import Program
    from fusec.space import ROWS
    from tests.helpers import ROOT, last_block_sums
    (fused,) = tile_program("bicgk", dtype).generated.plan.kernels  # tickets: a tile kernel's
    plan = ProgramPlan((dataclasses.replace(fused, serial=ROWS, shape=dataclasses.replace(fused.shape, iters=iters)),))
    prog = Program(generate(load_script(ROOT / "scripts" / "bicgk.script", library()), library(), plan, dtype,
                            target=last_block_sums()))
    assert "unsigned got[" in prog.source
    for sizes in [{"m": m, "n": n} for m, n in ((1, 1), (33, 33), (1000, 777), (777, 1000))]:
        inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(_seed("tickets", sizes, iters)))
        first = prog.run(inputs, poison=True)
        _check(prog, inputs, first)
        for a, b in zip(first, prog.run(inputs, poison=True)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    prog.release()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", script_names())
def test_integer_values_and_reproducible(script, dtype):
    """Integer-valued inputs (exact sums in float64); two runs agree bit for bit,
    because reductions are finished in a fixed order, not with atomics."""
    prog = program(script, dtype)
    sizes = {s: 1000 for s in prog.dag.sizes}
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(_seed(script, dtype)),
                                  mode="integer")
    first = prog.run(inputs, poison=True)
    second = prog.run(inputs, poison=True)
    _check(prog, inputs, first)
    for a, b in zip(first if isinstance(first, tuple) else (first,),
                    second if isinstance(second, tuple) else (second,)):
        np.testing.assert_array_equal(a, b)


SCALAR_PAIRS = [(0.0, 1.0), (1.0, 0.0), (-1.0, 0.7), (0.7, -1.0), (1.0, 1.0)]
# w = alpha A x in SGEMVT and GEMVER is identically zero for alpha = 0: the oracle
# rightly refuses an all-zero reference as a test, so those pairs are left out there.
SPECIAL = [(s, a, b) for s in ("sgemv", "waxpby", "axpydot", "sgemvt", "gemver") for a, b in SCALAR_PAIRS
           if not (s in ("sgemvt", "gemver") and a == 0.0)]


@pytest.mark.parametrize("script,alpha,beta", SPECIAL)
def test_special_scalars(script, alpha, beta):
    prog = program(script, "float32")
    sizes = {s: 333 for s in prog.dag.sizes}
    inputs = oracle.random_inputs(prog.dag, sizes, "float32", np.random.default_rng(_seed(script, alpha)))
    scalars = {"alpha": alpha, "beta": beta}
    inputs.update({k: v for k, v in scalars.items() if k in inputs})
    _check(prog, inputs, prog.run(inputs, poison=True))


def _device_kinds():
    """The array frameworks installed here. Looked up, not imported: importing
    PyTorch at collection took about a minute of every run, GPU or not."""
    return ["pycuda"] + [name for name in ("cupy", "torch") if importlib.util.find_spec(name) is not None]


def _to_device(kind, array):
    if not isinstance(array, np.ndarray):
        return array
    if kind == "pycuda":
        import pycuda.gpuarray as gpuarray
        return gpuarray.to_gpu(array)
    if kind == "cupy":
        import cupy
        return cupy.asarray(array)
    import torch
    return torch.from_numpy(array).cuda()


def _family_type(kind):
    if kind == "pycuda":
        import pycuda.gpuarray as gpuarray
        return gpuarray.GPUArray
    if kind == "cupy":
        import cupy
        return cupy.ndarray
    import torch
    return torch.Tensor


@pytest.mark.parametrize("kind", _device_kinds())
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", script_names())
def test_device_arrays_in_and_out(script, dtype, kind):
    """Device arrays in, device arrays of the same framework out, no host copies."""
    from fusec.runtime import cuda
    prog = program(script, dtype)
    dag = prog.dag
    sizes = size_cases(dag, [1000])[-1]  # rectangular where the script allows it
    inputs = oracle.random_inputs(dag, sizes, dtype, np.random.default_rng(_seed(script, kind)))
    with cuda.context():
        device = {k: _to_device(kind, v) for k, v in inputs.items()}
        results = prog.run(device, poison=True)
        for value in (results if isinstance(results, tuple) else (results,)):
            assert isinstance(value, _family_type(kind))
        _check(prog, inputs, results)
        _unchanged({k: v for k, v in inputs.items() if isinstance(v, np.ndarray)}, device)


def _leave_nan_for(kind, prog, sizes) -> None:
    """Fill, then free, arrays the size of the outputs: the framework's pool
    hands that memory to the next call's outputs, so an element the prepared
    path leaves unwritten reads NaN (the prepared path does not poison)."""
    for value in dict.fromkeys(prog.dag.outputs):
        shape = tuple(sizes[d] for d in prog.dag.value(value).dims)
        host = np.full(shape, np.nan, prog.dtype)
        filled = _to_device(kind, host)
        del filled


@pytest.mark.parametrize("path", ["C", "Python"])
@pytest.mark.parametrize("kind", [k for k in _device_kinds() if k != "pycuda"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", script_names())
def test_repeated_calls_take_the_prepared_path(script, dtype, kind, path, monkeypatch):
    """A second call on the same device arrays skips binding (a prepared
    call: in C through ``prog(...)``, in Python through ``prog.run(...)``), with
    new scalars: its results are right, new arrays, and the first call's
    results are untouched."""
    from fusec.runtime import cuda
    prog = program(script, dtype)
    prog.release()
    sizes = size_cases(prog.dag, [1000])[-1]
    rng = np.random.default_rng(_seed(script, kind, "prepared"))
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, rng)
    with cuda.context():
        device = {k: _to_device(kind, v) for k, v in inputs.items()}
        first = prog.run(device, poison=True)  # poison: the whole way, nothing prepared
        assert prog.cache_info().prepared == 0
        prog(**device)
        assert prog.cache_info().prepared == 1 and prog.cache_info().in_c
        again = dict(inputs, **{k: v * -0.5 + 1.0 for k, v in inputs.items() if not isinstance(v, np.ndarray)})
        _leave_nan_for(kind, prog, sizes)
        with monkeypatch.context() as patch:
            patch.setattr(prog, "bind", lambda arrays: pytest.fail("the prepared call bound its arguments"))
            arguments = {k: (device[k] if isinstance(v, np.ndarray) else v) for k, v in again.items()}
            second = prog(**arguments) if path == "C" else prog.run(arguments)
        assert prog.cache_info().prepared == 1
        if path == "C":  # small outputs: the next call's are made ahead, once this call launched
            assert prog.cache_info().spares == len(set(prog.dag.outputs))
        _check(prog, again, second)
        _check(prog, inputs, first)
        firsts = first if isinstance(first, tuple) else (first,)
        seconds = second if isinstance(second, tuple) else (second,)
        for a, b in zip(firsts, seconds):
            assert isinstance(b, _family_type(kind)) and b is not a
        prog.release()


@pytest.mark.parametrize("kind", [k for k in _device_kinds() if k != "pycuda"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", script_names())
def test_repeated_calls_with_out_arrays_run_in_c(script, dtype, kind, monkeypatch):
    """A second call with the same inputs and out= arrays, new scalars, runs the C call
    (neither binding nor the Python prepared call runs): the results are right and are the
    out= arrays. (No PyCUDA context pushed: CuPy would load its fill kernels into it.)"""
    prog = program(script, dtype)
    prog.release()
    sizes = size_cases(prog.dag, [1000])[-1]
    rng = np.random.default_rng(_seed(script, kind, "out in C"))
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, rng)
    names = [prog.dag.value(v).name for v in dict.fromkeys(prog.dag.outputs)]
    device = {k: _to_device(kind, v) for k, v in inputs.items()}
    out = {name: _to_device(kind, np.full(tuple(sizes[d] for d in prog.dag.value(v).dims), np.nan, dtype))
           for name, v in zip(names, dict.fromkeys(prog.dag.outputs))}
    _check(prog, inputs, prog(**device, out=out))  # the whole way, preparing the call
    assert prog.cache_info().prepared == 1 and prog.cache_info().in_c
    again = dict(inputs, **{k: v * -0.5 + 1.0 for k, v in inputs.items() if not isinstance(v, np.ndarray)})
    for array in out.values():
        array.fill_(np.nan) if kind == "torch" else array.fill(np.nan)
    with monkeypatch.context() as patch:
        patch.setattr(prog, "bind", lambda arrays: pytest.fail("the prepared call bound its arguments"))
        patch.setattr(prog, "_run_prepared", lambda *a: pytest.fail("the C call declined"))
        arguments = {k: (device[k] if isinstance(v, np.ndarray) else v) for k, v in again.items()}
        second = prog(**arguments, out=out)
    seconds = second if isinstance(second, tuple) else (second,)
    assert all(got is out[name] for got, name in zip(seconds, prog.outputs))
    _check(prog, again, second)
    prog.release()


def test_a_cupy_result_let_go_is_written_again():
    """A warm call on CuPy arrays writes its last result again once the caller let
    it go (the same address), and never while the caller holds it or a view of it;
    each call's results are right for its own scalars."""
    cupy = pytest.importorskip("cupy")
    from fusec.runtime import cuda
    prog = program("waxpby", "float32")
    prog.release()
    sizes = {s: 4099 for s in prog.dag.sizes}
    inputs = oracle.random_inputs(prog.dag, sizes, "float32", np.random.default_rng(11))
    scaled = [dict(inputs, alpha=float(a), beta=float(b)) for a, b in ((1.5, -2.0), (0.25, 3.0), (-1.0, 0.5))]
    with cuda.context():
        device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        prog(**device)  # the whole way, preparing the call
        first = prog(**device)  # warm: made on its way
        address = first.data.ptr
        del first
        again = prog(**dict(device, alpha=scaled[0]["alpha"], beta=scaled[0]["beta"]))
        assert again.data.ptr == address and prog.cache_info().kept_results == 1
        _check(prog, scaled[0], again)
        view = again[::2]
        kept = cupy.asnumpy(view)
        del again
        other = prog(**dict(device, alpha=scaled[1]["alpha"], beta=scaled[1]["beta"]))
        assert other.data.ptr != address  # a view holds the memory
        np.testing.assert_array_equal(cupy.asnumpy(view), kept)
        _check(prog, scaled[1], other)
        held = prog(**dict(device, alpha=scaled[2]["alpha"], beta=scaled[2]["beta"]))
        assert held.data.ptr != other.data.ptr  # the caller holds `other`
        _check(prog, scaled[2], held)
        _check(prog, scaled[1], other)
        prog.release()


def test_a_cupy_array_reshaped_in_place_is_not_taken_for_the_prepared_one():
    """The C call reads a CuPy array's shape each time it comes again (its
    pointer, strides and dtype it reads only for a new object): reshaped in
    place, the same objects go the whole way, right for their new shape, or are
    refused by name when they no longer fit together; reshaped back, warm again."""
    cupy = pytest.importorskip("cupy")
    from fusec.runtime import cuda
    prog = program("madd", "float32")
    prog.release()
    inputs = oracle.random_inputs(prog.dag, {"m": 300, "n": 520}, "float32", np.random.default_rng(5))
    with cuda.context():
        device = {k: cupy.asarray(v) for k, v in inputs.items()}
        prog(**device)
        _check(prog, inputs, prog(**device))  # warm
        assert prog.cache_info().in_c
        device["A"].shape = (520, 300)
        with pytest.raises(ArgumentError, match="'B'"):
            prog(**device)
        device["B"].shape = (520, 300)
        reshaped = {k: v.reshape(520, 300) for k, v in inputs.items()}
        result = prog(**device)
        assert result.shape == (520, 300) and prog.cache_info().prepared == 2
        _check(prog, reshaped, result)
        for array in device.values():
            array.shape = (300, 520)
        result = prog(**device)
        assert prog.cache_info().prepared == 2 and result.shape == (300, 520)
        _check(prog, inputs, result)
        prog.release()


@pytest.mark.parametrize("path", ["C", "Python"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", script_names())
def test_calls_walking_either_way_give_the_same_bits(script, dtype, path, monkeypatch):
    """Kernels alone alternate the direction their blocks walk the grid from one
    launch to the next (Kernel.turns): four calls (the whole way, then prepared,
    in C or in Python) walk both ways, and each gives the bits of a program that
    always walks forwards, right against the oracle (where the program is not
    reproducible, each call against the oracle instead). Ragged sizes, many blocks."""
    cupy = pytest.importorskip("cupy")
    from fusec.runtime import cuda
    from fusec.runtime.program import Program
    prog = program(script, dtype)
    prog.release()
    matrix = any(v.kind.value == "matrix" for v in prog.dag.values)
    sizes = {s: 2049 if matrix else 1_000_003 for s in prog.dag.sizes}
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(_seed(script, dtype, "turns")))
    forwards = Program(prog.generated, turning=False)
    def as_tuple(r):
        return r if isinstance(r, tuple) else (r,)
    with cuda.context():
        device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        expected = [cupy.asnumpy(r) for r in as_tuple(forwards(**device))]
        for call in range(4):
            results = prog(**device) if path == "C" else prog.run(device)
            assert prog.cache_info().prepared == 1  # prepared by the first call
            if not prog.generated.reproducible:  # column sums added with atomics: right, not the same bits
                _check(prog, inputs, results)
                continue
            for name, got, want in zip(prog.outputs, as_tuple(results), expected):
                np.testing.assert_array_equal(cupy.asnumpy(got), want, err_msg=f"{name}, call {call}")
        _check(prog, inputs, tuple(cupy.asarray(e) for e in expected) if len(expected) > 1
               else cupy.asarray(expected[0]))
        forwards.release()
        prog.release()


@pytest.mark.parametrize("path", ["C", "Python"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", script_names() + ["solvers/cg", "solvers/bicg", "solvers/bicgstab"])
def test_dependent_launches_give_the_bits_of_plain_ones(script, dtype, path, monkeypatch):
    """On sm_90 on, each kernel is launched while the one before it still runs (and waits for
    it first: support.cuh); three calls (the whole way, then prepared, in C or in Python) give
    the bits of the same program launched plainly (where the program is not reproducible,
    each call against the oracle instead). The solvers' iterations have 4 to 7 kernels."""
    cupy = pytest.importorskip("cupy")
    from fusec.runtime import cuda
    from fusec.runtime.program import Program
    made = []

    class Recorded(cuda.Loaded):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            made.append(self)
    monkeypatch.setattr(cuda, "Loaded", Recorded)
    if script.startswith("solvers/"):  # as the solvers compile them (their spaces are searched by runs)
        from fusec.solvers.api import program_for
        generated = program_for(script.removeprefix("solvers/"), dtype, 1000).generated
    else:
        generated = program(script, dtype).generated
    prog, plain = Program(generated), Program(generated, dependent_launch=False)
    matrix = any(v.kind.value == "matrix" for v in prog.dag.values)
    sizes = {s: 1000 if matrix else 1_000_003 for s in prog.dag.sizes}
    inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(_seed(script, dtype, "pdl")))
    def as_tuple(r):
        return r if isinstance(r, tuple) else (r,)
    with cuda.context() as ctx:
        device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        expected = [cupy.asnumpy(r) for r in as_tuple(plain(**device))]
        for call in range(3):
            results = prog(**device) if path == "C" else prog.run(device)
            if not prog.generated.reproducible:
                _check(prog, inputs, results)
                continue
            for name, got, want in zip(prog.outputs, as_tuple(results), expected):
                np.testing.assert_array_equal(cupy.asnumpy(got), want, err_msg=f"{name}, call {call}")
        dependent = cuda.has_dependent_launch(cuda.arch_of(ctx))
        assert [loaded.dependent for loaded in made] == [False, dependent]  # plain's, then prog's
        plain.release()
        prog.release()


@pytest.mark.parametrize("kind", [k for k in _device_kinds() if k != "pycuda"])
def test_prepared_calls_follow_the_arrays(kind):
    """New arrays or new sizes go the whole way once and are prepared in turn;
    an array freed and another allocated where it was has the same signature,
    and the prepared call is right for it; a bad scalar still names itself.
    No context is made current here, as in a CuPy or PyTorch user's code
    (neither leaves one current for the driver API): fusec pushes one."""
    prog = program("sgemv", "float32")
    prog.release()
    rng = np.random.default_rng(7)
    for m, n in ((64, 96), (96, 64), (64, 96)):
        inputs = oracle.random_inputs(prog.dag, {"m": m, "n": n}, "float32", rng)
        for _ in range(2):  # freed after each call: the pool reuses the addresses
            device = {k: _to_device(kind, v) for k, v in inputs.items()}
            _check(prog, inputs, prog(**device))
    assert 1 <= prog.cache_info().prepared <= 6  # at most one per set of arrays (the pool may reuse addresses)
    with pytest.raises(ArgumentError, match="'alpha'.*real number"):
        prog(**dict(device, alpha="two"))
    times = prog.time(device, warmup=1, repeat=3)  # whole calls, between events
    assert len(times) == 3 and all(t > 0 for t in times)
    prog.release()
    assert prog.cache_info() == (0, False, 0, 0, 0, 0)


def test_a_cupy_user_process_exits_cleanly():
    """fusec pushes the primary context for a call on CuPy arrays and pops it
    after: a context left on PyCUDA's stack makes it abort the process at exit."""
    import subprocess
    import sys
    pytest.importorskip("cupy")
    code = ("import cupy, fusec\n"
            "p = fusec.compile('scripts/sscal.script', dtype='float32')\n"
            "x = cupy.arange(1000, dtype=cupy.float32)\n"
            "for _ in range(3):\n"
            "    y = p(x=x, alpha=2.0)\n"
            "assert float(y[10]) == 20.0\n"
            "print('done')\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parents[2], timeout=300)
    assert done.returncode == 0 and "done" in done.stdout, done.stderr[-2000:]
    assert "context stack was not empty" not in done.stderr


@pytest.mark.parametrize("kind", [k for k in _device_kinds() if k != "pycuda"])
def test_device_argument_errors(kind):
    from fusec.runtime import cuda
    prog = program("bicgk", "float32")
    inputs = oracle.random_inputs(prog.dag, {"m": 64, "n": 96}, "float32", np.random.default_rng(1))
    with cuda.context():
        device = {k: _to_device(kind, v) for k, v in inputs.items()}
        strided = dict(device, A=device["A"][:, ::2])
        with pytest.raises(ArgumentError, match="'A'.*contiguous"):
            prog.run(strided)
        wrong = dict(device, p=_to_device(kind, inputs["p"].astype(np.float64)))
        with pytest.raises(ArgumentError, match="'p'.*float64"):
            prog.run(wrong)
        short = dict(device, r=_to_device(kind, inputs["r"][:10].copy()))
        with pytest.raises(ArgumentError, match="'r'.*size 10"):
            prog.run(short)


def test_timing_keeps_device_outputs_alive():
    """Program.time allocates the outputs of device-array calls; they must live
    until the last timed launch. GEMVER writes a 256 MB matrix: freed early, it
    is unmapped memory and the kernels fault (found by the tuner at n=8192)."""
    import pycuda.gpuarray as gpuarray

    from fusec.runtime import cuda
    prog = program("gemver", "float32")
    sizes = {s: 8192 for s in prog.dag.sizes}
    host = oracle.random_inputs(prog.dag, sizes, prog.dtype, np.random.default_rng(1))
    with cuda.context():
        device = {k: (gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        for gpu_only in (False, True):
            times = prog.time(device, warmup=1, repeat=3, host=not gpu_only)
            assert len(times) == 3 and all(t > 0 for t in times)
        B, x, w = prog(**device)  # the context is still healthy
        assert np.isfinite(x.get()).all()
        prog.release()


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("script", ["bicgk", "sgemv", "atax", "gesummv", "sgemvt"])
def test_tile_sums_apart_against_oracle_on_every_path(script, dtype):
    """Tile plans whose sums run in a second launch (Kernel.sums_apart, the GPU present has
    dependent launches): the whole way with NaN-poisoned outputs, then prepared calls on
    device arrays (which walk the grid the other way each call), and the GPU-time loop; every
    result against the oracle and, the sums' order being fixed, each call's bits the first's."""
    from fusec.runtime import cuda
    prog = tile_program(script, dtype, plain=True)
    assert any(kernel.sums_apart for kernel in prog.kernels), prog.generated.plan.summary(prog.dag)
    for sizes in size_cases(prog.dag, [n for n in (33, 1000, 4097) if n in BASE_SIZES or n == 4097]):
        inputs = oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(_seed(script, sizes, "apart")))
        first = prog.run(inputs, poison=True)
        _check(prog, inputs, first)
        first = first if isinstance(first, tuple) else (first,)
        with cuda.context():
            device = {k: _to_device("pycuda", v) for k, v in inputs.items()}
            for _ in range(3):  # a prepared call from the second on, in C where the extension is built
                results = prog(**device)
                results = results if isinstance(results, tuple) else (results,)
                for a, b in zip(first, results):
                    np.testing.assert_array_equal(np.asarray(a), b.get())
            assert len(prog.time(device, warmup=0, repeat=3, host=False)) == 3
            results = prog(**device)  # after three timed calls: the other direction
            for a, b in zip(first, results if isinstance(results, tuple) else (results,)):
                np.testing.assert_array_equal(np.asarray(a), b.get())
    prog.release()
