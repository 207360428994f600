"""GPU tier: the caller's streams, out=, CUDA graph capture, DLPack inputs, and
one program serving every size."""

from __future__ import annotations

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.errors import ArgumentError
from tests.gpu.test_programs import _check
from tests.helpers import program, script_names, size_cases

pytestmark = pytest.mark.gpu

SLEEP_CYCLES = 200_000_000  # ~0.1 s on the H100: far longer than the host takes to queue what follows


def _bicgk(dtype="float32", m=1000, n=1000, seed=0):
    prog = fusec.compile("scripts/bicgk.script", dtype=dtype)
    inputs = oracle.random_inputs(prog.dag, {"m": m, "n": n}, dtype, np.random.default_rng(seed))
    return prog, inputs


def test_a_producer_on_a_non_blocking_torch_stream_is_waited_for():
    """Inside ``with torch.cuda.stream(s)`` fusec runs on s, after the kernel that
    writes its input there; on the legacy stream it would not wait (shown too)."""
    torch = pytest.importorskip("torch")
    prog, inputs = _bicgk()
    A, r = (torch.from_numpy(inputs[k]).cuda() for k in ("A", "r"))
    p_true = torch.from_numpy(inputs["p"]).cuda()
    p = torch.zeros_like(p_true)
    prog(A=A, p=p_true, r=r)  # warm: prepared on the default stream
    s = torch.cuda.Stream()  # PyTorch's streams do not wait for the legacy stream, nor it for them
    for _ in range(2):  # the whole way, then the warm call
        p.zero_()
        torch.cuda.synchronize()
        with torch.cuda.stream(s):
            torch.cuda._sleep(SLEEP_CYCLES)
            p.copy_(p_true)
            q, s_out = prog(A=A, p=p, r=r)
        torch.cuda.synchronize()
        _check(prog, inputs, (q, s_out))
    p.zero_()
    torch.cuda.synchronize()
    with torch.cuda.stream(s):
        torch.cuda._sleep(SLEEP_CYCLES)
        p.copy_(p_true)
        q, _ = prog(A=A, p=p, r=r, stream=torch.cuda.default_stream())  # the race, on purpose
    torch.cuda.synchronize()
    assert int(torch.count_nonzero(q)) == 0  # read p before the producer wrote it


@pytest.mark.parametrize("kind", ["cupy", "pycuda", "int"])
def test_an_explicit_stream_of_any_kind_is_followed(kind):
    cupy = pytest.importorskip("cupy")
    prog, inputs = _bicgk(m=777, n=1001, seed=1)
    device = {k: cupy.asarray(v) for k, v in inputs.items()}
    if kind == "pycuda":
        from fusec.runtime import cuda
        with cuda.context():
            stream = cuda.driver().Stream()
    else:
        stream = cupy.cuda.Stream(non_blocking=True)
    given = stream.ptr if kind == "int" else stream
    handle = stream.handle if kind == "pycuda" else stream.ptr
    from fusec.runtime import native
    for _ in range(3):
        results = prog(**device, stream=given)
        native.require().synchronize(handle)
        _check(prog, inputs, results)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_out_arrays_receive_the_results(dtype):
    cupy = pytest.importorskip("cupy")
    prog, inputs = _bicgk(dtype, m=1001, n=4097, seed=2)
    device = {k: cupy.asarray(v) for k, v in inputs.items()}
    q, s = cupy.full(1001, np.nan, dtype), cupy.full(4097, np.nan, dtype)
    for _ in range(2):
        got = prog(**device, out={"q": q, "s": s})
        assert got[0] is q and got[1] is s
        _check(prog, inputs, (q, s))
    host = {k: np.full(v.shape, np.nan, dtype) for k, v in (("q", q), ("s", s))}
    got = prog(**inputs, out=host)  # NumPy in, NumPy out=
    assert got[0] is host["q"]
    _check(prog, inputs, got)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_out_arrays_on_a_stream_of_the_callers_take_the_prepared_call(dtype, monkeypatch):
    """A call on a stream that is not the framework's current one, with out= arrays for every
    result, is prepared (it allocates nothing) and the next such call runs it in C, on that
    stream, right; one that leaves a result to fusec goes the whole way every time."""
    cupy = pytest.importorskip("cupy")
    prog, inputs = _bicgk(dtype, m=1001, n=4097, seed=3)
    prog.release()
    device = {k: cupy.asarray(v) for k, v in inputs.items()}
    out = {"q": cupy.full(1001, np.nan, dtype), "s": cupy.full(4097, np.nan, dtype)}
    stream = cupy.cuda.Stream(non_blocking=True)
    prog.run(device, out=out, stream=stream)
    stream.synchronize()
    assert prog.cache_info().prepared == 1
    for arrays in out.values():
        arrays.fill(np.nan)
    cupy.cuda.get_current_stream().synchronize()  # the fills' stream: the call's does not wait for it
    with monkeypatch.context() as patch:
        patch.setattr(prog, "bind", lambda arrays: pytest.fail("the prepared call bound its arguments"))
        patch.setattr(prog, "_run_prepared", lambda *a: pytest.fail("the C call declined"))
        with cupy.cuda.Stream(non_blocking=True):  # another current stream: the call's own is given
            got = prog.run(device, out=out, stream=stream)
    stream.synchronize()
    assert got[0] is out["q"] and got[1] is out["s"]
    _check(prog, inputs, got)
    bound = []
    with monkeypatch.context() as patch:
        patch.setattr(prog, "bind", lambda arrays, bind=prog.bind: bound.append(1) or bind(arrays))
        for _ in range(2):  # s made by fusec: allocated with the stream current, the whole way
            got = prog.run(device, out={"q": out["q"]}, stream=stream)
            stream.synchronize()
            _check(prog, inputs, got)
    assert bound == [1, 1]


