"""``fusec.compile``: script + library + precision -> a callable program."""

from __future__ import annotations

import dataclasses
import os
import warnings
from pathlib import Path
from typing import Mapping

import numpy as np

from . import data
from . import validate as check
from .cost.model import Predictor
from .emit.program import generate
from .errors import ArgumentError, FusecWarning, GPUUnavailableError, LibraryFormatError, ScriptSemanticError
from .frontend import check as check_script
from .frontend import load_script
from .frontend import parse as parse_script
from .ir import expr
from .ir.dag import Constant, Dag
from .ir.plan import ProgramPlan
from .library.loader import load_library
from .library.model import Kind, Library
from .nvcc import DEFAULT_ARCH
from .runtime.program import Program
from .space.combinations import build_space
from .space.search import offered_for
from .target import GpuTarget, chosen_slug, present, resolve, slug
from .tune import store as tuning
from .tune import untuned
from .tune.store import TuningEntry
from .validate import default_sizes

BUNDLED_LIBRARY = data.LIBRARY


def resolve_library(library: str | os.PathLike | Library | None) -> Library:
    """A Library from a path, or the default: $FUSEC_LIBRARY, else the BLAS library beside the package."""
    if isinstance(library, Library):
        return library
    if library is not None and not isinstance(library, (str, os.PathLike)):
        raise ArgumentError("library", f"is a {type(library).__name__}: pass a library directory"
                                       " (str or os.PathLike), a loaded Library, or None for the default")
    if library is None:
        chosen = os.environ.get("FUSEC_LIBRARY")
        if chosen and not Path(chosen).is_dir():
            raise LibraryFormatError(f"$FUSEC_LIBRARY names {chosen!r}, which is not a folder: set it to a"
                                     " library's directory, or unset it for the bundled library")
        library = chosen or BUNDLED_LIBRARY
        if not Path(library).is_dir():
            raise LibraryFormatError("no library given and no default found: pass library=PATH"
                                     " (or set FUSEC_LIBRARY)")
    return load_library(library)


def check_gpu(gpu) -> None:
    """``gpu=``: a GPU's name or None (an :class:`ArgumentError` naming ``gpu`` otherwise)."""
    if gpu is not None and not isinstance(gpu, str):
        raise ArgumentError("gpu", f"is a {type(gpu).__name__}: pass a GPU's name, e.g. 'h100', or None")
    if gpu is not None and not gpu.strip():
        raise ArgumentError("gpu", "is empty: pass a GPU's name, e.g. 'h100', or None for the GPU present"
                                   " ($FUSEC_GPU)")


def check_arguments(dag, dtype, plan, predictor, gpu) -> str:
    """The precision's name, once every argument of :func:`compile` is of its type and in
    range (an :class:`ArgumentError` naming the first that is not)."""
    dtype = check.dtype(dtype)
    if plan is not None and not isinstance(plan, ProgramPlan):
        raise ArgumentError("plan", f"is a {type(plan).__name__}, not a fusec ProgramPlan (a point of the space)")
    if predictor is not None and not callable(getattr(predictor, "kernel_seconds", None)):
        raise ArgumentError("predictor", f"is a {type(predictor).__name__}, which has no kernel_seconds():"
                                         " pass a fusec predictor or None")
    if predictor is not None and not isinstance(getattr(predictor, "target", None), GpuTarget):
        raise ArgumentError("predictor", f"is a {type(predictor).__name__}, whose target is not a GpuTarget"
                                         " (the GPU it predicts for): pass a fusec predictor or None")
    check_gpu(gpu)
    literals = [a for call in dag.calls for a in call.args if isinstance(a, Constant)]
    literals += [c for e in dag.expressions for c in expr.constants(e.tree)]
    for arg in sorted(literals, key=lambda c: c.coord):  # one too large for float32 would be inf in a kernel
        if abs(arg.value) > float(np.finfo(dtype).max):
            raise ScriptSemanticError(f"{arg.text} is outside the range of {dtype}", arg.coord,
                                      dag.text.split("\n")[arg.coord.line - 1])
    return dtype


