"""Which launch binding: PyCUDA's, or fusec's C extension (with and without its warm call in C)?

    python -m experiments.binding_ab [--scripts bicgk,gemver,axpydot] [--n 1024,4096] [--calls 500]

Question (issue 45): PyCUDA is the binding the project specifies; does fusec's
own C extension still earn its place? Measured here, in one process on one GPU:

1. One launch of an empty kernel, host µs: PyCUDA's ``prepared_async_call`` (on
   PyCUDA's own module and stream) against the extension's ``launch`` (on any
   stream: CuPy's, PyTorch's).
2. A warm program call, host µs per call back to back (CuPy arrays, fp32): the C
   FastCall, and the same prepared call run in Python (launches through the
   extension), and a CUDA graph replay of the call (CuPy stream capture).

The answer is written in experiments/README.md; the numbers print here.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from bench.graphs import per_call_us  # the same clock as the benchmark's

ROOT = Path(__file__).resolve().parent.parent


def empty_launches(calls: int) -> None:
    import cupy

    from fusec import nvcc
    from fusec.runtime import cuda, native
    source = 'extern "C" __global__ void empty() {}\n'
    with cuda.context() as ctx:
        cubin = nvcc.compile_cubin(source, arch=cuda.arch_of(ctx)).cubin
        function = cuda.driver().module_from_buffer(cubin).get_function("empty")
        function.prepare("")
        ext = native.require()
        ours = ext.get_function(ext.load_module(cubin), "empty")
        sync = cuda.synchronize
        pycuda_us = per_call_us(lambda: function.prepared_async_call((1, 1, 1), (32, 1, 1), None), sync, calls)
        stream = cupy.cuda.get_current_stream().ptr
        ours_us = per_call_us(lambda: ext.launch(ours, 1, 32, 0, stream, b""), sync, calls)
    print(f"one empty launch, host us: PyCUDA prepared_async_call {pycuda_us:.2f},"
          f" extension launch {ours_us:.2f}")


def warm_calls(script: str, n: int, calls: int) -> None:
    import cupy

    import fusec
    from bench.fusion import device_inputs
    from bench.peers import default_vector_size, script_sizes
    path = ROOT / "scripts" / f"{script}.script"
    dag = fusec.compile(path, dtype="float32").dag
    sizes = script_sizes(dag, n, default_vector_size(n, "float32"))
    program = fusec.compile(path, dtype="float32", sizes=sizes)
    inputs = device_inputs(cupy, dag, sizes, "float32", seed=1)
    sync = cupy.cuda.runtime.deviceSynchronize
    gpu = statistics.median(program.time(inputs, repeat=30, host=False)) * 1e3
    in_c = per_call_us(lambda: program(**inputs), sync, calls)
    program._make_hot = lambda *args: None  # the study's lever: the prepared call stays in Python
    program._hot = None
    in_python = per_call_us(lambda: program(**inputs), sync, calls)
    first = program(**inputs)
    results = first if isinstance(first, tuple) else (first,)
    out = {name: cupy.empty_like(r) for name, r in zip(program.outputs, results)}
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        program(**inputs, out=out)
        stream.synchronize()
        stream.begin_capture()
        program(**inputs, out=out)
        graph = stream.end_capture()
    replay = per_call_us(lambda: graph.launch(stream), stream.synchronize, calls)
    print(f"{script} n={n}: GPU {gpu:.1f} us; warm call C {in_c:.1f}, Python {in_python:.1f},"
          f" graph replay {replay:.1f} us per call")
    program.release()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--scripts", default="bicgk,gemver,axpydot")
    parser.add_argument("--n", default="1024,4096")
    parser.add_argument("--calls", type=int, default=500)
    args = parser.parse_args(argv)
    import cupy
    print(cupy.cuda.runtime.getDeviceProperties(0)["name"].decode())
    empty_launches(args.calls)
    for script in args.scripts.split(","):
        for n in (int(x) for x in args.n.split(",")):
            warm_calls(script, n, args.calls)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
