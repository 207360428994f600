"""Scalar inputs read from device memory (``fusec.compile(..., device_scalars=...)``), without a GPU.

A device scalar changes how a scalar reaches the kernels (a ``const real*`` read once at
kernel start instead of a ``const real`` parameter), nothing else: the plan, the tuning
key, and every line of the generated CUDA that does not name it are the same. Bad
names at compile time and bad arrays at call time are ArgumentErrors naming the
argument. Device arrays are faked (tests/test_runtime_binding.py): nothing here
dereferences a pointer.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import fusec
import fusec.distributed as fd
from fusec import nvcc
from fusec.errors import ArgumentError
from fusec.frontend import load_script
from fusec.library.model import Kind
from fusec.space import unfused_plan
from fusec.tune import store as tuning
from tests.helpers import ROOT, library
from tests.test_runtime_binding import device

pytestmark = pytest.mark.filterwarnings("ignore:no GPU here and none named:fusec.cost.perfdb.store.PerfdbWarning")

SIZES = {"n": 256}

# a returned expression of an input scalar and a dot: the scalar family's one-thread kernel reads both
RETURNS_EXPRESSION = """\
vector x[n], y[n];
scalar alpha, r, s;
input x, y, alpha;
r = sdot(x, y);
s = r * alpha;
return s;
"""

# an input scalar inside an expression that a vector kernel evaluates
READS_EXPRESSION = """\
vector x[n], y[n], z[n];
scalar alpha, beta, c;
input x, y, alpha, beta;
c = alpha / beta;
z = saxpy(c, x, y);
return z;
"""

# (script path or source, the scalars read from device memory): a vector kernel (WAXPBY's
# sscal), a tile/band kernel and a held fusion (GEMVER's gemvs), a dot's kernel (AXPYDOT),
# the scalar family's kernel, and an expression evaluated in a kernel
CASES = {
    "waxpby": (ROOT / "scripts" / "waxpby.script", ("alpha",)),
    "gemver": (ROOT / "scripts" / "gemver.script", ("alpha", "beta")),
    "axpydot": (ROOT / "scripts" / "axpydot.script", ("alpha",)),
    "returns-expression": (RETURNS_EXPRESSION, ("alpha",)),
    "reads-expression": (READS_EXPRESSION, ("beta",)),
}


def _compile(case: str, device_scalars=(), **kwargs):
    script, _ = CASES[case]
    where = {"source": script} if isinstance(script, str) else {"script": script}
    return fusec.compile(**where, library=library(), sizes=SIZES, tuned=False, device_scalars=device_scalars,
                         **kwargs)


def _plans(case: str, dtype: str = "float32"):
    """The default plan and the unfused one (every call its own kernel: GEMVER's gemvs then run as
    tile kernels, its default plan is a held fusion of band kernels)."""
    script, _ = CASES[case]
    default = _compile(case, dtype=dtype).generated.plan
    if isinstance(script, str):
        return (default,)
    return default, unfused_plan(load_script(script, library()), library())


def _declarations(prog, name: str) -> set[str]:
    """Every kernel parameter declaring the scalar input ``name`` (by its C name)."""
    value = next(v for v in prog.dag.values if v.name == name and prog.dag.is_input(v.id))
    return {a.decl for k in prog.kernels for a in k.args if a.value == value.id and a.role.startswith("scalar")}


@pytest.mark.parametrize("case", CASES)
def test_a_device_scalar_is_a_pointer_read_once_and_the_others_stay_values(case):
    _, on_device = CASES[case]
    for plan in _plans(case):
        host, dev = _compile(case, plan=plan), _compile(case, on_device, plan=plan)
        scalars = [dev.dag.value(v).name for v in dev.dag.inputs if dev.dag.value(v).kind is Kind.SCALAR]
        for name in scalars:
            c = next(v.c_name for v in dev.dag.values if v.name == name and dev.dag.is_input(v.id))
            assert _declarations(host, name) <= {f"const real {c}"}
            if name in on_device:
                assert _declarations(dev, name) == {f"const real* __restrict__ g_{c}"}
                readers = sum(1 for k in dev.kernels for a in k.args if a.role == "scalar_ptr" and a.decl.endswith(c))
                reads = dev.source.count(f"const real {c} = *g_{c};  // the caller's device array (device_scalars)")
                assert readers >= 1 and reads >= readers  # each kernel reading it (or each part of a fusion)
            else:
                assert _declarations(dev, name) == _declarations(host, name)
        # only lines naming a device scalar differ: the plan and every other kernel are the same
        assert dev.generated.plan == host.generated.plan
        names = [next(v.c_name for v in dev.dag.values if v.name == n and dev.dag.is_input(v.id)) for n in on_device]
        for before, after in zip(host.generated.sources, dev.generated.sources):
            if not any(re.search(rf"\b(g_)?{c}\b", before) for c in names):
                assert before == after
            else:
                kept = [line for line in after.split("\n") if not any(c in line for c in names)]
                assert kept == [line for line in before.split("\n") if not any(c in line for c in names)]


def test_without_device_scalars_the_program_is_unchanged():
    """An empty collection, or none of a script's scalars named, compiles what fusec compiled before."""
    plain = _compile("gemver")
    assert _compile("gemver", []).source == plain.source == _compile("gemver", frozenset()).source
    assert not plain.dag.device_scalars and "device:" not in plain.describe()


