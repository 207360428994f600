"""``cg``, ``bicg`` and ``bicgstab`` over several GPUs: the iterations of :mod:`fusec.solvers`,
each a distributed program, and the solver loop of :mod:`fusec.solvers.driver` on the host.

Each rank passes its block of rows of ``A`` (``A[lo:hi, :]``), of ``b`` and of ``x0``, the
blocks :func:`rows` gives (every rank holds rows), and gets its block of ``x`` back; ``info``
is the same on every rank (the stopping test reads the all-reduced squared residual norm, the
same number everywhere, so every rank stops at the same iteration). The iteration is compiled
with its results in the layouts its next call reads them in (``results=``), so the state
passes from one call to the next with no step of the loop's own. The first residual
``b - A x0`` and the norms the loop reads at the start (and BiCGStab's half step, on a
breakdown) are small distributed programs of their own.

The loop stays on the host (no conditional node, as one GPU's solvers have). Nothing inside
an iteration waits on the host (its stages read the summed scalars from device memory). By
default (``graphs=True``; ``$FUSEC_DISTRIBUTED_GRAPHS=0`` or ``graphs=False`` for plain calls)
the ``check_every`` calls between two reads of the residual are captured in a CUDA graph, NCCL
collectives included, and replayed (:class:`DistributedStepper`): the host's work for them is
one graph launch and one watched event, where plain calls' host work (each stage's launches,
each collective, their events and watches) set the pace. A solve keeps its stepper, and so its
graphs, for the next solve on the same communicator while ``A`` stays where it was on every
rank. ``check_every=1`` (the default) stops at the first iteration meeting the rule; more
measured no faster with graphs (docs/distributed.md). Where the communicator cannot be
captured (torch.distributed, thread ranks) the calls are plain.
"""

from __future__ import annotations

import contextlib
import functools
import gc
import inspect
import itertools
import math
import os
import threading
import weakref
from typing import Any, Callable

from .. import validate
from ..api import resolve_library, script_dag
from ..errors import ArgumentError
from ..solvers import checks, driver
from ..solvers.arrays import arrays_for, framework_of
from ..solvers.methods import BICG, BICGSTAB, CG, METHODS, Method
from ..solvers.workspace import Kept, Workspaces
from . import check_executor, communicator, plan
from . import comm as comm_module
from . import compile as compile_distributed
from .layout import Layout, block
from .planner import summed_on_every_rank

# the first residual r0 = b - A x0 (x0 whole, as the gemv reads it), and the squared norm of a
# split vector, all-reduced whole; a split vector gathered whole on every rank
RESIDUAL = """\
matrix A[n, n];
vector b[n], x[n], q[n], r[n];
input A, b, x;
q = sgemv(A, x);
r = sxmay(b, 1.0, q);
return r;
"""
NORM = """\
vector v[n];
scalar vv;
input v;
vv = sdot(v, v);
return vv;
"""
GATHER = """\
vector v[n], w[n];
input v;
w = scopy(v);
return w;
"""


def rows(n: int, comm: Any = None) -> tuple[int, int]:
    """[lo, hi) of the rows of an n x n system this rank passes (of ``comm``, as
    :func:`fusec.distributed.communicator` takes it)."""
    n = validate.count("n", n, 1)
    comm = communicator(comm)
    ranks, rank = (1, 0) if comm is None else (comm.size, comm.rank)
    return block(n, rank, min(ranks, n))


def cg(A, b, x0=None, **options):
    """Conjugate gradients over the ranks; ``(x, info)`` as :func:`fusec.solvers.cg`, ``x`` this
    rank's block. Options: ``rtol``, ``atol``, ``maxiter``, ``check_every`` (default 1),
    ``comm``, ``timeout``, ``executor``, ``graphs``, ``layouts`` (see :func:`solve`)."""
    return solve(CG, A, b, x0, **_options("cg", options))


def bicg(A, b, x0=None, **options):
    """Biconjugate gradients over the ranks (see :func:`cg`)."""
    return solve(BICG, A, b, x0, **_options("bicg", options))


def bicgstab(A, b, x0=None, **options):
    """BiCGStab over the ranks (see :func:`cg`)."""
    return solve(BICGSTAB, A, b, x0, **_options("bicgstab", options))


def _options(name: str, options: dict) -> dict:
    """``options`` of ``cg``, ``bicg`` or ``bicgstab``, each one :func:`solve` takes: else the
    TypeError Python gives a function called with a keyword it lacks, naming ``name``, not solve."""
    known = _solve_options()
    for option in options:
        if option not in known:
            raise TypeError(f"{name}() got an unexpected keyword argument {option!r} (its options: {', '.join(known)})")
    return options


