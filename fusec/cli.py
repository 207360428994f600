"""The ``fusec`` command line: ``compile``, ``space``, ``run``, ``tune``, ``tunings`` and ``perfdb``
(``build``, ``show``, ``measure-plans``, ``fit``), each a subparser below with its handler.
Their options are listed once, by argparse: ``fusec COMMAND --help``, and docs/cli.md."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import warnings
from pathlib import Path

from . import validate as check
from .errors import ArgumentError, CompileError, FusecError, FusecWarning
from .validate import MAX_EXTENT
from .version import __version__

DESCRIPTION = """\
fusec fuses sequences of BLAS-1/BLAS-2 calls, written as a short script, into a few
CUDA kernels that read each matrix as few times as the dependencies allow."""

EPILOG = """\
examples:
  fusec compile scripts/bicgk.script -o out/
  fusec space scripts/gemver.script --size n=16384 --top 5
  fusec run scripts/bicgk.script --size n=16384
  fusec tune scripts/gemver.script --size n=16384 --top 20
  fusec tunings
  fusec perfdb build
Run 'fusec COMMAND --help' for a command's options."""


def _sizes(items: list[str], symbols: tuple[str, ...]) -> dict[str, int]:
    """--size NAME=VALUE pairs; a size not given takes the value of n."""
    given: dict[str, int] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not name.strip() or not value.strip():
            raise FusecError(f"--size {item!r}: expected NAME=VALUE, e.g. n=8192")
        if value.isascii() and value.startswith("-") and value[1:].isdigit():
            raise FusecError(f"--size {item!r}: sizes must be at least 1")
        if not (value.isascii() and value.isdigit()):  # int() would take ' 5', '+5', '1_000', '٥'
            raise FusecError(f"--size {item!r}: {value!r} is not a whole number (digits 0-9 only)")
        number = int(value)
        if number < 1:
            raise FusecError(f"--size {item!r}: sizes must be at least 1")
        if number > MAX_EXTENT:
            raise FusecError(f"--size {item!r}: sizes must be at most 2**31 - 1 (a grid launches no more)")
        if name not in symbols and name != "n":
            raise FusecError(f"--size {item!r}: the script has no size {name!r}"
                             f" (its sizes: {', '.join(symbols)})")
        if given.get(name, number) != number:  # which one was meant cannot be told
            raise FusecError(f"--size {item!r}: {name} is given twice ({name}={given[name]} before)")
        given[name] = number
    missing = [s for s in symbols if s not in given]
    if missing and "n" not in given:
        raise FusecError(f"give --size for {', '.join(missing)} (or --size n=VALUE for all of them)")
    return {s: given.get(s, given.get("n")) for s in symbols}


def _script_sizes(args, dag, given: bool = True) -> dict[str, int] | None:
    """The --size values for ``dag``'s sizes (None when none given and ``given`` is false),
    no array of the script past what a GPU holds."""
    if not args.size and not given:
        return None
    sizes = _sizes(args.size, dag.sizes)
    try:
        check.sizes_fit({v.name: v.dims for v in dag.values if v.dims}, sizes, "--size")
    except ArgumentError as exc:
        raise FusecError(f"--size: {exc.message.split(': ', 1)[1]}") from None
    return sizes


def _path(text: str) -> str:
    """A path argument: '' (``-o "$OUT"`` with OUT unset) would otherwise mean the current
    folder, or the default file, without a word."""
    if not text:
        raise argparse.ArgumentTypeError("an empty path")
    return text


def _at_least(flag: str, value: int | None, low: int) -> None:
    if value is not None and value < low:
        raise FusecError(f"{flag} {value}: it must be at least {low}")


def _at_most_measured(flag: str, value: int | None) -> None:
    """Candidates measured on the GPU each compile and run: a count past MOST_MEASURED
    is a typo more likely than a wish (a wide tune takes 10-40)."""
    if value is not None and value > MOST_MEASURED:
        raise FusecError(f"{flag} {value}: at most {MOST_MEASURED:,} (each candidate is compiled and run)")


def _known_gpu(args) -> None:
    """--gpu NAME (else $FUSEC_GPU) must name a GPU with a performance database or one
    whose figures fusec knows (fusec/data/gpus.json), unless --analytic asks for the
    analytic model: a typo would otherwise choose kernels for no GPU at all."""
    flag, name = ("--gpu", args.gpu) if args.gpu is not None else ("$FUSEC_GPU", os.environ.get("FUSEC_GPU"))
    if getattr(args, "analytic", False) or (args.gpu is None and not name):
        return
    from .cost.perfdb import store
    from .target import by_name, from_device, known, slug
    device = from_device()  # the GPU present is known by its own figures (target.resolve)
    if device is not None and device.slug.startswith(slug(name)):
        return
    with warnings.catch_warnings():  # an ambiguous prefix: the predictor's lookup says so, once
        warnings.simplefilter("ignore", FusecWarning)
        found = store.find(slug(name))
    if found is None and by_name(name) is None:
        folder = store.directory()
        databases = sorted(p.stem for p in folder.glob("*.json")) if folder.is_dir() else []
        raise FusecError(f"{flag} {name!r} names no GPU fusec knows ({', '.join(sorted(known()))}) and none"
                         f" with a performance database in {folder} ({', '.join(databases) or 'none'});"
                         " add --analytic to choose kernels for it with the analytic model")


