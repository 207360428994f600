"""GPU tier: scalar inputs read from device memory (``fusec.compile(..., device_scalars=...)``).

A program whose scalars come as one-element device arrays gives the bits the same
program gives with host numbers (both built with reproducible=True: no atomics), in
CuPy and PyTorch, both precisions, at sizes that are and are not multiples of a block;
a warm call (the prepared path and the C one) reads the array's value as it is then;
a call captured in a CUDA graph reads the value written into the array between
replays, also when another program computed it on the GPU; a bad array is an
ArgumentError naming it, cold or warm.
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

import fusec
from fusec import oracle
from fusec.errors import ArgumentError
from tests.gpu.test_programs import _check
from tests.helpers import ROOT, library
from tests.test_device_scalars import CASES

pytestmark = [pytest.mark.gpu,
              pytest.mark.filterwarnings("ignore:no GPU here and none named:fusec.cost.perfdb.store.PerfdbWarning")]

FRAMEWORKS = ("cupy", "torch")
SIZES = (1, 33, 1000, 4097)


@functools.lru_cache(maxsize=None)
def _programs(case: str, dtype: str):
    """(with host scalars, with device scalars) of one plan, and the scalars on the device."""
    script, on_device = CASES[case]
    where = {"source": script} if isinstance(script, str) else {"script": script}
    host = fusec.compile(**where, library=library(), dtype=dtype, reproducible=True)
    device = fusec.compile(**where, library=library(), dtype=dtype, reproducible=True, plan=host.generated.plan,
                           device_scalars=on_device)
    return host, device, on_device


def _framework(name: str):
    """(to the device, to NumPy) of a framework, or skip."""
    if name == "torch":
        torch = pytest.importorskip("torch")
        return (lambda a: torch.from_numpy(np.ascontiguousarray(a)).cuda()), (lambda a: a.cpu().numpy())
    cupy = pytest.importorskip("cupy")
    return cupy.asarray, cupy.asnumpy


def _inputs(prog, n: int, dtype: str, seed: int):
    sizes = {s: n for s in prog.dag.sizes}
    return oracle.random_inputs(prog.dag, sizes, dtype, np.random.default_rng(seed))


def _on_device(inputs, on_device, upload, dtype: str, shape=()):
    """The call's arguments: arrays uploaded, the device scalars as one-element arrays of ``shape``."""
    out = {k: upload(v) for k, v in inputs.items() if isinstance(v, np.ndarray)}
    out.update({k: v for k, v in inputs.items() if not isinstance(v, np.ndarray)})
    for name in on_device:
        out[name] = upload(np.full(shape, inputs[name], dtype))
    return out


def _host(results, download):
    results = results if isinstance(results, tuple) else (results,)
    return tuple(np.asarray(download(r)) for r in results)


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("framework", FRAMEWORKS)
@pytest.mark.parametrize("case", CASES)
def test_device_scalars_give_the_bits_of_host_scalars(case, framework, dtype, n):
    upload, download = _framework(framework)
    host, device, on_device = _programs(case, dtype)
    inputs = _inputs(host, n, dtype, seed=n)
    shape = () if framework == "cupy" else (1,)
    args = _on_device(inputs, on_device, upload, dtype, shape)
    plain = {k: (v if k in on_device else args[k]) for k, v in inputs.items()}
    expected = _host(host(**plain), download)
    for _ in range(3):  # the whole way, then warm calls (prepared, in C where it builds)
        got = _host(device(**args), download)
        for a, b in zip(got, expected):
            np.testing.assert_array_equal(a, b)
    _check(device, inputs, got)
    # a warm call reads the array as it is now: a new value, written in place
    changed = dict(inputs, **{name: float(np.asarray(-0.5 * inputs[name] + 0.25, dtype)) for name in on_device})
    for name in on_device:
        args[name][...] = changed[name]
    _check(device, changed, device(**args))


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_captured_graph_reads_the_scalar_written_between_replays(framework):
    """WAXPBY captured once with out=; alpha's array gets a new value before each replay
    (outside the graph): every replay computes with it, as host numbers could not."""
    upload, download = _framework(framework)
    _, prog, _ = _programs("waxpby", "float32")
    n = 4097
    inputs = _inputs(prog, n, "float32", seed=7)
    args = _on_device(inputs, ("alpha",), upload, "float32")
    w = upload(np.full(n, np.nan, np.float32))
    prog(**args, out={"w": w})  # warm: workspaces allocated outside the capture
    replay = _capture(framework, lambda: prog(**args, out={"w": w}))
    for alpha in (0.5, -1.0, 0.0, 3.25, 0.7):
        args["alpha"][...] = alpha
        w[...] = float("nan")
        replay()
        _check(prog, dict(inputs, alpha=alpha), download(w))