def test_two_sets_of_out_arrays_in_turn_both_run_in_c(monkeypatch):
    """A loop passing two sets of out= arrays in turn (a distributed program's stages, a
    solver's ping-pong states) runs every call after the first two in C, each right."""
    cupy = pytest.importorskip("cupy")
    prog, inputs = _bicgk("float32", m=1001, n=4097, seed=4)
    prog.release()
    device = {k: cupy.asarray(v) for k, v in inputs.items()}
    sets = [{"q": cupy.empty(1001, np.float32), "s": cupy.empty(4097, np.float32)} for _ in range(2)]
    for out in sets:
        prog(**device, out=out)  # the whole way, preparing each
    with monkeypatch.context() as patch:
        patch.setattr(prog, "bind", lambda arrays: pytest.fail("the prepared call bound its arguments"))
        patch.setattr(prog, "_run_prepared", lambda *a: pytest.fail("the C calls declined"))
        for _ in range(3):
            for out in sets:
                for array in out.values():
                    array.fill(np.nan)
                got = prog(**device, out=out)
                assert got[0] is out["q"] and got[1] is out["s"]
                _check(prog, inputs, got)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("script", script_names())
def test_out_arrays_with_inputs_elsewhere_take_the_prepared_call(script, dtype, monkeypatch):
    """A call with out= arrays on inputs of the same shapes in other memory launches the call
    prepared on the first inputs with their new addresses (no binding), right; an input 4 or 8
    bytes past a 16-byte boundary goes the whole way."""
    cupy = pytest.importorskip("cupy")
    prog = program(script, dtype)
    prog.release()
    sizes = size_cases(prog.dag, [1000])[-1]
    rng = np.random.default_rng(7)
    first, moved = (oracle.random_inputs(prog.dag, sizes, dtype, rng) for _ in range(2))
    results = {prog.dag.value(v).name: prog.dag.value(v) for v in prog.dag.outputs}
    out = {name: cupy.full(tuple(sizes[d] for d in value.dims), np.nan, dtype) for name, value in results.items()}
    names = [prog.dag.value(v).name for v in prog.dag.outputs]

    def device(values):
        return {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in values.items()}

    _check(prog, first, prog.run(device(first), out=out))
    with monkeypatch.context() as patch:
        patch.setattr(prog, "bind", lambda arrays: pytest.fail("the prepared call bound its arguments"))
        got = prog.run(device(moved), out=out)
    assert all(a is out[name] for a, name in zip(got if isinstance(got, tuple) else (got,), names))
    _check(prog, moved, got)
    arrays = [k for k, v in moved.items() if isinstance(v, np.ndarray) and v.size > 1]
    shifted = device(moved)
    name = arrays[0]
    room = cupy.empty(moved[name].size + 4, dtype)
    shifted[name] = room[1:1 + moved[name].size].reshape(moved[name].shape)  # 4 or 8 bytes past 16
    shifted[name][...] = cupy.asarray(moved[name])
    bound = []
    with monkeypatch.context() as patch:
        patch.setattr(prog, "bind", lambda arrays, bind=prog.bind: bound.append(1) or bind(arrays))
        _check(prog, moved, prog.run(shifted, out=out))
    assert bound == [1]  # another alignment: the whole way, whose flags fit it