@functools.cache
def _solve_options() -> tuple[str, ...]:
    """The options :func:`solve` takes (asked of its signature once, not at every solve: a
    profile found that a cost of every solve)."""
    return tuple(p for p in inspect.signature(solve).parameters if p not in ("method", "A", "b", "x0"))


def solve(method: Method, A, b, x0=None, *, rtol=1e-5, atol=0.0, maxiter=None, check_every=1, comm=None,
          timeout=None, executor=None, graphs=None, layouts=None):
    """``method`` over the ranks of ``comm``. ``A``, ``b``, ``x0``: this rank's rows of each
    (:func:`rows`), NumPy arrays or those of the communicator's framework. The rule and
    ``info`` are SciPy's (:mod:`fusec.solvers.driver`): stop when ``||r|| <= max(rtol ||b||,
    atol)``; ``maxiter`` (default 10 n) iterations at most, the residual read every
    ``check_every`` (default 1: the first iteration meeting the rule; see the module's
    docstring for why more are not faster). ``executor``: how a stage becomes a callable
    (:func:`fusec.distributed.compile`; the tests run stages with the oracle). ``graphs``: capture
    the iterations in CUDA graphs and replay them (see the module's docstring); default
    ``$FUSEC_DISTRIBUTED_GRAPHS`` (1 or 0), else on. ``layouts``: the state's layouts between
    calls: ``"calls"`` (those the iteration's calls want: every number the stopping rule reads
    all-reduced), ``"fewest"`` (those of the fewest collectives a call, CG two instead of
    three: some sums then made by every rank for itself, so :func:`fusec.distributed.compile`
    checks that the ranks compiled the same kernels) or ``"agreed"`` (the fewest that leave no
    sum to each rank: BiCGStab five collectives instead of seven, CG and BiCG the calls' own);
    default ``$FUSEC_DISTRIBUTED_LAYOUTS``, else ``"agreed"``. The same on every rank."""
    n = _check_system(A, b, x0)
    rtol, atol = checks.tolerance("rtol", rtol), checks.tolerance("atol", atol)
    if rtol >= 1:
        raise ArgumentError("rtol", f"is {rtol!r}: it must be below 1 (||r|| <= rtol ||b|| holds for x = 0 at 1)")
    maxiter = 10 * n if maxiter is None else validate.count("maxiter", maxiter, 1)
    dtype = str(A.dtype)
    check_every = validate.count("check_every", check_every, 1)
    graphs = (validate.environment_flag(GRAPHS_VARIABLE, True) if graphs is None
              else validate.flag("graphs", graphs))
    mode = _layouts_choice(layouts)
    timeout = comm_module.checked_timeout(timeout)
    check_executor(executor)
    # all of the above before the communicator: one made from mpirun's or torchrun's environment joins NCCL
    comm = communicator(comm, timeout=timeout)
    ranks, rank = (1, 0) if comm is None else (comm.size, comm.rank)
    lo, hi = block(n, rank, min(ranks, n))
    for name, array in (("A", A), ("b", b), ("x0", x0)):
        if array is not None and array.shape[0] != hi - lo:
            raise ArgumentError(name, f"has {array.shape[0]} rows, but rank {rank} of {ranks} holds rows {lo} to"
                                      f" {hi} of {n} (fusec.distributed.solvers.rows)")

    def distributed(script=None, source=None, name="<string>", results=None, inputs=None):
        key = (script, source, name, dtype, n, timeout, executor, tuple(sorted((results or {}).items())),
               tuple(sorted((inputs or {}).items())))
        return _kept(comm, key, lambda: compile_distributed(
            script, source=source, name=name, dtype=dtype, sizes={"n": n}, comm=comm, latency=False,
            timeout=timeout, executor=executor, results=results, inputs=inputs))
    # the state's results in the layouts the next call reads them in (planned first: no GPU; a
    # plan and the script's DAG take tens of ms, so they are kept beside the programs)
    layouts, own = _kept(comm, ("layouts", method.name, dtype, n, ranks, mode),
                         lambda: _input_layouts(method, dtype, n, ranks, mode))
    iteration = distributed(method.script, **_iteration_layouts(method, layouts, own))
    norm = distributed(source=NORM, name="norm.script")
    gather = distributed(source=GATHER, name="gather.script", results={"w": "whole"})
    arrays = arrays_for(framework_of(b))
    x0_given = x0 is not None
    if x0 is None:
        x0, r0 = arrays.zeros_like(b), b  # r0 = b: no pass over A
    else:
        r0 = distributed(source=RESIDUAL, name="residual.script")(A=A, b=b, x=gather(v=x0))
    whole = {name for name in method.state + method.fixed if layouts[name] is Layout.WHOLE}
    graphs = graphs and iteration.capturable
    key = (method.name, framework_of(b), dtype, n, str(getattr(A, "device", "")), id(iteration))
    with _steppers(comm).take(key, lambda: Kept(arrays)) as kept:
        arrays = kept.arrays
        # a capture needs a stream other than the legacy default one: the solve's own (kept with
        # its stepper: a graph is launched on the stream it was captured on)
        with arrays.stream() if graphs else contextlib.nullcontext():
            if kept.stepper is None:
                kept.stepper = DistributedStepper(method, iteration, norm, gather, arrays, A, x0, r0, whole,
                                                  graphs=graphs)
            else:
                kept.stepper.begin(A, x0, r0, graphs=graphs)
            stepper = kept.stepper
            try:
                bb = arrays.read(norm(v=b))
                rr0 = arrays.read(norm(v=r0)) if x0_given else bb  # from x0 = 0, r0 is b: read once
                _check_finite(bb, rr0, x0_given, lambda: arrays.read(norm(v=x0)))
                tol = max(rtol * math.sqrt(bb), atol)
                outcome = driver.run(stepper, rr0, tol, maxiter, check_every)
                x = arrays.copy(stepper.x())  # the stepper's arrays serve the next solve
            finally:
                stepper.end()
    return x, outcome.info