def _predictor(args, library):
    """The predictor the flags ask for: --analytic, the analytic model over the named
    GPU's figures (an unknown name gets the reference GPU's, with a warning); else the
    named GPU's performance database (fusec.cost.perfdb.predictor_for)."""
    if getattr(args, "analytic", False):
        from .cost.analytic import AnalyticPredictor
        from .target import resolve
        return AnalyticPredictor(target=resolve(args.gpu, unknown_ok=True))
    from .cost.perfdb import predictor_for
    return predictor_for(library, args.gpu)


def _load(args):
    """The library and the checked script a command works on."""
    from .api import resolve_library
    from .frontend import load_script
    library = resolve_library(args.library)
    return library, load_script(args.script, library)


def _compile(args) -> int:
    from . import nvcc
    from .api import build_program, device_dag
    from .tune import store as tuning
    nvcc.check_arch(args.arch)  # a bad one is an error before any work, with nvcc on PATH or not
    _known_gpu(args)
    library, dag = _load(args)
    if args.device_scalar:
        try:
            dag = device_dag(dag, tuple(args.device_scalar))
        except ArgumentError as exc:
            raise FusecError(f"--device-scalar: {exc.message.split(': ', 1)[1]}") from None
    sizes = _script_sizes(args, dag, given=False)
    predictor = _predictor(args, library) if getattr(args, "analytic", False) else None
    program, entry = build_program(dag, library, args.dtype, sizes=sizes, gpu=args.gpu, predictor=predictor,
                                   tuned=not args.no_tuned,
                                   reproducible=args.reproducible, spill_arch=None if args.no_nvcc else args.arch)
    out = Path(args.output)
    out.mkdir(parents=True, exist_ok=True)
    stem = f"{program.dag.name}.{args.dtype}"
    cu, cubin, plan_file = out / f"{stem}.cu", out / f"{stem}.{args.arch}.cubin", out / f"{stem}.plan.txt"
    cu.write_text(program.source, encoding="utf-8")
    cubin.unlink(missing_ok=True)  # an earlier run's, of other code: none is better than a stale one
    resources = None
    compiled_note = "nvcc: not run (--no-nvcc)"
    if not args.no_nvcc:
        if nvcc.nvcc_path() is None:
            compiled_note = "nvcc: not found on PATH; generated code not compiled"
        else:
            try:
                compiled = nvcc.compile_cubin(program.source, arch=args.arch)
            except CompileError as exc:  # its lines are those of the file written above
                plan_file.write_text(program.describe(sizes) + "\n", encoding="utf-8")  # the plan of that code
                raise CompileError(f"{exc.message}\n(the same code, line for line: {cu})") from None
            cubin.write_bytes(compiled.cubin)
            resources = compiled.resources
            compiled_note = f"nvcc: compiled for {args.arch}" + (" (cached)" if compiled.cached else "")
    plan_text = program.describe(sizes, resources)
    plan_file.write_text(plan_text + "\n", encoding="utf-8")
    print(plan_text)
    print()
    if entry is not None:
        source = ("shipped with the library" if entry.path.parent.parent == tuning.shipped_root(library)
                  else "from the tuning cache")
        sizes_tuned = ", ".join(f"{k}={v}" for k, v in entry.key.sizes)
        lent = f", tuned for the nearest size, {sizes_tuned}" if program.nearby else ""
        print(f"plan: {source}{lent} ({entry.describe()}): {entry.path}")
    print(compiled_note)
    print(f"wrote {cu} and {plan_file}")
    return 0