def test_an_input_moved_over_an_out_array_is_refused_as_on_the_whole_way():
    """The prepared call of other inputs' memory does not serve a call whose input now overlaps
    an out= array the program writes while it still reads that input: the whole way refuses it."""
    cupy = pytest.importorskip("cupy")
    prog, inputs = _bicgk(m=1000, n=1000, seed=3)
    device = {k: cupy.asarray(v) for k, v in inputs.items()}
    q, s = cupy.empty(1000, "float32"), cupy.empty(1000, "float32")
    _check(prog, inputs, prog.run(device, out={"q": q, "s": s}))
    s[...] = device["p"]
    with pytest.raises(ArgumentError, match="overlaps the input 'p'"):
        prog.run(dict(device, p=s), out={"q": q, "s": s})


def _stage_inputs(prog, values):
    return {name: values[name] for name in prog.inputs}


def test_three_programs_captured_in_a_torch_graph_replay_against_the_oracle():
    """BiCGK, then SGEMV on its results, then AXPYDOT on those: captured once with
    out= and replayed 100 times; p changes between replays outside the graph, and
    every 20th replay each stage is checked against the oracle on its own inputs."""
    torch = pytest.importorskip("torch")
    n, dtype = 1000, "float32"
    rng = np.random.default_rng(4)
    bicgk = fusec.compile("scripts/bicgk.script", dtype=dtype)
    sgemv = fusec.compile("scripts/sgemv.script", dtype=dtype)
    axpydot = fusec.compile("scripts/axpydot.script", dtype=dtype)
    host = oracle.random_inputs(bicgk.dag, {"m": n, "n": n}, dtype, rng)
    t = {k: torch.from_numpy(v).cuda() for k, v in host.items()}
    out = {name: torch.empty(n, dtype=torch.float32, device="cuda") for name in ("q", "s", "z", "z2")}
    r2 = torch.empty((), dtype=torch.float32, device="cuda")
    alpha, beta, gamma = 0.75, -1.25, 0.5

    def step():
        bicgk(A=t["A"], p=t["p"], r=t["r"], out={"q": out["q"], "s": out["s"]})
        sgemv(A=t["A"], x=out["s"], y=out["q"], alpha=alpha, beta=beta, out={"z": out["z"]})
        axpydot(w=out["z"], v=out["q"], u=t["p"], alpha=gamma, out={"z": out["z2"], "r": r2})

    step()  # warm, outside the capture: fusec's workspaces are allocated here
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    for replay in range(100):
        if replay % 20 == 0:
            t["p"].copy_(torch.from_numpy(rng.standard_normal(n).astype(np.float32)).cuda())
        graph.replay()
        if replay % 20 == 19:
            torch.cuda.synchronize()
            values = {k: v.cpu().numpy() for k, v in t.items()}
            got = {k: v.cpu().numpy() for k, v in out.items()}
            _check(bicgk, _stage_inputs(bicgk, values), (got["q"], got["s"]))
            _check(sgemv, {"A": values["A"], "x": got["s"], "y": got["q"], "alpha": alpha, "beta": beta},
                   got["z"])
            _check(axpydot, {"w": got["z"], "v": got["q"], "u": values["p"], "alpha": gamma},
                   (got["z2"], r2.cpu().numpy()))