GRAPHS_VARIABLE = "FUSEC_DISTRIBUTED_GRAPHS"  # solve()'s graphs= where not given
LAYOUTS_VARIABLE = "FUSEC_DISTRIBUTED_LAYOUTS"  # solve()'s layouts= where not given


# The programs of solves before, by communicator (None: one process), then by what they were
# compiled from: a solve's programs take a plan and a compile each (about 0.15 s), and a solver
# loop solves again and again on one communicator. Kept while the communicator lives.
_PROGRAMS: "weakref.WeakKeyDictionary[Any, dict]" = weakref.WeakKeyDictionary()
_ONE_PROCESS: dict = {}
_LOCK = threading.Lock()
MOST_KEPT = 32  # programs kept a communicator, the oldest dropped first


def _kept(comm, key, make: Callable[[], Any]):
    """The program compiled for ``key`` on ``comm`` before, or ``make()``'s, kept. (Every rank
    makes the same calls in the same order, so a rank never compiles where another does not.)"""
    with _LOCK:
        store = _ONE_PROCESS if comm is None else _PROGRAMS.setdefault(comm, {})
        program = store.get(key)
    if program is None:
        program = make()
        with _LOCK:
            while len(store) >= MOST_KEPT:
                del store[next(iter(store))]
            store[key] = program
    return program


def forget_programs() -> None:
    """Drop the programs kept between solves, and their steppers with the CUDA graphs captured on
    them (the next solve compiles and captures its own). Call it before destroying a
    communicator of your own that solves ran on with graphs: NCCL's destroy waits until the
    graphs holding its collectives are gone. (Those fusec made are closed at exit after this.)"""
    with _LOCK:
        _PROGRAMS.clear()
        _ONE_PROCESS.clear()
        kept = [*_STEPPERS.values(), _ONE_PROCESS_STEPPERS]
        _STEPPERS.clear()
    for steppers in kept:
        steppers.clear()
    gc.collect()  # the graphs go with their steppers now, should a cycle hold one


# The steppers of solves before (their stream, their two sets of state arrays and the graphs
# captured on them), by communicator: a capture of NCCL collectives takes milliseconds, more
# than many iterations, and a solver loop solves again and again on one communicator.
_STEPPERS: "weakref.WeakKeyDictionary[Any, Workspaces]" = weakref.WeakKeyDictionary()
_ONE_PROCESS_STEPPERS = Workspaces()


comm_module.before_closing(forget_programs)


def _steppers(comm) -> Workspaces:
    if comm is None:
        return _ONE_PROCESS_STEPPERS
    with _LOCK:
        return _STEPPERS.setdefault(comm, Workspaces())


LAYOUT_MODES = ("agreed", "fewest", "calls")


