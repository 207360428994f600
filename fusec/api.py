"""``fusec.compile``: script + library + precision -> a callable program."""

from __future__ import annotations

import os
from pathlib import Path

from .codegen.program import generate
from .errors import LibraryFormatError
from .library.loader import load_library
from .library.model import Library
from .runtime.program import Program
from .script import load_script
from .space import unfused_plan
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


def compile(script: str | os.PathLike, library: str | os.PathLike | Library | None = None,
            dtype="float32", *, plan: ProgramPlan | None = None) -> Program:
    """Compile a script into a :class:`Program`.

    ``library`` is a library directory (default: the bundled BLAS library);
    ``dtype`` is ``"float32"`` or ``"float64"``; ``plan`` overrides the
    compiler's choice of kernels (a point of the optimization space).
    """
    lib = resolve_library(library)
    dag = load_script(script, lib)
    chosen = plan if plan is not None else unfused_plan(dag, lib)
    return Program(generate(dag, lib, chosen, geo.dtype_name(dtype)))