def _run(args) -> int:
    import numpy as np

    from . import oracle
    from .api import compile_dag
    from .runtime import cuda
    _at_least("--repeat", args.repeat, 1)
    _at_least("--warmup", args.warmup, 0)
    _at_least("--seed", args.seed, 0)  # NumPy's generators take no negative seed
    library, dag = _load(args)
    sizes = _script_sizes(args, dag)
    if args.measure and args.no_tuned:
        raise ArgumentError("--measure", "keeps what it measures in the tuning cache: leave out --no-tuned")
    if args.measure and args.reproducible:
        raise ArgumentError("--measure", "a quick tune may pick a band kernel that adds with atomics:"
                                         " leave out --reproducible or --measure")
    program = compile_dag(dag, library, args.dtype, sizes=sizes, tuned=not args.no_tuned,
                          reproducible=args.reproducible, measure=args.measure)
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
        late_before = cuda.late_samples()
        times = program.time(device, warmup=args.warmup, repeat=args.repeat, host=False)
        late = cuda.late_samples() - late_before
        with_host = program.time(device, warmup=1, repeat=args.repeat)
        name = cuda.device_name(ctx)
    sizes_text = " ".join(f"{k}={v}" for k, v in sizes.items())
    print(f"{program.dag.name} ({program.dag.file}) {args.dtype}, {sizes_text},"
          f" {len(program.kernels)} kernel(s) on {name}")
    if program.origin:
        print(f"plan   {program.origin}")
    if not program.generated.reproducible:
        print("bits   two runs may differ in the last bits: a band kernel adds its column sums with atomics"
              " (--reproducible leaves such kernels out)")
    ok = all(c.passed for c in checks)
    for c in checks:
        verdict = "ok" if c.passed else f"FAILED: {c.reason}"
        print(f"check  {c.name}: test ratio {c.ratio:.3g} (threshold {c.threshold:.3g}) {verdict}")
    median = statistics.median(times)
    nbytes = program.minimum_bytes(sizes)
    print(f"time   median {median * 1e3:.1f} us on the GPU (min {min(times) * 1e3:.1f},"
          f" max {max(times) * 1e3:.1f}) over {len(times)} runs;"
          f" {statistics.median(with_host) * 1e3:.1f} us for a whole call, the host's part in it")
    print(f"speed  {nbytes / (median * 1e-3) / 1e9:.1f} GB/s on {nbytes:,} minimum bytes")
    if late:
        print(f"late   {late} of {len(times)} runs were queued after the timing spin ended, even when taken"
              " again: the host was busy, and their times count some of its wait")
    return 0 if ok else 1


MOST_LISTED = 100_000  # combinations `fusec space --all` lists at most (GEMVER's space has 24 million)
MOST_MEASURED = 1000  # candidates `fusec tune` measures at most (--top, --layouts)


def _space(args) -> int:
    import time

    from .api import default_sizes
    from .ir.geometry import dtype_name
    from .space.combinations import build_space
    _known_gpu(args)
    _at_least("--top", None if args.all else args.top, 1)
    _at_least("--layouts", args.layouts, 1)  # before the space's seconds, not after
    if not args.all and args.top is not None and args.top > MOST_LISTED:  # as many as --all lists at most
        raise FusecError(f"--top {args.top}: at most {MOST_LISTED:,} are listed")
    library, dag = _load(args)
    sizes = default_sizes(dag, _script_sizes(args, dag, given=False))
    predictor = _predictor(args, library)
    start = time.perf_counter()
    space = build_space(dag, library, dtype_name(args.dtype), sizes, predictor)
    shown = []
    if args.layouts is not None:
        shown = space.layouts(args.layouts)
    else:
        if args.all and space.combination_count > MOST_LISTED:
            raise FusecError(f"--all: the space of {dag.file} has {space.combination_count:,} combinations,"
                             f" too many to list (at most {MOST_LISTED:,}); show the best with --top K")
        limit = None if args.all else args.top
        for combination in space.ranked():
            if limit is not None and len(shown) >= limit:
                break
            shown.append(combination)
    elapsed = time.perf_counter() - start
    print(f"{dag.name} ({dag.file}) {args.dtype}, sizes "
          + " ".join(f"{k}={v}" for k, v in sizes.items()) + f", predictor {predictor.name}")
    print(f"fusions          {len(space.fusions)}"
          f"  ({sum(len(f) > 1 for f in space.fusions)} of more than one call)")
    print(f"implementations  {space.implementation_count}")
    print(f"combinations     {space.combination_count}  (in {len(space.covers)} covers of the calls)")
    if space.cut:
        print(f"bounded          {space.cut}")
    print(f"enumerated       {len(shown)} in {elapsed:.2f} s"
          + (", the best of each layout of the heaviest kernel" if args.layouts is not None else ""))
    print()
    print(f"{'rank':>4}  {'predicted':>12}  kernels  calls fused in each kernel")
    for rank, combination in enumerate(shown, 1):
        print(f"{rank:>4}  {combination.predicted * 1e6:9.1f} us  {len(combination.plan.kernels):>7}"
              f"  {combination.plan.summary(dag)}")
    return 0


def _tune(args) -> int:
    from .space.combinations import LAYOUTS
    from .tune import store as tuning
    from .tune.search import report, tune
    _at_least("--top", args.top, 1)
    _at_least("--layouts", args.layouts, 0)
    _at_most_measured("--top", args.top)
    _at_most_measured("--layouts", args.layouts)
    _at_least("--repeat", args.repeat, 1)
    _at_least("--warmup", args.warmup, 0)
    _at_least("--seed", args.seed, 0)
    library, dag = _load(args)
    sizes = _script_sizes(args, dag)
    if args.quick and (args.top is not None or args.layouts is not None):
        raise ArgumentError("--quick", "picks its own candidates: leave out --top and --layouts")
    result = tune(dag, library, args.dtype, sizes, top=10 if args.top is None else args.top,
                  layouts=LAYOUTS if args.layouts is None else args.layouts, repeat=args.repeat,
                  warmup=args.warmup, seed=args.seed, progress=not args.quiet, quick=args.quick)
    print(report(result))
    if result.entry is not None and args.ship:
        print(f"shipped with the library: wrote {tuning.ship(result.entry, library)}")
    return 0 if result.winner is not None else 1