def _layouts_choice(layouts) -> str:
    """``layouts=`` checked, or ``$FUSEC_DISTRIBUTED_LAYOUTS``, or "agreed"."""
    if layouts is None:
        layouts = os.environ.get(LAYOUTS_VARIABLE, "").strip() or "agreed"
        argument = LAYOUTS_VARIABLE
    else:
        argument = "layouts"
    if layouts not in LAYOUT_MODES:
        raise ArgumentError(argument, f"is {layouts!r}: pass 'agreed', 'fewest' or 'calls'")
    return layouts


def _input_layouts(method: Method, dtype: str, n: int, ranks: int, mode: str) -> tuple[dict[str, Layout], bool]:
    """The layout each input of the method's iteration takes over ``ranks`` ranks, by name, and
    whether they are those its calls want (the plan is then made without ``inputs=``):
    the layouts its calls want (``"calls"``), or those of the fewest collectives a call
    (``"fewest"``), or the fewest among those that leave no number summed by each rank for
    itself (``"agreed"``: every sum is all-reduced, so the ranks cannot disagree on it).

    The iteration is passed its state in the layouts its last call returned it in, and what
    the plan does depends on them (a result returned whole may be made whole early and read so
    by the calls after it: CG's r1 whole makes rr1 a dot on every rank with no all-reduce, and
    p1 whole with no all-gather). So each state vector split or whole is tried, passed and
    returned so, and the choice with the fewest collectives is taken, then the fewest stages,
    then the fewest bytes moved (a few dozen plans at most, tens of ms each, kept with the
    programs)."""
    library = resolve_library(None)
    dag = script_dag(method.script, None, None, library)

    def inputs(planned) -> dict[str, Layout]:
        return {dag.value(v).name: planned.layout(v) for v in dag.inputs}
    calls = inputs(plan(method.script, dtype=dtype, sizes={"n": n}, ranks=ranks))
    if mode == "calls":
        return calls, True
    best, best_key = None, None
    for layouts in itertools.product((Layout.SPLIT, Layout.WHOLE), repeat=len(method.state)):
        chosen = {v: str(layout) for v, layout in zip(method.state, layouts)}
        try:
            planned = plan(method.script, dtype=dtype, sizes={"n": n}, ranks=ranks, inputs=chosen,
                           results={f"{v}1": layout for v, layout in chosen.items()})
        except ArgumentError:  # a state vector made in a layout no collective turns into the one asked for
            continue
        if mode == "agreed" and summed_on_every_rank(planned, dag, library):
            continue
        key = (len(planned.launches), len(planned.stages), sum(c.bytes for c in planned.collectives),
               mode == "agreed" and inputs(planned) != calls)  # "agreed" keeps the calls' own on a tie
        if best_key is None or key < best_key:
            best, best_key = inputs(planned), key
    if best is None or (mode == "agreed" and best == calls):
        return calls, True
    return best, False


def _iteration_layouts(method: Method, layouts: dict[str, Layout], own: bool) -> dict:
    """The ``results=`` and ``inputs=`` the iteration is compiled with, from :func:`_input_layouts`."""
    return {"results": {f"{v}1": str(layouts[v]) for v in method.state},
            "inputs": None if own else {v: str(layouts[v]) for v in method.state}}


def iteration_plan(solver: str, n: int, ranks: int, dtype="float32", layouts: str | None = None):
    """The distributed plan of the iteration that ``cg``, ``bicg`` or ``bicgstab`` (``solver``)
    runs over ``ranks`` ranks for an n x n system, in the state layouts ``layouts`` chooses (as
    :func:`solve` takes it), without a GPU: its stages (each with its script, what
    ``tools/stage_scripts.py --solver`` writes to tune) and its collectives."""
    if solver not in METHODS:
        raise ArgumentError("solver", f"is {solver!r}: pass one of {', '.join(METHODS)}")
    n = validate.count("n", n, 1)
    ranks = validate.count("ranks", ranks, 1)
    dtype = validate.dtype(dtype)
    method = METHODS[solver]
    chosen, own = _input_layouts(method, dtype, n, ranks, _layouts_choice(layouts))
    return plan(method.script, dtype=dtype, sizes={"n": n}, ranks=ranks, **_iteration_layouts(method, chosen, own))


