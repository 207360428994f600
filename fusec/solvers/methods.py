"""The three Krylov methods: which script runs one iteration, which of its inputs are the
state carried from one iteration to the next, how the state starts from the first residual,
and the same iteration in NumPy (the reference the tests compare fusec's iterates with).

A script's state inputs are named ``v`` and its results ``v1`` (``x`` -> ``x1``), plus
``rr1``: the squared norm of the new residual, the one number the host reads. BiCGStab's
script also returns its half-step iterate and residual (``h``, ``s``), read only where an
iteration ends non-finite.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import numpy as np

from .. import data


@dataclasses.dataclass(frozen=True)
class Method:
    """One solver: ``state`` are the script's inputs that change every iteration (``x`` first,
    ``r`` second), ``fixed`` those that do not besides ``A``, ``start`` the names that begin equal
    to the first residual ``r0`` (everything but ``x``). ``half_step`` names the results holding
    an iterate the iteration makes halfway and that iterate's residual (BiCGStab's ``h`` and
    ``s``), or is None. ``matrix_passes``: the passes over ``A`` an iteration makes at least
    (A p and A^T p~ in one for BiCG; A p, then A s for BiCGStab): what its time is, for a large A."""

    name: str
    state: tuple[str, ...]
    fixed: tuple[str, ...]
    reference: Callable  # (A, values) -> (new state values, rr1), float64 NumPy
    half_step: tuple[str, str] | None = None
    matrix_passes: int = 1

    @property
    def script(self):
        return data.SOLVERS / f"{self.name}.script"

    def outputs(self) -> tuple[str, ...]:
        return tuple(f"{name}1" for name in self.state) + ("rr1",) + (self.half_step or ())

    def start(self, x0, r0, copy) -> dict:
        """The first state: ``x0``, and ``r0`` for every other vector (copied, each its own array)."""
        values = {name: copy(r0) for name in self.state + self.fixed if name != "x"}
        values["x"] = copy(x0)
        return values


def cg_step(A, v):
    rr = v["r"] @ v["r"]
    q = A @ v["p"]
    alpha = rr / (v["p"] @ q)
    x1 = v["x"] + alpha * v["p"]
    r1 = v["r"] - alpha * q
    rr1 = r1 @ r1
    p1 = r1 + (rr1 / rr) * v["p"]
    return {"x": x1, "r": r1, "p": p1}, rr1


def bicg_step(A, v):
    rho = v["rt"] @ v["r"]
    q, qt = A @ v["p"], A.T @ v["pt"]
    alpha = rho / (v["pt"] @ q)
    x1 = v["x"] + alpha * v["p"]
    r1 = v["r"] - alpha * q
    rt1 = v["rt"] - alpha * qt
    beta = (rt1 @ r1) / rho
    return {"x": x1, "r": r1, "rt": rt1, "p": r1 + beta * v["p"], "pt": rt1 + beta * v["pt"]}, r1 @ r1


def bicgstab_step(A, v):
    rh = v["rh"]
    rho = rh @ v["r"]
    q = A @ v["p"]
    alpha = rho / (rh @ q)
    s = v["r"] - alpha * q
    t = A @ s
    omega = (t @ s) / (t @ t)
    x1 = v["x"] + alpha * v["p"] + omega * s
    r1 = s - omega * t
    beta = ((rh @ r1) / rho) * (alpha / omega)
    return {"x": x1, "r": r1, "p": r1 + beta * (v["p"] - omega * q)}, r1 @ r1


CG = Method("cg", ("x", "r", "p"), (), cg_step)
BICG = Method("bicg", ("x", "r", "rt", "p", "pt"), (), bicg_step)
BICGSTAB = Method("bicgstab", ("x", "r", "p"), ("rh",), bicgstab_step, half_step=("h", "s"), matrix_passes=2)
METHODS = {m.name: m for m in (CG, BICG, BICGSTAB)}


def reference_iterates(method: Method, A, b, x0, iterations: int) -> np.ndarray:
    """``x`` after ``iterations`` iterations of ``method`` in float64 NumPy, from ``x0``."""
    A, b, x0 = (np.asarray(a, dtype=np.float64) for a in (A, b, x0))
    values = method.start(x0, b - A @ x0, np.copy)
    for _ in range(iterations):
        state, _ = method.reference(A, values)
        values.update(state)
    return values["x"]