def _tunings(args) -> int:
    from .api import resolve_library
    from .tune import store as tuning
    library = resolve_library(args.library)
    gone = tuning.prune(library) if args.prune else []
    entries = tuning.filed(library, args.gpu)
    print(f"library {library.name} at {library.path} (hash {library.content_hash}); fusec {__version__}")
    print(f"  the tuning cache: {tuning.cache_dir('tuning', create=False)}")
    print(f"  the library's tunings: {tuning.shipped_root(library)}")
    if not entries:
        print("no entries" + (f" for GPUs named {args.gpu!r}" if args.gpu else ""))
    for shipped in (False, True):
        rows = [e for e in entries if e.shipped == shipped]
        if not rows:
            continue
        print()
        print("shipped with the library:" if shipped else "in the tuning cache:")
        # columns as wide as their longest entry (the distributed stages' names are long)
        table = [(e, e.script.split(" ")[0], ",".join(f"{k}={v}" for k, v in e.sizes) or "?") for e in rows]
        gpu_w = max(18, *(len(e.gpu) for e in rows))
        script_w = max(10, *(len(script) for _, script, _ in table))
        sizes_w = max(22, *(len(sizes) for _, _, sizes in table))
        print(f"  {'gpu':{gpu_w}s} {'script':{script_w}s} {'dtype':8s} {'sizes':{sizes_w}s} {'measured':>11s}"
              f"  {'date':10s}  usable?")
        for e, script, sizes in table:
            measured = f"{e.measured_us:.1f} us" if e.measured_us is not None else "?"
            print(f"  {e.gpu:{gpu_w}s} {script:{script_w}s} {e.dtype:8s} {sizes:{sizes_w}s}"
                  f" {measured:>11s}  {e.date[:10]:10s}  {'yes' if not e.why_unused else 'no: ' + e.why_unused}")
    stale = [e for e in entries if e.stale]
    if gone:
        print(f"\npruned {len(gone)} stale file(s) from the library's tunings:")
        print("\n".join(f"  {path}" for path in gone))
    elif stale:
        print(f"\n{len(stale)} shipped file(s) are stale (built from library code as it was);"
              " 'fusec tunings --prune' deletes them")
    broken = [e for e in entries if e.script == "?"]  # rows of '?': the path is all that tells them apart
    if broken:
        print(f"\n{len(broken)} file(s) do not parse (listed with '?' above); fix or delete them:")
        print("\n".join(f"  {e.path}" for e in broken))
    unjudged = [e for e in entries if e.shipped and not e.judged]
    if unjudged:
        print(f"\n{len(unjudged)} shipped file(s) cannot be judged (they record no library files, or"
              " not those their key is of); 'fusec tunings --prune' keeps them")
    return 0