def device_dag(dag: Dag, device_scalars) -> Dag:
    """``dag`` with the scalar inputs ``device_scalars`` names read from device memory
    (:meth:`~fusec.ir.dag.Dag.with_device_scalars`), once each name is checked: a
    collection of str, each a scalar input (else an :class:`ArgumentError` naming
    ``device_scalars``)."""
    if isinstance(device_scalars, (str, bytes)) or not isinstance(device_scalars, (tuple, list, set, frozenset)):
        raise ArgumentError("device_scalars", f"is a {type(device_scalars).__name__}: pass a tuple, list or set of"
                                              " the names of scalar inputs, e.g. ('alpha',)")
    inputs = {dag.value(v).name: dag.value(v) for v in dag.inputs}
    scalars = ", ".join(n for n, v in inputs.items() if v.kind is Kind.SCALAR) or "none"
    for name in device_scalars:
        if not isinstance(name, str):
            raise ArgumentError("device_scalars", f"holds {name!r} ({type(name).__name__}): pass the names (str)"
                                                  " of scalar inputs")
        if name not in inputs:
            raise ArgumentError("device_scalars", f"names {name!r}, which is not an input of {dag.file}"
                                                  f" (its scalar inputs: {scalars})")
        if inputs[name].kind is not Kind.SCALAR:
            raise ArgumentError("device_scalars", f"names {name!r}, a {inputs[name].kind} input of {dag.file}: only"
                                                  f" scalars are read from a device array (its scalar inputs:"
                                                  f" {scalars})")
    return dag.with_device_scalars(device_scalars)


def check_plan(dag, library: Library, plan: ProgramPlan) -> None:
    """An imposed plan covers each call of ``dag`` once, and names implementations its
    functions have (else an :class:`ArgumentError` naming ``plan``: one made for another
    script would fail deep in the generator)."""
    covered = [c for kernel in plan.kernels for part in kernel.parts for c in part.calls]
    calls = sorted(call.id for call in dag.calls)
    if sorted(covered) != calls:
        raise ArgumentError("plan", f"covers calls {sorted(covered)}, but {dag.file} has calls {calls}, each"
                                    " once: is it a plan of another script?")
    for kernel in plan.kernels:
        for part in kernel.parts:
            for call, name in zip(part.calls, part.implementations):
                function = library.functions[dag.call(call).function]
                if name not in {i.name for i in function.implementations}:
                    raise ArgumentError("plan", f"call {call} ({dag.call(call).function}): {function.name} has no"
                                                f" implementation {name!r}: is it a plan of another script?")


def compile(script: str | os.PathLike | None = None, library: str | os.PathLike | Library | None = None,
            dtype="float32", *, sizes: Mapping[str, int] | None = None,
            plan: ProgramPlan | None = None, predictor: Predictor | None = None,
            gpu: str | None = None, tuned: bool = True, reproducible: bool = False,
            source: str | None = None, name: str = "<string>", device_scalars=(),
            measure: bool | None = None) -> Program:
    """Compile a script into a :class:`Program`.

    The script is the file at ``script``, or the text ``source`` (errors then
    name ``name`` as the file, ``<string>`` by default); exactly one of the two.

    ``library`` is a library directory (default: ``$FUSEC_LIBRARY``, else the bundled BLAS library);
    ``dtype`` is ``"float32"`` or ``"float64"``. The kernels are those
    ``fusec tune`` measured fastest for ``sizes`` on the target GPU when the
    tuning cache has them (``program.tuned`` then says so; ``tuned=False``
    skips the cache), else the plan tuned for the nearest sizes (each within
    a factor of 2) where the space at ``sizes`` offers that same plan
    (``program.nearby`` says so), else the combination of fusions the predictor ranks
    first (a size not given is taken as 8192); the program runs correctly at
    any size, and a call at sizes a plan was tuned for (other than ``sizes``)
    runs that plan, compiled once at the first such call (``tuned=True``).
    ``plan`` imposes a combination instead (a point of the space).
    ``measure=True`` measures instead of predicting where the tuning cache has no plan for
    ``sizes``: a quick tune (``fusec tune --quick``: about ten candidates, checked against the
    oracle and timed on the GPU present, in seconds) picks the plan and the tuning cache keeps
    it, so the next compile at these sizes finds it; a call at other sizes that needs another
    plan is measured alike. It needs the GPU present (``gpu``, if given, must name it) and
    PyCUDA; a quick tune that finds no correct candidate warns and predicts. ``measure=None``
    (the default) takes ``$FUSEC_MEASURE`` (1: measure wherever ``tuned`` and not
    ``reproducible``; default 0), so a whole application (its solvers too) can measure unchanged.
    ``gpu`` names the GPU to predict and look up tuning for (default:
    ``$FUSEC_GPU``, else the GPU present; see :func:`fusec.target.target`).
    ``reproducible=True`` leaves out band kernels that add column sums with
    atomics, so that every run gives the same bits (a plan given is taken as it is;
    ``program.generated.reproducible`` says).
    ``device_scalars`` names scalar inputs that each call passes as a device array of one
    element (shape ``()`` or ``(1,)``, the program's dtype, the framework of the other
    arrays) instead of a host number: the kernels read them from device memory, so a
    scalar the GPU computed reaches the program with no wait on the host, and a call
    captured in a CUDA graph reads the array's value at each replay. The plan, and
    the tuning it is looked up by, are the same.
    """
    lib = resolve_library(library)
    return compile_dag(script_dag(script, source, name, lib), lib, dtype, sizes=sizes, plan=plan, predictor=predictor,
                       gpu=gpu, tuned=tuned, reproducible=reproducible, device_scalars=device_scalars,
                       measure=measure)


