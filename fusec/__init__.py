"""fusec: fuses sequences of BLAS-1/BLAS-2 calls into a few CUDA kernels.

    import fusec
    prog = fusec.compile("scripts/bicgk.script", library="fusec/data/blas", dtype="float32")
    q, s = prog(A=A, p=p, r=r)
"""

from .errors import ArgumentError, FusecError, FusecWarning, LibraryError, ScriptError
from .version import __version__


def compile(script, library=None, dtype="float32", *, sizes=None, plan=None, predictor=None, gpu=None,
            tuned=True, reproducible=False):
    """Compile a script into a callable program (see :func:`fusec.api.compile`)."""
    from .api import compile as _compile
    return _compile(script, library, dtype, sizes=sizes, plan=plan, predictor=predictor, gpu=gpu, tuned=tuned,
                    reproducible=reproducible)


__all__ = ["compile", "FusecError", "ScriptError", "LibraryError", "ArgumentError", "FusecWarning",
           "__version__"]