def parser() -> argparse.ArgumentParser:
    from .space.combinations import LAYOUTS
    top = argparse.ArgumentParser(prog="fusec", description=DESCRIPTION, epilog=EPILOG,
                                  formatter_class=argparse.RawDescriptionHelpFormatter)
    top.add_argument("--version", action="version", version=f"fusec {__version__}")
    commands = top.add_subparsers(dest="command", metavar="COMMAND")

    def sizes(sub, text: str, required: bool = False):
        sub.add_argument("--size", action="append", default=[], metavar="NAME=VALUE", required=required,
                         help=text)

    def gpu(sub):
        sub.add_argument("--gpu", metavar="NAME", default=None,
                         help="the GPU to choose kernels for: its name or a prefix of it, e.g. h100"
                              " (default: $FUSEC_GPU, else the GPU present); a name with neither a"
                              " performance database nor figures in fusec/data/gpus.json is an error"
                              " unless --analytic is given")
        sub.add_argument("--analytic", action="store_true",
                         help="choose kernels with the analytic model, over the figures of --gpu NAME"
                              " (the reference GPU's, with a warning, for a name fusec does not know)")

    def reproducible(sub):
        sub.add_argument("--reproducible", action="store_true",
                         help="only kernels whose every run gives the same bits: leaves out band kernels"
                              " that add column sums with atomics (ATAX then runs striped, BiCGK as a"
                              " tile kernel), a tuned plan with one included")

    def common(sub):
        sub.add_argument("script", metavar="SCRIPT", type=_path,
                         help="the script to compile (e.g. scripts/bicgk.script)")
        sub.add_argument("--library", metavar="DIR", type=_path, default=None,
                         help="library of elementary functions (default: $FUSEC_LIBRARY, else the bundled"
                              " fusec/data/blas)")
        sub.add_argument("--dtype", choices=("float32", "float64"), default="float32",
                         help="precision of the compiled program (default: float32)")

    comp = commands.add_parser(
        "compile", help="write the generated CUDA and a readable plan",
        description="Generate CUDA for SCRIPT and a readable plan (kernels, the calls in each,"
                    " launch shapes). Works without a GPU; where nvcc is on PATH it also compiles"
                    " for --arch and reports registers and shared memory per kernel.")
    common(comp)
    comp.add_argument("-o", "--output", metavar="DIR", type=_path, default=".",
                      help="where to write NAME.DTYPE.cu, NAME.DTYPE.plan.txt (and the cubin); default: .")
    comp.add_argument("--arch", default="sm_90", help="nvcc target, sm_80 or later (default: sm_90, the H100)")
    comp.add_argument("--no-nvcc", action="store_true", help="only generate, do not run nvcc")
    comp.add_argument("--no-tuned", action="store_true",
                      help="ignore the tuning cache and the plans shipped with the library: take the"
                           " best-predicted combination even where 'fusec tune' measured another faster,"
                           " at these sizes or at the nearest tuned ones (within a factor of 2)")
    reproducible(comp)
    comp.add_argument("--device-scalar", metavar="NAME", action="append", default=[],
                      help="a scalar input the program's callers pass as a one-element device array, read"
                           " by the kernels from device memory (fusec.compile's device_scalars;"
                           " repeatable)")
    gpu(comp)
    sizes(comp, "problem size to choose kernels for and show launch shapes for (repeatable;"
                " n=VALUE sets every size not given; without --size, every size is 8192)")
    comp.set_defaults(handler=_compile)

    space = commands.add_parser(
        "space", help="show the optimization space and the best-predicted combinations",
        description="Enumerate the optimization space of SCRIPT (paper 4.2): fusions (fusible sets of"
                    " calls), their implementations (routine order, block shape, serial iterations)"
                    " and combinations (implementations covering every call), and list the"
                    " combinations in the order the predictor ranks them for --size.")
    common(space)
    sizes(space, "problem size to predict for (repeatable; n=VALUE sets every size not given;"
                 " without --size, every size is 8192)")
    which = space.add_mutually_exclusive_group()
    which.add_argument("--top", type=int, default=10, metavar="K",
                       help="show the K best (default: 10; at most 100,000)")
    which.add_argument("--all", action="store_true",
                       help="enumerate and show every combination (refused past 100,000 of them)")
    which.add_argument("--layouts", type=int, metavar="L",
                       help="show the best-predicted combination of each of the L best-predicted layouts"
                            " of the heaviest kernel (calls, implementations, shape, serial axis, lag),"
                            " best first: what 'fusec tune --layouts' measures past its top K")
    gpu(space)
    space.set_defaults(handler=_space)

    run = commands.add_parser(
        "run", help="run on random inputs on the GPU, check and time",
        description="Run SCRIPT on the GPU on random inputs (arrays uniform in [-0.5, 0.5], scalars in"
                    " [-1, 1]), check every"
                    " output against the float64 oracle with the BLAS test ratio, and time the"
                    " kernels with CUDA events: the GPU's time (a spinning kernel goes first, so"
                    " the host's launch overhead is not counted), and the time of a whole call"
                    " (binding or its prepared call, allocating outputs, launching). Bandwidth"
                    " is on minimum bytes (GPU time): each input read once, each output written"
                    " once. Exits 1 if a check fails.")
    common(run)
    sizes(run, "a size of the script (repeatable); n=VALUE sets every size not given", required=True)
    run.add_argument("--repeat", type=int, default=20, help="timed runs (default: 20; the median is reported)")
    run.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    run.add_argument("--seed", type=int, default=0, help="seed of the random inputs (default: 0)")
    run.add_argument("--no-tuned", action="store_true",
                     help="ignore the tuning cache and the plans shipped with the library: run the"
                          " best-predicted combination")
    run.add_argument("--measure", action="store_const", const=True, default=None,
                     help="where nothing is tuned for these sizes, run a quick tune first ('fusec tune"
                          " --quick', seconds) and keep its winner in the tuning cache, instead of"
                          " predicting (default: $FUSEC_MEASURE, else off)")
    reproducible(run)
    run.set_defaults(handler=_run)

    tune = commands.add_parser(
        "tune", help="measure the best-predicted combinations on the GPU and remember the fastest",
        description="Compile the K combinations the predictor ranks first for --size, and the"
                    " best-predicted one of each of the next L layouts of the heaviest kernel (its"
                    " calls, implementations, shape, serial axis and lag; see --layouts), with nvcc in"
                    " parallel; run each on random inputs and check it against the float64 oracle"
                    " before timing it with CUDA events (warm-up, then the median of --repeat runs;"
                    " the GPU's time, without the host's launch overhead, which is the same for"
                    " every candidate)."
                    " A candidate that is wrong, or fails to compile or launch, is reported and"
                    " never chosen. The plan the tuning cache already holds for the same key is"
                    " measured again beside them, so tuning anew never keeps a slower one (after a"
                    " change to the library, the plan it shipped for its previous version)."
                    " Where the winner's kernels can walk their grid both ways, it is measured"
                    " again alternating the direction from launch to launch and always forwards,"
                    " and the faster is kept with it."
                    " Ends with a table (predicted rank, predicted and measured time,"
                    " GB/s on minimum bytes) and stores the fastest correct combination in the"
                    " tuning cache, keyed on the script, the library, the sizes, the precision, the"
                    " GPU and the fusec version; 'fusec compile', 'fusec run' and fusec.compile()"
                    " then use it. Needs the GPU it tunes for. Exits 1 if no candidate passes.",
        epilog="The cache lives in $FUSEC_CACHE_DIR/tuning (default ~/.cache/fusec/tuning),"
               " one JSON file per key in a folder per GPU; delete a file or the folder to forget.")
    common(tune)
    sizes(tune, "a size to tune for (repeatable); n=VALUE sets every size not given", required=True)
    tune.add_argument("--top", type=int, default=None, metavar="K",
                      help="how many best-predicted combinations to measure (default: 10)")
    tune.add_argument("--layouts", type=int, default=None, metavar="L",
                      help="also measure the best-predicted combination of each of the L best-predicted"
                           " layouts (calls, implementations, block shape, serial axis, lag) of the"
                           " heaviest kernel, not among the top K: the predictor's errors of 10 %% or so"
                           f" between shapes push a fast one far down the ranking (default: {LAYOUTS}; 0: none)")
    tune.add_argument("--quick", action="store_true",
                      help="measure about ten candidates in two rounds instead of the top K and L layouts:"
                           " the first choice and the best of the 2 best layouts (its own and the next),"
                           " the best-predicted of each structure"
                           " of kernel families (band, tile, horizontal, striped, held ...), the plan tuned"
                           " for the nearest size and another routine order of each fused plan; then further"
                           " layouts and routine orders of the winner's cover and families, and of those"
                           " timed within 2 %% of it (what"
                           " fusec.compile(measure=True) and 'fusec run --measure' do where nothing is tuned)")
    tune.add_argument("--repeat", type=int, default=20,
                      help="timed runs of each candidate (default: 20; the median counts)")
    tune.add_argument("--warmup", type=int, default=3, help="untimed runs of each candidate first (default: 3)")
    tune.add_argument("--seed", type=int, default=0,
                      help="seed of the random inputs every candidate is checked on (default: 0)")
    tune.add_argument("-q", "--quiet", action="store_true",
                      help="no progress on stderr (the table still goes to stdout)")
    tune.add_argument("--ship", action="store_true",
                      help="also write the winner into the library's own tunings/ folder, to commit with it:"
                           " 'fusec compile' on another machine with the same GPU, library and fusec"
                           " version then runs it without tuning")
    tune.set_defaults(handler=_tune)

    listing = commands.add_parser(
        "tunings", help="list the tuned plans of the cache and those a library ships",
        description="List the entries of the tuning cache and of the library's tunings/ folder"
                    " (written by 'fusec tune --ship'): GPU, script, precision, sizes, the winner's"
                    " measured time, the date, and whether 'fusec compile' can use it with the"
                    " library as it is and this fusec (an entry records the library pieces its"
                    " plan's kernels are built from, and one made before any of them, or fusec's"
                    " version, changed is never used; a new function or implementation, or an edit"
                    " to code the plan does not run, leaves it in use).",
        epilog="The cache is looked in first; a library's shipped plan runs where the cache has"
               " none for the same key.")
    listing.add_argument("--library", metavar="DIR", type=_path, default=None,
                         help="the library whose shipped plans to list (default: $FUSEC_LIBRARY, else the"
                              " bundled fusec/data/blas)")
    listing.add_argument("--gpu", metavar="NAME", default=None,
                         help="only entries for GPUs whose folder starts with NAME, e.g. h100 (any case;"
                              " 'NVIDIA H100 80GB HBM3' works too)")
    listing.add_argument("--prune", action="store_true",
                         help="delete the library's shipped files whose plans are built from library"
                              " pieces that have changed since (stale: never used again); files that"
                              " cannot be judged and the cache are left alone")
    listing.set_defaults(handler=_tunings)

    perfdb = commands.add_parser(
        "perfdb", help="build or inspect the performance database predictions come from",
        description="The performance database (paper 4.2): every library routine timed on one GPU"
                    " model in a simulated fusion environment (block shape, serial iterations,"
                    " blocks per SM), which is what fusec predicts kernels from. One file per GPU,"
                    " fusec/data/perfdb/<gpu>.json ($FUSEC_PERFDB names another folder). See"
                    " docs/design/performance-database.md.")
    actions = perfdb.add_subparsers(dest="action", metavar="ACTION", required=True,
                                    help="build (time the routines on the GPU present), show (summarise a"
                                         " database), measure-plans (time plans at random sizes) or fit"
                                         " (fit the database's correction to those times)")
    build = actions.add_parser(
        "build", help="time every routine of a library on the GPU present and write its database",
        description="Time every routine of the library (each implementation, block shape, serial"
                    " iterations and axis, section, 1 to 16 blocks per SM held by extra shared memory,"
                    " float32 and float64) on the GPU present, and write fusec/data/perfdb/<gpu>.json atomically"
                    " with the library's hash and the device, driver and nvcc versions. Replaces a"
                    " damaged or stale file; with one --dtype, keeps the other precision's timings of"
                    " a usable file. About a minute on an H100.")
    build.add_argument("--library", metavar="DIR", type=_path, default=None,
                       help="library of elementary functions (default: $FUSEC_LIBRARY, else the bundled"
                              " fusec/data/blas)")
    build.add_argument("--dtype", choices=("float32", "float64", "both"), default="both",
                       help="precisions to time (default: both)")
    build.add_argument("-o", "--output", metavar="DIR", type=_path, default=None,
                       help="folder to write into (default: $FUSEC_PERFDB, else the bundled fusec/data/perfdb)")
    build.add_argument("--missing", action="store_true",
                       help="time only the routine keys the GPU's database lacks (shapes added to the"
                            " space since it was built, routines whose code changed) and keep its other"
                            " timings")
    build.add_argument("-q", "--quiet", action="store_true", help="no progress on stderr")
    build.set_defaults(handler=_perfdb_build)
    show = actions.add_parser(
        "show", help="summarise a database (device, library, routines timed)",
        description="Print what a performance database holds: the device and library it timed,"
                    " when, the launch cost, how many routine keys per precision and geometry, and"
                    " with --routine every timing of one routine.")
    show.add_argument("--gpu", metavar="NAME", default=None,
                      help="the GPU whose database to show, by name or prefix (default: $FUSEC_GPU, else the"
                           " GPU present)")
    show.add_argument("--dir", metavar="DIR", type=_path, default=None,
                      help="folder of databases (default: $FUSEC_PERFDB, else the bundled fusec/data/perfdb)")
    show.add_argument("--routine", metavar="NAME", default=None, help="list the timings of one routine")
    show.set_defaults(handler=_perfdb_show)
    _perfdb_plans(actions)
    return top