def test_a_scalar_the_gpu_computed_feeds_the_next_program_inside_a_graph():
    """AXPYDOT's r (a dot, on the device) is WAXPBY's alpha: the two calls captured
    together; u changes between replays, so r does, and w follows with no host read."""
    upload, download = _framework("cupy")
    axpydot = fusec.compile(ROOT / "scripts" / "axpydot.script", library=library(), dtype="float64")
    _, waxpby, _ = _programs("waxpby", "float64")
    n = 1000
    rng = np.random.default_rng(8)
    first = _inputs(axpydot, n, "float64", seed=8)
    second = _inputs(waxpby, n, "float64", seed=9)
    a = {k: upload(v) if isinstance(v, np.ndarray) else v for k, v in first.items()}
    z, r = upload(np.empty(n)), upload(np.empty(()))
    w = upload(np.empty(n))
    x, y = upload(second["x"]), upload(second["y"])

    def both():
        axpydot(**a, out={"z": z, "r": r})
        waxpby(x=x, y=y, alpha=r, beta=second["beta"], out={"w": w})

    both()
    replay = _capture("cupy", both)
    for _ in range(5):
        u = rng.uniform(-0.5, 0.5, n)
        a["u"][...] = upload(u)
        replay()
        alpha = float(download(r))
        _check(axpydot, dict(first, u=u), (download(z), download(r)))
        _check(waxpby, dict(second, alpha=alpha), download(w))


def _capture(framework: str, call):
    """``call`` captured in a CUDA graph of ``framework``; returns a function replaying it and waiting."""
    if framework == "torch":
        import torch
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            call()

        def replay():
            graph.replay()
            torch.cuda.synchronize()
        return replay
    import cupy
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        call()
        stream.synchronize()
        stream.begin_capture()
        call()
        graph = stream.end_capture()

    def replay():
        # the test writes the scalar and w on the current (null) stream, which a non-blocking
        # stream does not wait for: finish them first (compute-sanitizer's slower kernels let
        # the replay read w's NaN before the write of alpha landed otherwise)
        cupy.cuda.get_current_stream().synchronize()
        graph.launch(stream)
        stream.synchronize()
    return replay


def _bad(framework: str):
    """Wrong values for WAXPBY's alpha on the device, with what the error says."""
    upload, _ = _framework(framework)
    other = "torch" if framework == "cupy" else "cupy"
    bad = [(0.5, "not the host number 0.5"),
           (np.ones(1, np.float32), "not a NumPy array"),
           (upload(np.ones(2, np.float32)), "got shape (2,)"),
           (upload(np.ones((1, 1), np.float32)), "got 2 dimension(s)"),
           (upload(np.ones((), np.float64)), "has dtype float64, but the program was compiled for float32")]
    try:
        foreign, _ = _framework(other)
        bad.append((foreign(np.ones((), np.float32)), f"is a {other} array, but the other arrays are {framework}"))
    except pytest.skip.Exception:
        pass
    if framework == "torch":
        import torch
        bad.append((torch.ones((), dtype=torch.float32), "got Tensor"))  # on the CPU
    return bad


@pytest.mark.parametrize("framework", FRAMEWORKS)
def test_a_bad_device_scalar_is_refused_cold_and_warm(framework):
    upload, _ = _framework(framework)
    _, prog, _ = _programs("waxpby", "float32")
    inputs = _inputs(prog, 33, "float32", seed=3)
    good = _on_device(inputs, ("alpha",), upload, "float32")
    for warm in (False, True):
        if warm:
            prog(**good)
            prog(**good)  # the prepared call, and the C one where it builds, are hot now
        for alpha, message in _bad(framework):
            with pytest.raises(ArgumentError) as info:
                prog(**dict(good, alpha=alpha))
            assert info.value.argument == "alpha" and message in str(info.value)
        with pytest.raises(ArgumentError, match="pass a host number, not a device array"):
            prog(**dict(good, beta=upload(np.ones((), np.float32))))
