"""fusec: fuses sequences of BLAS-1/BLAS-2 calls into a few CUDA kernels.

    import fusec
    prog = fusec.compile("scripts/bicgk.script", library="fusec/data/blas", dtype="float32")
    q, s = prog(A=A, p=p, r=r)
"""

from .errors import ArgumentError, FusecError, FusecWarning, LibraryError, ScriptError
from .version import __version__


def compile(script=None, library=None, dtype="float32", *, sizes=None, plan=None, predictor=None, gpu=None,
            tuned=True, reproducible=False, source=None, name="<string>", device_scalars=(), measure=None):
    """Compile a script (a path, or its text as ``source=``) into a callable
    :class:`Program` (see :func:`fusec.api.compile`)."""
    from .api import compile as _compile
    return _compile(script, library, dtype, sizes=sizes, plan=plan, predictor=predictor, gpu=gpu, tuned=tuned,
                    reproducible=reproducible, source=source, name=name, device_scalars=device_scalars,
                    measure=measure)


def __getattr__(name):
    # Program is exported lazily: importing it pulls in the runtime and NumPy
    if name == "Program":
        from .runtime.program import Program
        return Program
    raise AttributeError(f"module 'fusec' has no attribute {name!r}")


__all__ = ["compile", "Program", "FusecError", "ScriptError", "LibraryError", "ArgumentError", "FusecWarning",
           "__version__"]
