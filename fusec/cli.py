"""The ``fusec`` command line.

    fusec compile SCRIPT --library DIR [--dtype float32|float64] [-o DIR] [--arch sm_90]
    fusec run SCRIPT --library DIR --size n=8192 [--dtype ...] [--repeat 20]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import warnings
from pathlib import Path

from . import __version__
from .errors import FusecError, FusecWarning

DESCRIPTION = """\
fusec fuses sequences of BLAS-1/BLAS-2 calls, written as a short script, into a few
CUDA kernels that read each matrix as few times as the dependencies allow."""

EPILOG = """\
examples:
  fusec compile scripts/bicgk.script --library library/blas -o out/
  fusec run scripts/bicgk.script --library library/blas --size n=16384
Run 'fusec COMMAND --help' for a command's options."""


def _sizes(items: list[str], symbols: tuple[str, ...]) -> dict[str, int]:
    """--size NAME=VALUE pairs; a size not given takes the value of n."""
    given: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise FusecError(f"--size {item!r}: expected NAME=VALUE, e.g. n=8192")
        try:
            number = int(value)
        except ValueError:
            raise FusecError(f"--size {item!r}: {value!r} is not a whole number") from None
        if number < 1:
            raise FusecError(f"--size {item!r}: sizes must be at least 1")
        if name not in symbols and name != "n":
            raise FusecError(f"--size {item!r}: the script has no size {name!r}"
                             f" (its sizes: {', '.join(symbols)})")
        given[name] = number
    missing = [s for s in symbols if s not in given]
    if missing and "n" not in given:
        raise FusecError(f"give --size for {', '.join(missing)} (or --size n=VALUE for all of them)")
    return {s: given.get(s, given.get("n")) for s in symbols}


def _compile(args) -> int:
    from .api import compile as compile_program
    from . import nvcc
    program = compile_program(args.script, args.library, args.dtype)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{program.dag.name}.{args.dtype}"
    sizes = _sizes(args.size, program.dag.sizes) if args.size else None
    cu = out / f"{stem}.cu"
    cu.write_text(program.source, encoding="utf-8")
    resources = None
    compiled_note = "nvcc: not run (--no-nvcc)"
    if not args.no_nvcc:
        if nvcc.nvcc_path() is None:
            compiled_note = "nvcc: not found on PATH; generated code not compiled"
        else:
            compiled = nvcc.compile_cubin(program.source, arch=args.arch)
            (out / f"{stem}.{args.arch}.cubin").write_bytes(compiled.cubin)
            resources = compiled.resources
            compiled_note = f"nvcc: compiled for {args.arch}" + (" (cached)" if compiled.cached else "")
    plan_text = program.describe(sizes, resources)
    (out / f"{stem}.plan.txt").write_text(plan_text + "\n", encoding="utf-8")
    print(plan_text)
    print()
    print(compiled_note)
    print(f"wrote {cu} and {out / (stem + '.plan.txt')}")
    return 0


def _run(args) -> int:
    import numpy as np
    from .api import compile as compile_program
    from . import oracle
    from .runtime import cuda
    program = compile_program(args.script, args.library, args.dtype)
    sizes = _sizes(args.size, program.dag.sizes)
    library = program.generated.library
    rng = np.random.default_rng(args.seed)
    host = oracle.random_inputs(program.dag, sizes, program.dtype, rng)
    cuda.driver()  # a clear error when PyCUDA or the GPU is missing
    import pycuda.gpuarray as gpuarray
    with cuda.context() as ctx:
        device = {k: (gpuarray.to_gpu(v) if isinstance(v, np.ndarray) else v) for k, v in host.items()}
        results = program.run(device, poison=True)
        results = results if isinstance(results, tuple) else (results,)
        computed = {name: (r.get() if hasattr(r, "get") else r) for name, r in zip(program.outputs, results)}
        checks = oracle.check_outputs(program.dag, library, host, computed, program.dtype)
        times = program.time(device, warmup=args.warmup, repeat=args.repeat)
        name = cuda.device_name(ctx)
    sizes_text = " ".join(f"{k}={v}" for k, v in sizes.items())
    print(f"{program.dag.name} ({program.dag.file}) {args.dtype}, {sizes_text},"
          f" {len(program.kernels)} kernel(s) on {name}")
    ok = all(c.passed for c in checks)
    for c in checks:
        verdict = "ok" if c.passed else f"FAILED: {c.reason}"
        print(f"check  {c.name}: test ratio {c.ratio:.3g} (threshold {c.threshold:.3g}) {verdict}")
    median = statistics.median(times)
    nbytes = program.minimum_bytes(sizes)
    print(f"time   median {median * 1e3:.1f} us (min {min(times) * 1e3:.1f}, max {max(times) * 1e3:.1f})"
          f" over {len(times)} runs")
    print(f"speed  {nbytes / (median * 1e-3) / 1e9:.1f} GB/s on {nbytes:,} minimum bytes")
    return 0 if ok else 1


def parser() -> argparse.ArgumentParser:
    top = argparse.ArgumentParser(prog="fusec", description=DESCRIPTION, epilog=EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"fusec {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")

    def common(sub):
        sub.add_argument("script", metavar="SCRIPT", help="the script to compile (e.g. scripts/bicgk.script)")
        sub.add_argument("--library", metavar="DIR", default=None,
                         help="library of elementary functions (default: the bundled library/blas)")
        sub.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                         help="precision of the compiled program (default: float32)")

    comp = commands.add_parser(
        "compile", help="write the generated CUDA and a readable plan",
        description="Generate CUDA for SCRIPT and a readable plan (kernels, the calls in each,"
                    " launch shapes). Works without a GPU; where nvcc is on PATH it also compiles"
                    " for --arch and reports registers and shared memory per kernel.")
    common(comp)
    comp.add_argument("-o", "--output", metavar="DIR", default=".",
                      help="where to write NAME.DTYPE.cu, NAME.DTYPE.plan.txt (and the cubin); default: .")
    comp.add_argument("--arch", default="sm_90", help="nvcc target (default: sm_90, the H100)")
    comp.add_argument("--no-nvcc", action="store_true", help="only generate, do not run nvcc")
    comp.add_argument("--size", action="append", default=[], metavar="NAME=VALUE",
                      help="sizes to show launch shapes for (repeatable; n=VALUE sets every size)")
    comp.set_defaults(handler=_compile)

    run = commands.add_parser(
        "run", help="run on random inputs on the GPU, check and time",
        description="Run SCRIPT on the GPU on random inputs (uniform in [-0.5, 0.5]), check every"
                    " output against the float64 oracle with the BLAS test ratio, and time the"
                    " kernels with CUDA events. Bandwidth is on minimum bytes: each input read"
                    " once, each output written once. Exits 1 if a check fails.")
    common(run)
    run.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", required=True,
                     help="a size of the script (repeatable); n=VALUE sets every size not given")
    run.add_argument("--repeat", type=int, default=20, help="timed runs (default: 20; the median is reported)")
    run.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    run.set_defaults(handler=_run)
    return top


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    if args.command is None:
        parser().print_help()
        return 2
    with warnings.catch_warnings():
        warnings.simplefilter("always", FusecWarning)
        warnings.showwarning = _show_warning
        try:
            return args.handler(args)
        except FusecError as exc:
            print(f"fusec: error: {exc}", file=sys.stderr)
            return 1


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"fusec: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