def test_the_tuning_key_and_the_plan_are_the_same():
    """How a scalar arrives is no part of what a plan is tuned for: a shipped or cached tuning serves both."""
    dag = load_script(CASES["gemver"][0], library())
    marked = dag.with_device_scalars(("alpha", "beta"))
    assert marked != dag and marked.text == dag.text
    for gpu in ("h100-80gb-hbm3", "h200"):
        assert tuning.key(marked, library(), "float32", {"m": 4096, "n": 4096}, gpu) == \
            tuning.key(dag, library(), "float32", {"m": 4096, "n": 4096}, gpu)
    assert _compile("gemver", ("alpha",)).generated.plan == _compile("gemver").generated.plan


def test_the_plan_text_names_the_scalars_read_from_device_memory():
    text = _compile("gemver", ("beta", "alpha")).describe()
    assert "device:  alpha, beta read from device memory (each call passes a one-element device array)" in text


def test_marking_is_idempotent_and_kept_by_replanned_programs():
    dag = load_script(CASES["waxpby"][0], library())
    once = dag.with_device_scalars(["alpha"])
    assert once.with_device_scalars(["alpha"]) is once
    assert [once.value(v).name for v in once.device_scalars] == ["alpha"]
    assert once.with_device_scalars(["beta"]).device_scalars == (once.inputs[2], once.inputs[3])
    prog = _compile("waxpby", ("alpha",))
    assert prog.replan({"n": 512}).dag.device_scalars == prog.dag.device_scalars


@pytest.mark.parametrize("device_scalars, message", [
    ("alpha", "is a str: pass a tuple, list or set of the names of scalar inputs"),
    (None, "is a NoneType: pass a tuple, list or set"),
    ({"alpha": 1}, "is a dict: pass a tuple, list or set"),
    (("alpha", 3), "holds 3 (int): pass the names (str) of scalar inputs"),
    (("gamma",), "names 'gamma', which is not an input of"),
    (("w",), "names 'w', which is not an input of"),  # the result, not an input
    (("x",), "names 'x', a vector input of"),
])
def test_bad_device_scalars_name_the_argument(device_scalars, message):
    with pytest.raises(ArgumentError) as info:
        _compile("waxpby", device_scalars)
    assert info.value.argument == "device_scalars" and message in str(info.value)
    if message.startswith("names"):  # what it could have named
        assert "(its scalar inputs: alpha, beta)" in str(info.value)


def test_compile_dag_and_build_program_take_them_too():
    from fusec.api import build_program, compile_dag
    dag = load_script(CASES["waxpby"][0], library())
    for make in (lambda: compile_dag(dag, library(), sizes=SIZES, tuned=False, device_scalars=("beta",)),
                 lambda: build_program(dag, library(), sizes=SIZES, tuned=False, spill_arch=None,
                                       device_scalars=("beta",))[0]):
        assert [make().dag.value(v).name for v in make().dag.device_scalars] == ["beta"]
    with pytest.raises(ArgumentError, match="names 'A'"):
        build_program(dag, library(), sizes=SIZES, device_scalars=("A",))


# -- binding a call -------------------------------------------------------------------


def _waxpby_args(alpha, n=8, module="fake_device", **override):
    args = {"x": device((n,), module=module), "y": device((n,), module=module), "alpha": alpha, "beta": 2.0}
    args.update(override)
    return args


@pytest.mark.parametrize("shape", [(), (1,)])
def test_a_one_element_device_array_binds_as_an_array(shape):
    prog = _compile("waxpby", ("alpha",))
    binding = prog.bind(_waxpby_args(device(shape)))
    alpha = prog.dag.inputs[2]
    assert binding.arrays[alpha].shape == shape and alpha not in binding.scalars
    assert binding.scalars == {prog.dag.inputs[3]: 2.0} and binding.sizes == {"n": 8}


