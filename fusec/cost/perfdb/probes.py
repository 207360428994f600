"""The routines the performance database times, and the CUDA that times them.

A routine's cost depends on the environment it runs in (paper §4.2): the
block shape and serial iterations, the section it runs in (once before the
loop, every iteration, once after), the serial axis of a tile kernel, the
precision, and how many blocks share an SM (the build limits that with extra
shared memory, as a fusion's footprint would). A :class:`RoutineKey` names
all but the last; the build measures each key at several blocks per SM.

Each key is probed by the single-call kernel of a library function that
calls the routine, with every other routine left out
(:func:`fusec.emit.kernel.probe_kernel`). Probes are grouped into modules
so nvcc compiles them in parallel, a few dozen kernels each.
"""

from __future__ import annotations

import dataclasses
from typing import Iterator

from ...emit.kernel import emit_kernel, probe_kernel
from ...emit.program import common_code
from ...errors import PlanError
from ...frontend import check, parse
from ...ir import geometry as geo
from ...ir.dag import Dag
from ...ir.geometry import Shape
from ...ir.kernel import Kernel, Reduction
from ...ir.plan import COLS, ROWS, KernelPlan
from ...ir.steps import canonical_steps
from ...library.model import Function, Geometry, Kind, Library
from ...lower.kernel import build_kernel, routine_of
from ...space.held import HELD_SHAPES
from ...space.implementations import TILE_SHAPES, VECTOR_SHAPES

MODULE_KERNELS = 48  # probes per nvcc run
# the tile shapes timed: the space's, and the wider ones only held fusions use
PROBED_TILE_SHAPES = TILE_SHAPES + tuple(s for s in HELD_SHAPES if s not in TILE_SHAPES)

# Problem sizes the probes run at: past the 50 MB L2, a few waves of blocks.
BENCH_ELEMENTS = {"float32": 2 ** 26, "float64": 2 ** 25}  # 256 MB
BENCH_SIDE = {"float32": 8192, "float64": 8192}  # matrices of 256 / 512 MB


@dataclasses.dataclass(frozen=True, order=True)
class RoutineKey:
    """One routine in one environment (less the blocks per SM)."""

    routine: str
    section: str  # "pre", "loop" or "post" (fusec.ir.barriers)
    geometry: str
    block: int
    iters: int
    tile_rows: int | None
    serial: str | None
    dtype: str

    @classmethod
    def of(cls, routine: str, section: str, plan: KernelPlan, dtype: str) -> "RoutineKey":
        s = plan.shape
        return cls(routine, section, s.geometry.value, s.block, s.iters, s.tile_rows, plan.serial, dtype)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Probe:
    key: RoutineKey
    kind: str  # load | compute | store
    function: str  # the library function whose kernel probes it
    kernel: Kernel  # the probe kernel (only the routine left)
    dag: Dag = dataclasses.field(repr=False)
    reductions: tuple[Reduction, ...] = ()  # the full kernel's: its workspace sizes

    @property
    def sizes(self) -> dict[str, int]:
        if self.kernel.plan.geometry is Geometry.VECTOR:
            return {self.kernel.dims[0]: BENCH_ELEMENTS[self.key.dtype]}
        return {d: BENCH_SIDE[self.key.dtype] for d in self.kernel.dims}


def single_call_dag(library: Library, function: Function) -> Dag:
    """A script calling ``function`` once on fresh inputs, checked into a DAG."""
    taken = {p.name for p in function.params}
    result = function.result.name if function.result.name not in taken else function.result.name + "_out"
    lines = []
    for param in function.params + (dataclasses.replace(function.result, name=result),):
        dims = f"[{', '.join(function.dims_of(param))}]" if param.dims else ""
        lines.append(f"{param.kind} {param.name}{dims};" if param.kind is not Kind.SCALAR
                     else f"scalar {param.name};")
    lines.append(f"input {', '.join(p.name for p in function.params)};")
    lines.append(f"{result} = {function.name}({', '.join(p.name for p in function.params)});")
    lines.append(f"return {result};")
    return check(parse("\n".join(lines) + "\n", f"<perfdb: {function.name}>"), library)


def probes(library: Library, dtypes=("float32", "float64")) -> list[Probe]:
    """One probe per routine key of the library, for every shape the space searches."""
    found: dict[RoutineKey, Probe] = {}
    for function in library.functions.values():
        dag = single_call_dag(library, function)
        call = dag.calls[0].id
        tile = function.hof.geometry is Geometry.TILE
        for dtype in dtypes:
            for impl in function.implementations:
                for shape in (PROBED_TILE_SHAPES if tile else VECTOR_SHAPES):
                    for serial in ((ROWS, COLS) if tile else (None,)):
                        plan = KernelPlan((call,), (impl.name,), canonical_steps(dag, library, (call,)),
                                          shape, serial)
                        try:
                            kernel = build_kernel(dag, library, plan, dtype, 0)
                        except PlanError:
                            continue
                        for op in kernel.ops:
                            if op.step is None:
                                continue
                            routine = _routine_name(library, dag, plan, op.step)
                            key = RoutineKey.of(routine, op.section, plan, dtype)
                            if key not in found:
                                probe = probe_kernel(kernel, op.step, f"p{len(found)}_{routine}", dag)
                                found[key] = Probe(key, op.step.kind.value, function.name, probe, dag,
                                                   kernel.reductions)
    return list(found.values())


def _routine_name(library: Library, dag: Dag, plan: KernelPlan, step) -> str:
    return routine_of(library, dag, plan, step).name


def modules(library: Library, found: list[Probe]) -> Iterator[tuple[str, list[Probe]]]:
    """(CUDA source, its probes), at most MODULE_KERNELS per module, one precision each."""
    for dtype in sorted({p.key.dtype for p in found}):
        mine = [p for p in found if p.key.dtype == dtype]
        for start in range(0, len(mine), MODULE_KERNELS):
            group = mine[start:start + MODULE_KERNELS]
            lines = [f"// fusec perfdb probes ({dtype}) for library {library.name}"
                     f" (hash {library.content_hash})", ""]
            lines += common_code(library, dtype)
            lines += [emit_kernel(p.kernel, p.dag, library, probe=True) for p in group]
            yield "\n".join(lines), group


def instances_per_block(shape: Shape, dtype: str) -> int:
    """Function instances a block runs at once (warps for vectors, one tile for tiles)."""
    if shape.geometry is Geometry.VECTOR:
        return shape.block // geo.WARP
    return 1