def script_dag(script, source, name, library: Library):
    """The checked DAG of the script at path ``script`` or of the text ``source``."""
    if (script is None) == (source is None):
        raise ArgumentError("script", "pass either a script's path or source=TEXT, not both"
                            if script is not None else "pass a script's path, or its text as source=TEXT")
    if source is not None:
        if not isinstance(source, str):
            raise ArgumentError("source", f"is a {type(source).__name__}: pass the script's text (str)")
        if not isinstance(name, str) or not name:
            raise ArgumentError("name", f"is {name!r}: pass a non-empty str naming the script in messages")
        if not check.printable(name):
            raise ArgumentError("name", f"is {check.shown(name)}: pass UTF-8 printable text (the generated"
                                        " code names the script by it)")
        return check_script(parse_script(source, name), library)
    if not isinstance(script, (str, os.PathLike)):
        raise ArgumentError("script", f"is a {type(script).__name__}: pass the script's path (str or"
                                      " os.PathLike), or its text as source=TEXT")
    path = os.fsdecode(script)
    if not path or "\0" in path:
        raise ArgumentError("script", f"is {path!r}, which names no file: pass the script's path,"
                                      " or its text as source=TEXT")
    return load_script(script, library)


def compile_dag(dag, library: Library, dtype="float32", *, sizes: Mapping[str, int] | None = None,
                plan: ProgramPlan | None = None, predictor: Predictor | None = None,
                gpu: str | None = None, tuned: bool = True, reproducible: bool = False,
                device_scalars=(), measure: bool | None = None) -> Program:
    """:func:`compile` for a script already checked into a DAG."""
    dag = device_dag(dag, device_scalars)  # marked on the DAG: replan's programs read them so too
    program = build_program(dag, library, dtype, sizes=sizes, plan=plan, predictor=predictor,
                            gpu=gpu, tuned=tuned, reproducible=reproducible, measure=measure)[0]
    if plan is None:  # sizes its plan cannot serve, or tuned for, get the plan compile chooses for them
        program.replan = lambda other: compile_dag(dag, library, dtype, sizes=other, predictor=predictor, gpu=gpu,
                                                   tuned=tuned, reproducible=reproducible, measure=measure)
        own = default_sizes(dag, sizes)
        if tuned:
            program.tuned_at = lambda other: (other != own and tuning.lookup(dag, library, dtype, other,
                                                                             chosen_slug(gpu)) is not None)
    return program


