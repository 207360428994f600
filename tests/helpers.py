"""Shared test helpers: paths, the real library, compiled programs, sizes, the examples and the
Python blocks of the documentation."""

from __future__ import annotations

import ast
import contextlib
import functools
import os
import re
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

from fusec import data

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "scripts").glob("*.script"))
LIBRARY = data.LIBRARY  # the installed package's library (a wheel's, where the suite runs against one)
DTYPES = ("float32", "float64")


@contextlib.contextmanager
def no_gpu_named():
    """The shared programs are compiled for no GPU named: where none is present fusec
    warns that it predicts with the analytic model, as it should. Which test compiles a
    shared program first depends on the order, so the warning is silenced here, where
    it is expected, and nowhere else."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "no GPU here and none named")
        yield


def own_cache(monkeypatch, tmp_path) -> Path:
    """A tuning and cubin cache of this test's own, and no GPU named from outside: the
    folder ($FUSEC_CACHE_DIR) a tuning test writes to."""
    folder = tmp_path / "cache"
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(folder))
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    return folder


@functools.lru_cache(maxsize=None)
def library():
    from fusec.library.loader import load_library
    return load_library(LIBRARY)


@functools.lru_cache(maxsize=None)
def script_dag(script: str):
    """A bundled script's checked DAG, without compiling it: cheap enough for
    parametrizing at collection, where a program (space search, ptxas) is not."""
    from fusec.frontend import load_script
    return load_script(ROOT / "scripts" / f"{script}.script", library())


@functools.lru_cache(maxsize=None)
def program(script: str, dtype: str):
    import fusec
    with no_gpu_named():
        return fusec.compile(ROOT / "scripts" / f"{script}.script", library(), dtype)


@functools.lru_cache(maxsize=None)
def tile_program(script: str, dtype: str, *, plain: bool = False):
    """The program of the best-predicted plan without band kernels: for tests of the
    tile geometry's code, which the predictor may rank below a band plan. ``plain``:
    nor kernels of several parts (horizontal, striped, held), which a GPU's database
    may rank first (the H200's: GESUMMV's two gemvs side by side)."""
    import fusec
    from fusec.api import default_sizes
    from fusec.cost.perfdb import predictor_for
    from fusec.frontend import load_script
    from fusec.space.combinations import build_space
    path = ROOT / "scripts" / f"{script}.script"
    dag = load_script(path, library())
    with no_gpu_named():
        predictor = predictor_for(library(), None)
    space = build_space(dag, library(), dtype, default_sizes(dag, None), predictor)
    plan = space.best_where(lambda plan: not plan.uses_band
                            and not (plain and any(k.composite for k in plan.kernels))).plan
    return fusec.compile(path, library(), dtype, plan=plan)


def compile_for_this_gpu(sources) -> None:
    """nvcc for the GPU present, in parallel, every distinct source once: a GPU test module
    compiles its programs up front so that running them finds each in nvcc's cache. Line
    information where FUSEC_LINEINFO is set (compute-sanitizer's reports)."""
    import os

    from fusec import nvcc
    from fusec.runtime import cuda
    with cuda.context() as ctx:
        arch = cuda.arch_of(ctx)
    nvcc.compile_many(list(dict.fromkeys(sources)), arch, lineinfo=os.environ.get("FUSEC_LINEINFO") == "1")


def parts_apart(plan, fusion):
    """The same kernels, each ``fusion`` kernel (a plan class of several parts: horizontal,
    striped, held) replaced by its parts launched one after another."""
    from fusec.ir.plan import ProgramPlan
    kernels = []
    for kernel in plan.kernels:
        kernels += list(kernel.parts) if isinstance(kernel, fusion) else [kernel]
    return ProgramPlan(tuple(kernels))


def last_block_sums():
    """The reference GPU, but without dependent launches: a tile kernel alone built for it
    sums its tiles in its last blocks, as a part of a fusion does, not in a second launch
    (Kernel.sums_apart, whose blocks split the partials otherwise and so round otherwise).
    Only what is built changes: the code runs on the GPU present as it is."""
    import dataclasses

    from fusec.target import reference
    return dataclasses.replace(reference(), compute_capability="8.0")


def compiled_with_parts_apart(scripts, dtypes, dag_of, plans_of, fusion) -> dict:
    """(script, dtype) -> [(Program, the same kernels apart)] for every plan of
    ``plans_of(script, dtype)``, all compiled for the GPU present up front, in parallel.
    The kernels apart sum their tiles as the parts do (:func:`last_block_sums`)."""
    from fusec.emit.program import generate
    from fusec.runtime.program import Program
    out, sources = {}, []
    for script in scripts:
        dag = dag_of(script)
        for dtype in dtypes:
            pairs = [(Program(generate(dag, library(), plan, dtype)),
                      Program(generate(dag, library(), parts_apart(plan, fusion), dtype, target=last_block_sums())))
                     for plan in plans_of(script, dtype)]
            out[script, dtype] = pairs
            sources += [p.source for pair in pairs for p in pair]
    compile_for_this_gpu(sources)
    return out


def outputs_on_host(results, program) -> dict:
    """A run's results by output name, as NumPy arrays."""
    import numpy as np
    results = results if isinstance(results, tuple) else (results,)
    return {name: np.asarray(r) for name, r in zip(program.outputs, results)}


def script_names() -> list[str]:
    return [p.stem for p in SCRIPTS]


def size_cases(dag, base: list[int]) -> list[dict[str, int]]:
    """Sizes for a script: each base size for every symbol, and for scripts with
    two symbols the rectangular cases m = n +- (n/2 + 1) of sblat2."""
    symbols = dag.sizes
    cases = [{s: n for s in symbols} for n in base]
    if len(symbols) == 2:
        for n in (n for n in base if n > 2):
            for m in (n + n // 2 + 1, n - (n // 2 + 1)):
                cases.append({symbols[0]: m, symbols[1]: n})
    return cases


def run_example(name: str, *args: str, path: tuple[str, ...] = (), timeout: float = 120) -> subprocess.CompletedProcess:
    """``examples/NAME ARGS`` run by this Python from the repository root, with ``path`` and then
    this checkout first on its module path (an installed fusec may be another checkout's)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([*path, str(ROOT), *filter(None, [env.get("PYTHONPATH")])])
    return subprocess.run([sys.executable, str(ROOT / "examples" / name), *args], capture_output=True, text=True,
                          timeout=timeout, cwd=ROOT, env=env)


_PYTHON_BLOCK = re.compile(r"^(?P<indent>[ \t]*)```python[ \t]*\n(?P<code>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)


def python_blocks(path: Path) -> list[tuple[int, str]]:
    """The ```python blocks of a Markdown file: (the line of the opening fence, the code), the
    code dedented (a block in a list item is indented with it)."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 1, textwrap.dedent(m["code"])) for m in _PYTHON_BLOCK.finditer(text)]


def imported_modules(code: str) -> set[str]:
    """The top-level modules a block of Python imports (``import x.y``, ``from x.y import z``: x)."""
    found = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module.split(".")[0])
    return found
