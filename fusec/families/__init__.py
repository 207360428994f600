"""Kernel families: tile/vector, band, horizontal, striped and held; and scalar,
the one kernel no search picks (it stores the scalar expressions a script returns).

Each family is one module implementing :class:`~fusec.families.base.Family`;
importing this package registers them all. The functions below are how the
rest of fusec builds, prints and prices a plan of any family.
"""

from __future__ import annotations

from typing import Mapping

from ..ir.dag import Dag
from ..library.model import Library
from ..target import GpuTarget
from . import band, held, horizontal, scalar, striped, tile  # noqa: F401  (each registers its family)
from .base import Family, family_of, names


def build_kernel(dag: Dag, library: Library, plan, dtype: str, index: int, *, alone: bool = False,
                 target: GpuTarget | None = None):
    """The frozen kernel of a plan of any family, for the GPU ``target``."""
    return family_of(plan).build(dag, library, plan, dtype, index, alone=alone, target=target)


def emit(kernel, dag: Dag, library: Library) -> str:
    """The CUDA source of a kernel of any family."""
    return family_of(kernel.plan).emit(kernel, dag, library)


def analytic_seconds(model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
    return family_of(kernel.plan).analytic_seconds(model, kernel, dag, sizes)


def perfdb_seconds(model, kernel, dag: Dag, sizes: Mapping[str, int]) -> float:
    return family_of(kernel.plan).perfdb_seconds(model, kernel, dag, sizes)


__all__ = ["Family", "family_of", "names", "build_kernel", "emit", "analytic_seconds", "perfdb_seconds"]