def build_program(dag, library: Library, dtype="float32", *, sizes: Mapping[str, int] | None = None,
                  plan: ProgramPlan | None = None, predictor: Predictor | None = None,
                  gpu: str | None = None, tuned: bool = True, reproducible: bool = False,
                  spill_arch: str | None = DEFAULT_ARCH, device_scalars=(),
                  measure: bool | None = None) -> tuple[Program, TuningEntry | None]:
    """:func:`compile_dag`, and the tuning-cache entry its plan came from, of these
    sizes or nearby ones, or that ``measure`` made (None when the plan was imposed or
    predicted). A predicted plan's kernels are
    compiled for ``spill_arch`` to check that they do not spill registers
    (None: not checked; ``fusec compile --no-nvcc``)."""
    dtype = check_arguments(dag, dtype, plan, predictor, gpu)
    dag = device_dag(dag, device_scalars)
    tuned, reproducible = check.flag("tuned", tuned), check.flag("reproducible", reproducible)
    asked = measure is not None  # else the application's choice: it yields to what this call asks
    if not asked:
        measure = (check.environment_flag("FUSEC_MEASURE", False) and tuned and not reproducible
                   and plan is None)
    measure = check.flag("measure", measure)
    if measure and plan is not None:
        raise ArgumentError("measure", "a plan given is compiled as it is: there is nothing to measure")
    if measure and not tuned:
        raise ArgumentError("measure", "measures where the tuning cache has no plan and keeps the winner"
                                       " there: it needs tuned=True")
    if measure and reproducible:
        raise ArgumentError("measure", "a quick tune may pick a band kernel that adds with atomics:"
                                       " leave out reproducible=True, or measure=True")
    sizes = default_sizes(dag, sizes)  # checked even where a plan imposed makes no use of them
    if plan is not None:
        check_plan(dag, library, plan)
        target = predictor.target if predictor is not None else resolve(gpu)
        return Program(generate(dag, library, plan, dtype, target)), None
    entry = None
    predictor_given = predictor is not None
    if tuned:
        entry = tuning.lookup(dag, library, dtype, sizes, chosen_slug(gpu))
        if entry is not None and reproducible and not untuned.adds_no_atomics(dag, library, entry.plan):
            entry = None  # the tuned plan adds with atomics: predict among those that do not
    if predictor is None:
        from .cost.perfdb import predictor_for  # the perfdb may import much; only when predicting
        predictor = predictor_for(library, gpu)
    target = predictor.target  # the GPU whose limits the space and the kernels take
    space = build_space(dag, library, dtype, sizes, predictor)
    if entry is not None:
        # never trust a cache file: a plan edited (a step deleted or re-pointed, a shape
        # no kernel has) builds a program that computes something else, or nothing
        offered = set(space.offered)
        if space.cut and not all(_offers(offered, k) for k in entry.plan.kernels):
            # a bounded space offers the one cover it found best: the tuned plan's own may differ
            try:
                offered |= offered_for(dag, library, dtype, sizes, predictor, entry.plan.kernels)
            except Exception:  # whatever a damaged plan breaks, it is not offered (refused below)
                pass
        if not all(_offers(offered, k) for k in entry.plan.kernels):
            warnings.warn(FusecWarning(f"ignoring the tuning-cache entry {entry.path}: its plan is not"
                                       " one the optimization space offers at these sizes (damaged or"
                                       " edited); predicting instead"))
        else:
            try:
                return (Program(generate(dag, library, entry.plan, dtype, target), tuned=entry.describe(),
                                turning=entry.turning), entry)
            except Exception as exc:  # whatever a bad plan breaks, predict
                warnings.warn(FusecWarning(f"ignoring the tuning-cache entry {entry.path}:"
                                           f" its plan does not build ({type(exc).__name__}: {exc})"))
    keep = (lambda p: untuned.adds_no_atomics(dag, library, p)) if reproducible else (lambda p: True)
    if measure:
        measured = _quick_tuned(dag, library, dtype, sizes, gpu, predictor if predictor_given else None, target,
                                space, asked=asked)
        if measured is not None:
            return measured
    if tuned:
        borrowed = _nearby_plan(dag, library, dtype, sizes, chosen_slug(gpu), space, keep, target)
        if borrowed is not None:
            return borrowed
    best = space.best_where(keep)
    generated, predicted = untuned.without_spills(dag, library, dtype, space.ranked(), keep, best, spill_arch, target)
    return Program(generated, predicted=predicted), None


