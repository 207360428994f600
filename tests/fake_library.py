"""A small fake library for front-end tests: metadata only, no routines.

``fake_library()`` returns an object with ``.functions`` and ``.composites`` (none),
which is all the script checker reads.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Mapping

from fusec.errors import Coord
from fusec.library.model import Composite, Function, Hof, Kind, Param

_COORD = Coord("fake.cu", 1, 1)


def param(spec: str) -> Param:
    """``"A: matrix[m, n]"`` -> Param."""
    name, _, rest = (s.strip() for s in spec.partition(":"))
    kind, _, dims = rest.partition("[")
    dims = tuple(d.strip() for d in dims.rstrip("]").split(",") if d.strip())
    return Param(name, Kind(kind.strip()), dims, _COORD)


def function(name: str, params: list[str], result: str, *, nested: bool,
             reduce: bool, axis: str | None = None, reference: str = "") -> Function:
    return Function(
        name=name, params=tuple(param(p) for p in params), result=param(result),
        hof=Hof(nested=nested, reduce=reduce, axis=axis), threads=("32",),
        reference=reference or name, implementations=(), finish=None, summary="",
        file="fake.cu", source="", coord=_COORD)


@dataclasses.dataclass(frozen=True)
class FakeLibrary:
    functions: Mapping[str, Function]
    composites: Mapping[str, Composite] = dataclasses.field(default_factory=lambda: MappingProxyType({}))


def fake_library() -> FakeLibrary:
    functions = [
        function("sgemv", ["A: matrix[m, n]", "x: vector[n]"], "y: vector[m]",
                 nested=True, reduce=True, axis="n", reference="A @ x"),
        function("sgemtv", ["A: matrix[m, n]", "x: vector[m]"], "y: vector[n]",
                 nested=True, reduce=True, axis="m", reference="A.T @ x"),
        function("sscal", ["alpha: scalar", "x: vector[n]"], "y: vector[n]",
                 nested=False, reduce=False, reference="alpha * x"),
        function("saxpy", ["alpha: scalar", "x: vector[n]", "y: vector[n]"], "z: vector[n]",
                 nested=False, reduce=False, reference="alpha * x + y"),
        function("sdot", ["x: vector[n]", "y: vector[n]"], "r: scalar",
                 nested=False, reduce=True, reference="x @ y"),
        function("sger", ["alpha: scalar", "x: vector[m]", "y: vector[n]", "A: matrix[m, n]"],
                 "B: matrix[m, n]", nested=True, reduce=False,
                 reference="alpha * np.outer(x, y) + A"),
        function("sgemtv_ab", ["alpha: scalar", "A: matrix[m, n]", "x: vector[m]",
                               "beta: scalar", "y: vector[n]"], "z: vector[n]",
                 nested=True, reduce=True, axis="m", reference="alpha * A.T @ x + beta * y"),
    ]
    return FakeLibrary(MappingProxyType({f.name: f for f in functions}))