def _check_finite(bb: float, rr0: float, x0_given: bool, xx0: Callable[[], float]) -> None:
    """The ArgumentError that ``||b||^2`` and ``||b - A x0||^2`` (all-reduced: the same numbers on
    every rank, so every rank raises the same error, and none waits for the others) call for:
    NaN or infinity in b or x0 (``xx0()``: ``||x0||^2``, read only then), as fusec.solvers says.
    A is not surveyed (a pass over it): NaN in A shows only through A x0, else as a breakdown."""
    if not math.isfinite(bb):
        raise ArgumentError("b", "contains NaN or infinity on some rank (its squared norm over the ranks is"
                                 f" {bb}; or its entries are so large that their squares overflow)")
    if x0_given and not math.isfinite(rr0):
        xx = xx0()
        if not math.isfinite(xx):
            raise ArgumentError("x0", f"contains NaN or infinity on some rank (its squared norm over the ranks is"
                                      f" {xx}; or its entries are so large that their squares overflow)")
        raise ArgumentError("A", f"b - A x0 is not finite (its squared norm over the ranks is {rr0}): A contains"
                                 " NaN or infinity on some rank, or A x0 overflows")


def _check_system(A, b, x0) -> int:
    for name, array, dims in (("A", A, 2), ("b", b, 1), ("x0", x0, 1)):
        if array is None and name == "x0":
            continue
        if framework_of(array) is None or len(array.shape) != dims:
            raise ArgumentError(name, f"is {type(array).__name__}{getattr(array, 'shape', '')}: pass this rank's"
                                      f" rows of {'the matrix (a 2-D array)' if dims == 2 else 'a vector (1-D)'}"
                                      ", a NumPy or CuPy array or a PyTorch tensor")
        if framework_of(array) != framework_of(A):
            raise ArgumentError(name, f"is a {framework_of(array)} array, but A is a {framework_of(A)} one: pass"
                                      " arrays of one framework")
        if str(array.dtype) not in ("float32", "float64") or str(array.dtype) != str(A.dtype):
            raise ArgumentError(name, f"has dtype {array.dtype}: pass float32 or float64, as A")
    n = A.shape[1]
    if n < 1:
        raise ArgumentError("A", f"has shape {tuple(A.shape)}: an n x n system has n >= 1 columns")
    return n