def _quick_tuned(dag, library: Library, dtype: str, sizes, gpu: str | None, predictor, target: GpuTarget,
                 space, *, asked: bool = True):
    """(the program, its entry) of a quick tune on the GPU present (``compile(measure=True)``),
    its winner kept in the tuning cache; None, with a warning, where no candidate passed.
    ``space``: the one compile built, which the tune draws from where it was ranked for
    the GPU present (``predictor`` given, or chosen for that GPU), rather than building it again.
    Not ``asked`` ($FUSEC_MEASURE=1 alone), where no GPU is present or ``gpu`` names another,
    None too: the environment's wish yields to the machine and to the call."""
    from .runtime import cuda
    from .tune.search import tune
    try:
        cuda.driver()  # a clear error when PyCUDA or the GPU is missing
        info = present()
        if info is None:
            raise GPUUnavailableError("measure=True times candidates on a GPU, and none is present")
    except GPUUnavailableError as exc:
        if asked:
            raise
        warnings.warn(FusecWarning(f"$FUSEC_MEASURE=1, but nothing can be measured here ({exc}): predicting"))
        return None
    if gpu is not None and not info.slug.startswith(slug(gpu)):
        if not asked:
            return None  # the call chose kernels for another GPU
        raise ArgumentError("gpu", f"is {gpu!r}, but measure=True measures on the GPU present ({info.name}):"
                                   " leave gpu out, or measure on that GPU")
    for_this_gpu = predictor is not None or chosen_slug(gpu) == info.slug
    result = tune(dag, library, dtype, sizes, predictor=predictor, progress=False, quick=True,
                  space=space if for_this_gpu else None)
    if result.entry is None:
        warnings.warn(FusecWarning(f"{dag.file}: no candidate of the quick tune passed at"
                                   f" {', '.join(f'{k}={v}' for k, v in sizes.items())}; predicting instead"))
        return None
    entry = result.entry
    return (Program(generate(dag, library, entry.plan, dtype, target), tuned=entry.describe(),
                    turning=entry.turning), entry)


def _nearby_plan(dag, library: Library, dtype: str, sizes, gpu: str | None, space, keep, target: GpuTarget):
    """(the program, its entry) of the plan tuned at the nearest size (tuning.nearby)
    that ``space``, this size's, offers as it is and ``keep`` accepts; None if none does.
    A tuned plan fixes the whole launch (shapes, serial iterations, lags, what is held),
    so one offered here is one the predictor could have picked here too."""
    offered = space.offered
    for entry in tuning.nearby(dag, library, dtype, sizes, gpu):
        if not all(k in offered for k in entry.plan.kernels) or not keep(entry.plan):
            continue
        try:
            generated = generate(dag, library, entry.plan, dtype, target)
        except Exception as exc:  # never trust a cache file: whatever a bad plan breaks, go on
            warnings.warn(FusecWarning(f"ignoring the tuning-cache entry {entry.path}:"
                                       f" its plan does not build ({type(exc).__name__}: {exc})"))
            continue
        return Program(generated, nearby=nearby_origin(entry), turning=entry.turning), entry
    return None


def _offers(offered: set, plan) -> bool:
    """Whether a tuned kernel plan is one ``offered`` holds, or is made of parts it holds
    with parameters of its own (a lag, what is held) that it offers for some plan of the
    same kind. A composite's options pair only each part's best-predicted
    implementations, and a plan tuned on a sibling GPU (tuning.sibling: the H100's,
    measured fastest on the H200) may pair parts this GPU's predictor ranks lower;
    generate() still checks what the composite needs of this GPU."""
    if plan in offered:
        return True
    return (plan.composite and all(part in offered for part in plan.parts)
            and _frame(plan) in {_frame(other) for other in offered if other.composite})


def _frame(plan) -> tuple:
    """A composite plan's kind and its own parameters: every field but its parts."""
    def is_part(value) -> bool:
        return value in plan.parts or (isinstance(value, tuple) and value == plan.parts)
    return (type(plan),) + tuple((f.name, getattr(plan, f.name)) for f in dataclasses.fields(plan)
                                 if not is_part(getattr(plan, f.name)))


def nearby_origin(entry: TuningEntry) -> str:
    """How a program says its plan was tuned at another size."""
    sizes = ", ".join(f"{k}={v}" for k, v in entry.key.sizes)
    return f"tuned for the nearest size, {sizes} ({entry.describe()})"