def _perfdb_plans(actions) -> None:
    """``fusec perfdb measure-plans`` and ``fusec perfdb fit`` (fusec.tune.plans, fusec.cost.fit)."""
    from .tune import plans
    measure = actions.add_parser(
        "measure-plans", help="time plans at sizes drawn at random: the data 'fusec perfdb fit' fits",
        description="For draw after draw of sizes (seeded; sides 500 to 20000, square and rectangular;"
                    " vectors of as many elements for scripts without a matrix), every SCRIPT in each"
                    " precision: compile, check and time the top K best-predicted plans, the best of the"
                    " L best layouts and the best of every layout class (kernel family, threads per"
                    " block, serial axis) of the space, and append them, with each kernel's features and"
                    " database price, to the GPU's training file after each point. Points the file holds"
                    " are skipped: run again with the same --seed to go on. With --again, measure anew"
                    " the plans of the points the file holds that the database no longer prices as"
                    " recorded. Needs the GPU.")
    measure.add_argument("scripts", nargs="+", metavar="SCRIPT", type=_path,
                         help="scripts to measure (e.g. scripts/*.script)")
    measure.add_argument("--library", metavar="DIR", type=_path, default=None,
                         help="library of elementary functions (default: $FUSEC_LIBRARY, else the bundled"
                              " fusec/data/blas)")
    measure.add_argument("--dtype", choices=("float32", "float64", "both"), default="both",
                         help="precisions to measure (default: both)")
    measure.add_argument("--seed", type=int, default=0, help="seed of the size draws (default: 0)")
    measure.add_argument("--draws", type=int, default=plans.DRAWS,
                         help=f"draws of sizes per script and precision, at most (default: {plans.DRAWS})")
    measure.add_argument("--budget", type=float, default=None, metavar="SECONDS",
                         help="start no point expected to end after this many seconds (the first always"
                              f" starts; a point {plans.GRACE:.0f} s past it stops measuring; default: no limit)")
    measure.add_argument("--top", type=int, default=plans.TOP, metavar="K",
                         help=f"best-predicted plans measured, with their twins (default: {plans.TOP})")
    measure.add_argument("--layouts", type=int, default=plans.LAYOUTS, metavar="L",
                         help=f"best-predicted layouts whose best plan is measured (default: {plans.LAYOUTS})")
    measure.add_argument("--repeat", type=int, default=20, help="timed runs per plan, median kept (default: 20)")
    measure.add_argument("--warmup", type=int, default=3, help="untimed runs first (default: 3)")
    measure.add_argument("-o", "--output", metavar="FILE", type=_path, default=None,
                         help="training file (default: <gpu>.json in $FUSEC_TRAINING, else in fusec/data/training)")
    measure.add_argument("--again", action="store_true",
                         help="draw nothing: at the points the training file holds of these SCRIPTs, priced by"
                              " this database, measure again each plan the cost model now prices other than"
                              " recorded (it or the code it prices changed since) and record its time, price and"
                              " features anew, keeping the other plans (--seed, --draws, --top and --layouts do"
                              " not apply; --budget, --repeat and --warmup do)")
    measure.add_argument("-q", "--quiet", action="store_true", help="no progress bars on stderr")
    measure.set_defaults(handler=_perfdb_measure_plans)
    fit = actions.add_parser(
        "fit", help="fit the correction of a database's prices to measured plan times (no GPU needed)",
        description="Fit, per kernel class, the coefficients of the correction exp(w . features) of the"
                    " performance database's prices to the plan times in the GPU's training file"
                    " (least squares on log time; docs/design/performance-database.md), print how the"
                    " first choice and Spearman's rho among each point's measured plans compare with"
                    " the database alone (in sample and cross-validated by point), and write"
                    " perfdb/corrections/<gpu>.json, which predictions then use. It fits two sets of"
                    " features, without and with the block size's indicators (threads_1024, threads_128),"
                    " and keeps the one whose first choices are better cross-validated (the geometric"
                    " mean; the set with them must be better by 0.5 %, else the set without stays)."
                    " That choice is made on the same points it is"
                    " scored on, so the cross-validated score it reports is optimistic by that one"
                    " choice. Not written when the cross-validated first choice is worse than the"
                    " database's alone, unless --force.")
    fit.add_argument("--gpu", metavar="NAME", default=None,
                     help="the GPU whose database to correct (default: $FUSEC_GPU, else the GPU present)")
    fit.add_argument("--library", metavar="DIR", type=_path, default=None,
                     help="library of elementary functions (default: $FUSEC_LIBRARY, else the bundled"
                              " fusec/data/blas)")
    fit.add_argument("--training", metavar="FILE", type=_path, default=None,
                     help="training file (default: <gpu>.json in $FUSEC_TRAINING, else in fusec/data/training)")
    fit.add_argument("--ridge", type=float, default=None, metavar="R",
                     help="weight pulling each coefficient towards 0, per point (default: fusec.cost.fit.RIDGE)")
    fit.add_argument("--absolute", action="store_true",
                     help="fit the level of each point's times too (default: only how its plans compare)")
    fit.add_argument("--folds", type=int, default=None,
                     help="folds of the cross-validation, which scores the fit and chooses its features"
                          " (default: 10)")
    fit.add_argument("--force", action="store_true", help="write the fit even when it scores worse than none")
    fit.add_argument("-o", "--output", metavar="FILE", type=_path, default=None,
                     help="where to write (default: corrections/<gpu>.json beside the database)")
    fit.set_defaults(handler=_perfdb_fit)


