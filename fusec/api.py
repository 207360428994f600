"""``fusec.compile``: script + library + precision -> a callable program."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Mapping

from .codegen.program import generate
from .errors import ArgumentError, FusecWarning, LibraryFormatError
from .library.loader import load_library
from .library.model import Library
from .runtime.program import Program
from .script import load_script
from .gpu import target
from .predict import Predictor
from .space.combinations import build_space
from .space.fusions import adds_with_atomics
from .space.points import ProgramPlan
from . import geometry as geo
from . import tuning
from .tuning import TuningEntry

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
            plan: ProgramPlan | None = None, predictor: Predictor | None = None,
            gpu: str | None = None, tuned: bool = True, reproducible: bool = False) -> Program:
    """Compile a script into a :class:`Program`.

    ``library`` is a library directory (default: the bundled BLAS library);
    ``dtype`` is ``"float32"`` or ``"float64"``. The kernels are those
    ``fusec tune`` measured fastest for ``sizes`` on the target GPU when the
    tuning cache has them (``program.tuned`` then says so; ``tuned=False``
    skips the cache), else the combination of fusions the predictor ranks
    first (a size not given is taken as 8192); the program runs correctly at
    any size. ``plan`` imposes a combination instead (a point of the space).
    ``gpu`` names the GPU to predict and look up tuning for (default:
    ``$FUSEC_GPU``, else the GPU present; see :func:`fusec.gpu.target`).
    ``reproducible=True`` leaves out band kernels that add column sums with
    atomics, so that every run gives the same bits (a plan given is taken as it is;
    ``program.generated.reproducible`` says).
    """
    lib = resolve_library(library)
    return compile_dag(load_script(script, lib), lib, dtype, sizes=sizes, plan=plan, predictor=predictor,
                       gpu=gpu, tuned=tuned, reproducible=reproducible)


def compile_dag(dag, library: Library, dtype="float32", *, sizes: Mapping[str, int] | None = None,
                plan: ProgramPlan | None = None, predictor: Predictor | None = None,
                gpu: str | None = None, tuned: bool = True, reproducible: bool = False) -> Program:
    """:func:`compile` for a script already checked into a DAG."""
    return build_program(dag, library, dtype, sizes=sizes, plan=plan, predictor=predictor,
                         gpu=gpu, tuned=tuned, reproducible=reproducible)[0]


def build_program(dag, library: Library, dtype="float32", *, sizes: Mapping[str, int] | None = None,
                  plan: ProgramPlan | None = None, predictor: Predictor | None = None,
                  gpu: str | None = None, tuned: bool = True,
                  reproducible: bool = False) -> tuple[Program, TuningEntry | None]:
    """:func:`compile_dag`, and the tuning-cache entry its plan came from (None
    when the plan was imposed or predicted)."""
    dtype = geo.dtype_name(dtype)
    if plan is not None:
        return Program(generate(dag, library, plan, dtype)), None
    sizes = default_sizes(dag, sizes)
    if tuned:
        entry = tuning.lookup(dag, library, dtype, sizes, target(gpu))
        if entry is not None and reproducible and not _reproducible(dag, library, entry.plan):
            entry = None  # the tuned plan adds with atomics: predict among those that do not
        if entry is not None:
            try:
                return (Program(generate(dag, library, entry.plan, dtype), tuned=entry.describe(),
                                turning=entry.turning), entry)
            except Exception as exc:  # never trust a cache file: whatever a bad plan breaks, predict
                warnings.warn(FusecWarning(f"ignoring the tuning-cache entry {entry.path}:"
                                           f" its plan does not build ({type(exc).__name__}: {exc})"))
    if predictor is None:
        from .perfdb import predictor_for  # the perfdb may import much; only when predicting
        predictor = predictor_for(library, gpu)
    space = build_space(dag, library, dtype, sizes, predictor)
    best = space.best_where(lambda p: _reproducible(dag, library, p)) if reproducible else space.best()
    return Program(generate(dag, library, best.plan, dtype)), None


def _reproducible(dag, library: Library, plan: ProgramPlan) -> bool:
    return not any(adds_with_atomics(dag, library, k) for k in plan.kernels)