@pytest.mark.parametrize("alpha, message", [
    (0.5, "pass a device array of one element (shape () or (1,)), not the host number 0.5"),
    (np.float32(0.5), "not the host number"),
    (np.ones(1, np.float32), "pass a device array of one element (shape () or (1,)), not a NumPy array"),
    (np.ones((), np.float32), "not a NumPy array"),
    ("0.5", "got str"),
    (device((2,)), "got shape (2,)"),
    (device((1, 1)), "got 2 dimension(s) (1, 1)"),
    (device((1,), typestr="<f8"), "has dtype float64, but the program was compiled for float32"),
    (device((), module="torch"), "is a torch array, but the other arrays are cupy arrays: pass one of those"),
])
def test_a_bad_device_scalar_names_the_argument(alpha, message):
    prog = _compile("waxpby", ("alpha",))
    with pytest.raises(ArgumentError) as info:
        prog.bind(_waxpby_args(alpha, module="cupy"))
    assert info.value.argument == "alpha" and message in str(info.value)


def test_a_device_scalar_with_numpy_arrays_asks_for_device_arrays():
    prog = _compile("waxpby", ("alpha",))
    with pytest.raises(ArgumentError, match="the other arrays are NumPy arrays: pass them as device arrays too"):
        prog.bind({"x": np.ones(8, np.float32), "y": np.ones(8, np.float32), "alpha": device(()), "beta": 1.0})


def test_the_other_scalars_stay_host_numbers():
    prog = _compile("waxpby", ("alpha",))
    with pytest.raises(ArgumentError, match="pass a host number, not a device array") as info:
        prog.bind(_waxpby_args(device(()), beta=device(())))
    assert info.value.argument == "beta"


# -- nvcc ---------------------------------------------------------------------------


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", CASES)
def test_the_generated_cuda_compiles(case, dtype):
    _, on_device = CASES[case]
    for plan in _plans(case, dtype):
        prog = _compile(case, on_device, plan=plan, dtype=dtype)
        compiled = nvcc.compile_cubin(prog.source, arch="sm_90", use_cache=False)
        assert set(compiled.resources) >= {f for k in prog.kernels for f in k.function_names}


# -- distributed stages ---------------------------------------------------------------


def test_a_stages_scalar_from_a_collective_reaches_it_as_an_array():
    """CG over two thread ranks: the stages after the all-reduces of rr and pq are told to read
    them from device memory and get them as one-element arrays (the collective's own buffers),
    never a host number; the scalars the caller passes stay host numbers."""
    from fusec.distributed.threads import oracle_executor, run_ranks
    seen: list[tuple[int, str, type]] = []

    def recording(stage):
        run = oracle_executor(library(), "float64")(stage)

        def call(**args):
            seen.extend((stage.index, name, type(args[name])) for name in stage.device_scalars)
            return run(**args)
        return call

    def work(comm):
        prog = fd.compile(str(ROOT / "scripts" / "solvers" / "cg.script"), dtype="float64", sizes={"n": 37},
                          comm=comm, executor=recording, latency=False)
        rng = np.random.default_rng(comm.rank)
        args = {name: rng.uniform(-0.5, 0.5, prog.local_shape(name)) for name in prog.inputs}
        prog(**args)
        return prog.plan

    plan = run_ranks(2, work)[0]
    on_device = {(s.index, n) for s in plan.stages for n in s.device_scalars}
    assert on_device == {(1, "rr_whole"), (1, "pq_whole"), (2, "rr_whole"), (2, "rr1_whole")}
    assert {(i, n) for i, n, _ in seen} == on_device and {t for *_, t in seen} == {np.ndarray}
    assert all(not s.device_scalars for s in fd.plan(str(ROOT / "scripts" / "waxpby.script"), ranks=2,
                                                          sizes={"n": 37}).stages)  # alpha, beta: the caller's


def test_the_oracle_executor_refuses_a_host_number_for_a_device_scalar():
    from fusec.distributed.threads import oracle_executor
    plan = fd.plan(str(ROOT / "scripts" / "solvers" / "cg.script"), ranks=2, sizes={"n": 8})
    stage = plan.stages[2]
    run = oracle_executor(library(), "float64")(stage)
    args = {"p_split": np.ones(4), "r1": np.ones(4), "rr_whole": np.ones(1), "rr1_whole": 2.0}
    with pytest.raises(ArgumentError) as info:
        run(**args)
    assert info.value.argument == "rr1_whole" and "pass an array of one element" in str(info.value)
    args["rr1_whole"] = np.full((1,), 2.0)
    np.testing.assert_allclose(run(**args), np.full(4, 3.0))  # p1 = beta p + r1, beta = 2 / 1


def test_the_distributed_plan_text_says_which_scalars_stay_on_the_device():
    from fusec.distributed.text import describe
    from tests.helpers import script_dag
    plan = fd.plan(str(ROOT / "scripts" / "solvers" / "cg.script"), ranks=2, sizes={"n": 64})
    assert "reads rr_whole, pq_whole from device memory (no host wait)" in describe(plan, script_dag("solvers/cg"))