def _perfdb_build(args) -> int:
    from .cost.perfdb.commands import build_command
    return build_command(args)


def _perfdb_show(args) -> int:
    from .cost.perfdb.commands import show_command
    return show_command(args)


def _perfdb_measure_plans(args) -> int:
    from .cost.perfdb.commands import measure_plans_command
    return measure_plans_command(args)


def _perfdb_fit(args) -> int:
    from .cost.perfdb.commands import fit_command
    return fit_command(args)


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
        except KeyboardInterrupt:  # Ctrl-C: the shell's exit status, no traceback
            print("fusec: interrupted", file=sys.stderr)
            return 130
        except BrokenPipeError:  # `fusec tunings | head`: the reader has all it wanted
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
            return 1
        except OSError as exc:  # a missing script, an output path that is a file...
            blocker = _file_in_the_way(exc)
            where = f": {exc.filename}" if exc.filename else ""
            print(f"fusec: error: {blocker} is a file, not a folder" if blocker is not None
                  else f"fusec: error: {exc.strerror or exc}{where}", file=sys.stderr)
            return 1


def _file_in_the_way(exc: OSError) -> Path | None:
    """The file where ``exc`` needed a folder (``-o FILE``, ``-o FILE/sub``), which
    mkdir reports as "File exists" or "Not a directory"; None for other errors."""
    if not isinstance(exc, (FileExistsError, NotADirectoryError)) or not exc.filename:
        return None
    from .validate import file_in_the_way
    return file_in_the_way(Path(os.fsdecode(exc.filename)))


def _show_warning(message, category, filename, lineno, file=None, line=None) -> None:
    print(f"fusec: warning: {message}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
