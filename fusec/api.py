"""``fusec.compile``: script + library + precision -> a callable program."""

from __future__ import annotations

import os
from pathlib import Path

from typing import Mapping

from .codegen.program import generate
from .errors import ArgumentError, LibraryFormatError
from .library.loader import load_library
from .library.model import Library
from .runtime.program import Program
from .script import load_script
from .predict import DEFAULT, Predictor
from .space.combinations import build_space
from .space.points import ProgramPlan
from . import geometry as geo

BUNDLED_LIBRARY = Path(__file__).resolve().parent.parent / "library" / "blas"


def resolve_library(library: str | os.PathLike | Library | None) -> Library:
    """A Library from a path, or the default: $FUSEC_LIBRARY, else the BLAS library beside the package."""
    if isinstance(library, Library):
        return library
    if library is None:
        library = os.environ.get("FUSEC_LIBRARY") or BUNDLED_LIBRARY
        if not Path(library).is_dir():
            raise LibraryFormatError("no library given and no default found: pass library=PATH"
                                     " (or set FUSEC_LIBRARY)")
    return load_library(library)


DEFAULT_SIZE = 8192


def default_sizes(dag, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """The sizes to predict for: those given, the rest DEFAULT_SIZE."""
    sizes = dict(sizes or {})
    unknown = set(sizes) - set(dag.sizes)
    if unknown:
        raise ArgumentError("sizes", f"{dag.file} has no size {', '.join(sorted(unknown))}"
                                     f" (its sizes: {', '.join(dag.sizes)})")
    return {s: int(sizes.get(s, DEFAULT_SIZE)) for s in dag.sizes}


def compile(script: str | os.PathLike, library: str | os.PathLike | Library | None = None,
            dtype="float32", *, sizes: Mapping[str, int] | None = None,
            plan: ProgramPlan | None = None, predictor: Predictor | None = None) -> Program:
    """Compile a script into a :class:`Program`.

    ``library`` is a library directory (default: the bundled BLAS library);
    ``dtype`` is ``"float32"`` or ``"float64"``. The kernels are the
    combination of fusions the predictor ranks first for ``sizes`` (a size
    not given is taken as 8192); the program runs correctly at any size.
    ``plan`` imposes a combination instead (a point of the space).
    """
    lib = resolve_library(library)
    return compile_dag(load_script(script, lib), lib, dtype, sizes=sizes, plan=plan, predictor=predictor)


def compile_dag(dag, library: Library, dtype="float32", *, sizes: Mapping[str, int] | None = None,
                plan: ProgramPlan | None = None, predictor: Predictor | None = None) -> Program:
    """:func:`compile` for a script already checked into a DAG."""
    dtype = geo.dtype_name(dtype)
    if plan is None:
        space = build_space(dag, library, dtype, default_sizes(dag, sizes), predictor or DEFAULT)
        plan = space.best().plan
    return Program(generate(dag, library, plan, dtype))