def test_a_call_captured_by_cupy_replays_right():
    cupy = pytest.importorskip("cupy")
    prog = fusec.compile("scripts/gemver.script", dtype="float32")
    inputs = oracle.random_inputs(prog.dag, {"m": 513, "n": 1025}, "float32", np.random.default_rng(6))
    device = {k: cupy.asarray(v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
    out = {"B": cupy.empty((513, 1025), np.float32), "x": cupy.empty(1025, np.float32),
           "w": cupy.empty(513, np.float32)}
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        prog(**device, out=out)
        stream.synchronize()
        stream.begin_capture()
        prog(**device, out=out)
        graph = stream.end_capture()
    for name in out:
        out[name].fill(np.nan)
    for _ in range(10):
        graph.launch(stream)
    stream.synchronize()
    _check(prog, inputs, (out["B"], out["x"], out["w"]))


@pytest.mark.parametrize("columns", [1, 33, 8193, 20000])
def test_a_program_compiled_at_the_default_size_serves_every_size(columns):
    """Compiled for 8192 x 8192, BiCGK's band kernel holds rows of at most 8192
    columns; wider calls run the plan compiled for them, and describe says so."""
    cupy = pytest.importorskip("cupy")
    prog = fusec.compile("scripts/bicgk.script", dtype="float32")
    sizes = {"m": 64, "n": columns}
    inputs = oracle.random_inputs(prog.dag, sizes, "float32", np.random.default_rng(columns))
    device = {k: cupy.asarray(v) for k, v in inputs.items()}
    for _ in range(2):
        _check(prog, inputs, prog(**device))
    _check(prog, inputs, prog(**inputs))
    other = prog.plan_for(sizes)
    text = prog.describe(sizes)
    if other is prog:
        assert "runs the plan compiled for them" not in text
    else:
        assert text.startswith("# at these sizes this program runs the plan compiled for them")
        assert prog.cache_info().plans_for_sizes >= 1
    if columns > 8192:
        widest = [k.macros().get("BAND_COLS") for whole in prog.kernels for k in whole.leaves()
                  if k.plan.geometry.value == "band"]
        if widest and max(widest) < columns:
            assert other is not prog


class _DlpackOnly:
    """A device array offering only DLPack (as some frameworks' arrays do)."""

    def __init__(self, array):
        self._array = array

    def __dlpack__(self, stream=None):
        return self._array.__dlpack__(stream=stream)

    def __dlpack_device__(self):
        return self._array.__dlpack_device__()


def test_arrays_offering_only_dlpack_are_read_without_a_copy():
    cupy = pytest.importorskip("cupy")
    prog, inputs = _bicgk(m=300, n=500, seed=9)
    device = {k: cupy.asarray(v) for k, v in inputs.items()}
    q, s = prog(**{k: _DlpackOnly(v) for k, v in device.items()})
    assert isinstance(q, cupy.ndarray)  # read through CuPy: results are CuPy's
    _check(prog, inputs, (q, s))
    bound = prog.bind({k: _DlpackOnly(v) for k, v in device.items()})
    assert {a.pointer for a in bound.arrays.values()} == {v.data.ptr for v in device.values()}  # no copy


class _InterfaceOnly:
    """A device array of a framework fusec does not know, offering only a version-2
    ``__cuda_array_interface__`` (no stream: its data is ready when handed out); its
    results are PyCUDA arrays."""

    def __init__(self, array):
        self._array = array
        interface = dict(array.__cuda_array_interface__, version=2)
        interface.pop("stream", None)
        self.__cuda_array_interface__ = interface


def test_arrays_of_another_framework_are_called_again_and_again(monkeypatch):
    """The calls after the first on the same arrays are prepared calls, made in the context
    the driver has current, which PyCUDA's own stack does not hold: their results must still
    be made (they failed with "no currently active context")."""
    cupy = pytest.importorskip("cupy")
    prog, inputs = _bicgk(m=300, n=500, seed=9)
    arrays = {k: _InterfaceOnly(cupy.asarray(v)) for k, v in inputs.items()}
    cupy.cuda.Device().synchronize()
    whole, bind = [], prog.bind

    def counting(*args, **kwargs):  # the whole way binds; a prepared call (hot in C or not) does not
        whole.append(1)
        return bind(*args, **kwargs)
    monkeypatch.setattr(prog, "bind", counting)
    for _ in range(3):
        _check(prog, inputs, prog(**arrays))
    assert len(whole) == 1  # the second and third calls were prepared calls


def test_jax_arrays_are_taken_in_place():
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    prog, inputs = _bicgk(m=300, n=500, seed=9)
    arrays = {k: jax.device_put(v, jax.devices("gpu")[0]) for k, v in inputs.items()}
    _check(prog, inputs, prog(**arrays))


def test_jax_arrays_are_read_once_jax_has_written_them():
    """JAX hands out an array's __cuda_array_interface__ (version 2, no stream) while the
    computation making it still runs: here A is made by a product of two 8192 x 8192
    matrices (milliseconds on the GPU), and the call is made at once. Under a loaded GPU
    the call read the all-zero memory of an A not yet written (results all zero)."""
    jax = pytest.importorskip("jax")
    if not any(d.platform == "gpu" for d in jax.devices()):
        pytest.skip("JAX sees no GPU")
    jnp = jax.numpy
    gpu = jax.devices("gpu")[0]
    # a + sum(z @ z) with z zeros is a, exactly, but only once the whole product has run
    late = jax.jit(lambda a, z: a + jnp.sum(jnp.dot(z, z, precision=jax.lax.Precision.HIGHEST)))
    zeros = jax.device_put(np.zeros((8192, 8192), np.float32), gpu)
    prog, inputs = _bicgk(m=300, n=500, seed=9)
    arrays = {k: jax.device_put(v, gpu) for k, v in inputs.items()}
    late(arrays["A"], zeros).block_until_ready()  # compiled before the calls timed against it
    for k in (2, 3, 4):  # a new A each call (memory JAX frees holds an earlier one): no call may skip the wait
        these = dict(inputs, A=inputs["A"] * np.float32(k))
        arrays["A"] = late(jax.device_put(these["A"], gpu), zeros)
        _check(prog, these, prog(**arrays))
