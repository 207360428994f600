"""Krylov solvers on a dense matrix, each iteration one compiled fusec script
(``fusec/data/solvers/``), the loop replayed from CUDA graphs::

    x, info = fusec.solvers.cg(A, b, rtol=1e-6)

See docs/solvers.md."""

from .api import bicg, bicgstab, cg, forget_kept_steppers, solve

__all__ = ["cg", "bicg", "bicgstab", "solve", "forget_kept_steppers"]
