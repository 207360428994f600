"""The protocol every kernel family implements, and the one place plans are
dispatched to their family.

A family is one module (``tile``, ``band``, ``horizontal``, ``striped``,
``held``) holding one :class:`Family` object, registered under the name its
plan class reports as ``plan.family`` (:class:`~fusec.ir.plan.Plan`). Every
stage that must treat families differently — lowering and emission, pricing,
the plan text — asks :func:`family_of` instead of testing plan types.
"""

from __future__ import annotations

from typing import Mapping, Protocol

from ..errors import PlanError
from ..ir.dag import Dag
from ..ir.plan import Plan
from ..library.model import Library
from ..target import GpuTarget


class Family(Protocol):
    """What a kernel family does with its plans and the kernels built from them."""

    name: str
    joint: str  # how the header of a generated program joins its parts' calls ("" for one)
    note: str  # and what it says of such a kernel

    def build(self, dag: Dag, library: Library, plan: Plan, dtype: str, index: int, *, alone: bool = False,
              target: GpuTarget | None = None):
        """The frozen kernel of ``plan`` for the GPU ``target`` (default: the reference GPU;
        raises PlanError where it cannot be built). ``alone``: the kernel is launched by
        itself, not as a part of a fusion."""

    def emit(self, kernel, dag: Dag, library: Library) -> str:
        """The kernel's CUDA source."""

    def analytic_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        """Its time by the analytic model (``model``: an AnalyticPredictor)."""

    def perfdb_seconds(self, model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
        """Its time from measured routine times (``model``: a PerfdbPredictor)."""

    def plan_text(self, generated, kernel, sizes, resources, turning: bool) -> list[str]:
        """Its lines in the program's plan text (after the ``kernel N: name`` line)."""


_FAMILIES: dict[str, Family] = {}


def register(family: Family) -> Family:
    if family.name in _FAMILIES:
        raise ValueError(f"kernel family {family.name!r} registered twice")
    _FAMILIES[family.name] = family
    return family


def family_of(plan: Plan) -> Family:
    try:
        return _FAMILIES[plan.family]
    except KeyError:
        raise PlanError(f"no kernel family {plan.family!r} is registered (known: {', '.join(sorted(_FAMILIES))})")


def names() -> tuple[str, ...]:
    return tuple(sorted(_FAMILIES))