class DistributedStepper:
    """What :func:`fusec.solvers.driver.run` drives: the state of one rank (its blocks, and the
    whole vectors the gemvs read), the iteration's program, and a checkpoint to go back to.

    With ``graphs``, ``k`` calls from a turn (below) are captured in a CUDA graph the first time
    they come, once each of their calls has run plainly on the same arrays, and replayed after
    that (:meth:`fusec.distributed.DistributedProgram.capture`; an iteration that cannot be
    captured makes plain calls for good). A graph reads the set of arrays its first call reads
    (the other set than its turn's): the state must lie there, so the first call of a first
    solve (from the starting arrays) and the first after going back to copies are plain. A
    stepper serves solve after solve (:meth:`begin`), its graphs with it while ``A`` stays."""

    def __init__(self, method: Method, iteration, norm, gather, arrays, A, x0, r0, whole: set[str], *,
                 graphs: bool = False):
        """``whole``: the inputs the iteration reads whole (gathered at the start)."""
        self.method, self.iteration, self.norm, self.arrays = method, iteration, norm, arrays
        self.gather, self.whole = gather, whole
        self.A, self.A_placement = A, arrays.placement(A)
        self.state = self._start(x0, r0)
        self.saved = dict(self.state)
        self.last: dict[str, Any] = {}
        # the iteration's results go to two sets of arrays in turn (the first call's own, and
        # arrays like them): the stages then get the same arrays call after call, and find
        # the calls they prepared for them (new arrays every call had them prepared again)
        self.sets: list[dict[str, Any]] = []
        self.turn = self.saved_turn = 0
        self.capture_works = True  # until a capture is refused (then plain calls for good)
        self.graphs_allowed = graphs and getattr(iteration, "capturable", False)
        self.graphs: dict[tuple[int, int], Any] = {}  # (turn, calls) -> CapturedCalls
        self.warm: set[int] = set()  # turns whose call ran plainly from the other set

    def _start(self, x0, r0, places: dict[str, Any] | None = None) -> dict[str, Any]:
        """The first state (the gemvs' whole vectors gathered), copied into ``places`` where it
        names the array (those the graphs read), else in arrays of its own."""
        places = places or {}
        state = {}
        for name, value in self.method.start(x0, r0, lambda v: v).items():
            if name in self.whole:
                value = self.gather(v=value)  # a new array
            elif name not in places:
                value = self.arrays.copy(value)
            if name in places:
                self.arrays.copy_into(places[name], value)
                value = places[name]
            state[name] = value
        return state

    def begin(self, A, x0, r0, *, graphs: bool) -> None:
        """Start another solve. The first state goes into the set the next call reads, so that the
        graphs captured before serve from the first call: they are kept where ``A`` is the same
        memory with the same strides as the last solve's on every rank (a graph holds the
        addresses it was captured with; the ranks agree, one all-reduce, as a graph replayed on
        one rank and captured on another would pair their collectives wrongly). Another matrix
        drops them and warms again."""
        placement = self.arrays.placement(A)
        self.graphs_allowed = graphs and getattr(self.iteration, "capturable", False) and self.capture_works
        # the same on every rank (graphs, warm and capture_works follow the ranks' common calls)
        keep = self.graphs_allowed and bool(self.graphs or self.warm)
        if not (keep and self.iteration.agree(placement == self.A_placement)):
            self.graphs.clear()
            self.warm.clear()
        self.A, self.A_placement = A, placement
        # into the arrays the graphs read: the fixed inputs' own, the state's in the set the next call reads
        places = {name: self.state[name] for name in self.method.fixed}
        if self.sets:
            places.update({name: self.sets[1][f"{name}1"] for name in self.method.state})
        self.state = self._start(x0, r0, places)
        self.saved = dict(self.state)
        self.turn = self.saved_turn = 0
        self.last = {}

    def end(self) -> None:
        """Let go of the solve's ``A`` (a kept stepper must not keep a caller's matrix alive); its
        address stays, for :meth:`begin` to know it again."""
        self.A = None

    def advance(self, iterations: int) -> None:
        # the state before, to go back to: the arrays the next call reads and does not write,
        # unless a later call of this advance writes them (the sets alternate)
        self.saved = (dict(self.state) if iterations == 1
                      else {name: self.arrays.copy(value) for name, value in self.state.items()})
        self.saved_turn = self.turn  # after going back, the next call writes the set it wrote then
        graph = self._graph(iterations)
        if graph is None:
            self._calls(iterations)
            return
        graph.launch()
        last = self.sets[(self.turn + iterations - 1) % 2]
        self.last, self.turn = last, (self.turn + iterations) % 2
        for name in self.method.state:
            self.state[name] = last[f"{name}1"]

    def _in_sets(self) -> bool:
        """Whether the state lies in the set the next call reads (not the starting arrays, not copies)."""
        return bool(self.sets) and all(self.state[name] is self.sets[1 - self.turn][f"{name}1"]
                                       for name in self.method.state)

    def _graph(self, iterations: int):
        """The graph of ``iterations`` calls from here: kept, or captured now where every call of it
        has run plainly before from where it reads; None where it cannot be replayed here."""
        if not self.graphs_allowed or not self._in_sets():
            return None
        key = (self.turn, iterations)
        graph = self.graphs.get(key)
        if graph is None and self.warm >= ({0, 1} if iterations > 1 else {self.turn}):
            state, turn, last = dict(self.state), self.turn, self.last
            graph = self.iteration.capture(lambda: self._calls(iterations))
            self.state, self.turn, self.last = state, turn, last  # the calls were captured, not run
            if graph is None:  # refused here, or on another rank: plain calls from now on
                self.graphs_allowed = self.capture_works = False
            else:
                self.graphs[key] = graph
        return graph

    def _calls(self, iterations: int) -> None:
        """``iterations`` calls of the iteration, each writing its turn's set."""
        for _ in range(iterations):
            warming = self._in_sets()
            out = {"out": self.sets[self.turn]} if self.sets else {}
            results = self.iteration(A=self.A, **self.state, **out)
            self.last = dict(zip(self.iteration.outputs, results if isinstance(results, tuple) else (results,)))
            if not self.sets:
                self.sets = [self.last, {name: self.arrays.empty_like(a) for name, a in self.last.items()}]
            if warming:
                self.warm.add(self.turn)
            self.turn = 1 - self.turn
            for name in self.method.state:
                self.state[name] = self.last[f"{name}1"]

    def restore(self) -> None:
        self.state = dict(self.saved)
        self.turn = self.saved_turn  # not the set the saved state lies in

    def squared_norm(self) -> float:
        return self.arrays.read(self.last["rr1"])

    def x(self):
        return self.state["x"]

    def half_step_norm(self) -> float | None:
        if self.method.half_step is None:
            return None
        return self.arrays.read(self.norm(v=self.last[self.method.half_step[1]]))

    def finish_at_half_step(self) -> None:
        self.state["x"] = self.last[self.method.half_step[0]]

    def loops_on_device(self) -> bool:
        return False
