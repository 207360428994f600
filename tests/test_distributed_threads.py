"""CPU tier: distributed programs run whole on ranks that are threads
(fusec.distributed.threads), each stage evaluated by the float64 oracle.

Every sequence, over P = 2, 3 and 8 ranks, at sizes that do not divide by P and
at sizes smaller than P (ranks holding no rows): the blocks every rank gets
back, put together, pass the oracle's test ratio. A rank that raises ends
the others' collectives at once; one that never comes ends them at the timeout.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

import fusec.distributed as fd
from fusec import oracle
from fusec.distributed.errors import CollectiveError, CollectiveTimeoutError
from fusec.distributed.threads import oracle_executor, run_ranks
from fusec.errors import ArgumentError
from tests.helpers import ROOT, library, script_dag, script_names


def _path(script: str) -> str:
    return str(ROOT / "scripts" / f"{script}.script")


def _compile(script, comm, sizes, dtype="float64", **kwargs):
    return fd.compile(_path(script), dtype=dtype, sizes=sizes, comm=comm,
                      executor=oracle_executor(library(), dtype), latency=False, **kwargs)


def _run_everywhere(script: str, ranks: int, sizes: dict, dtype="float64", **kwargs):
    """(inputs, each rank's program and results) of one call on ``ranks`` thread ranks."""
    dag = script_dag(script)
    full = {s: sizes.get(s, sizes.get("n")) for s in dag.sizes}
    inputs = oracle.random_inputs(dag, full, dtype, np.random.default_rng(ranks * 1000 + sum(full.values())))

    def work(comm):
        prog = _compile(script, comm, sizes, dtype, **kwargs)
        local = {k: prog.local(k, v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
        out = prog(**local)
        return prog, dict(zip(prog.outputs, out if isinstance(out, tuple) else (out,)))
    return inputs, run_ranks(ranks, work)


def _assemble(results, ranks):
    prog = results[0][0]
    whole = {}
    for name in prog.outputs:
        if prog.rows(name) is None:  # whole on every rank, the same
            whole[name] = results[0][1][name]
            for r in range(1, ranks):
                np.testing.assert_array_equal(results[r][1][name], whole[name])
        else:
            parts = [results[r][1][name] for r in range(ranks)]
            for r, part in enumerate(parts):
                lo, hi = prog.rows(name, r)
                assert part.shape[0] == hi - lo
            whole[name] = np.concatenate(parts)
    return whole


def _check(script, inputs, whole, dtype):
    checks = oracle.check_outputs(script_dag(script), library(), inputs, whole, dtype)
    failed = [str(c) for c in checks if not c.passed]
    assert not failed, "; ".join(failed)


def _cases():
    out = []
    for script in script_names():
        two = len(script_dag(script).sizes) == 2
        out.append(pytest.param(script, 2, {"n": 37}, id=f"{script}-P2-37"))
        out.append(pytest.param(script, 3, {"m": 38, "n": 19} if two else {"n": 38}, id=f"{script}-P3-rect"))
        out.append(pytest.param(script, 8, {"n": 5}, id=f"{script}-P8-idle"))  # 3 ranks hold no rows
    return out


@pytest.mark.parametrize("script, ranks, sizes", _cases())
def test_every_sequence_against_the_oracle(script, ranks, sizes):
    inputs, results = _run_everywhere(script, ranks, sizes)
    _check(script, inputs, _assemble(results, ranks), "float64")


SOLVERS = ("solvers/cg", "solvers/bicg", "solvers/bicgstab")


@pytest.mark.parametrize("ranks, sizes", [(2, {"n": 37}), (3, {"n": 38}), (8, {"n": 5})], ids=["P2", "P3", "P8-idle"])
@pytest.mark.parametrize("script", SOLVERS)
def test_the_solvers_iterations_against_the_oracle(script, ranks, sizes):
    """One iteration of each solver: its scalar expressions (alpha = rr / pq) are evaluated on
    every rank from whole operands, so the dots' partial sums are all-reduced first."""
    inputs, results = _run_everywhere(script, ranks, sizes)
    _check(script, inputs, _assemble(results, ranks), "float64")


def test_a_stage_evaluates_the_expressions_its_calls_read():
    plan = fd.plan(_path("solvers/cg"), ranks=2, sizes={"n": 4096}, dtype="float32")
    text = "".join(stage.source for stage in plan.stages)
    assert "alpha = rr_whole / pq_whole;  # cg.script:" in text and "beta = rr1_whole / rr_whole;" in text
    dag = script_dag("solvers/cg")
    # the dots' partial sums, before the stages dividing by them: three scalars, no vector (an
    # all-gather of q would make pq whole too, at 4096 times the bytes)
    assert [(c.op, dag.value(c.value).name, c.bytes) for c in plan.collectives] == \
        [(fd.Op.ALL_REDUCE, "rr", 4), (fd.Op.ALL_REDUCE, "pq", 4), (fd.Op.ALL_REDUCE, "rr1", 4)]
    from fusec.distributed.text import describe
    shown = describe(plan, dag)
    assert "cg.script:14  alpha = rr / pq  (every rank)\n          cg.script:15  x1 = saxpy(alpha, p, x)" in shown


REASSIGNED = """\
matrix A[n, n];
vector x[n], r[n], q[n], y[n], z[n];
scalar a, b, c;
input A, x, r;
q = sgemv(A, x);
a = sdot(r, q);
c = a / 2.0;
y = saxpy(c, x, r);
b = sdot(y, y);
c = b * a;
z = saxpy(c, y, x);
return z;
"""


def test_a_scalar_expression_assigned_twice_is_two_values_over_ranks():
    """The second c reads a dot of the first c's result: each stage evaluates its own version,
    under a name of its own (c, then c_2), and the blocks agree with the oracle."""
    plan = fd.plan(source=REASSIGNED, sizes={"n": 29}, ranks=3)
    assert "c = a_whole / 2.0;" in plan.stages[1].source and "c_2 = b_whole * a_whole;" in plan.stages[2].source
    from fusec.frontend import check, parse
    dag = check(parse(REASSIGNED, "<string>"), library())
    inputs = oracle.random_inputs(dag, {"n": 29}, "float64", 5)

    def work(comm):
        prog = fd.compile(source=REASSIGNED, dtype="float64", sizes={"n": 29}, comm=comm,
                          executor=oracle_executor(library(), "float64"), latency=False)
        return prog(**{k: prog.local(k, v) for k, v in inputs.items()})
    whole = {"z": np.concatenate(run_ranks(3, work))}
    checks = oracle.check_outputs(dag, library(), inputs, whole, "float64")
    assert all(c.passed for c in checks), [str(c) for c in checks]


def test_a_returned_scalar_expression_is_a_distribution_error():
    source = ("vector x[n], y[n];\nscalar d, s;\ninput x, y;\nd = sdot(x, y);\ns = sqrt(d);\nreturn s;\n")
    with pytest.raises(fd.DistributionError, match=r"returns the scalar expression s") as caught:
        fd.plan(source=source, name="norm.script", ranks=2, sizes={"n": 100}, dtype="float32")
    assert caught.value.coord.line == 5


@pytest.mark.parametrize("script", ["bicgk", "gemver", "axpydot"])
def test_single_precision(script):
    inputs, results = _run_everywhere(script, 3, {"n": 40}, "float32")
    _check(script, inputs, _assemble(results, 3), "float32")


def test_one_rank_is_the_plain_program():
    inputs, results = _run_everywhere("gemver", 1, {"n": 30})
    prog, out = results[0]
    assert prog.programs[0] is not None and len(prog.plan.stages) == 1
    direct = oracle_executor(library(), "float64")(prog.plan.stages[0])(**inputs)
    for name, value in zip(prog.outputs, direct):
        np.testing.assert_array_equal(out[name], value)


def test_fewer_ranks_holding_rows_than_ranks():
    inputs, results = _run_everywhere("gemver", 4, {"m": 37, "n": 19}, active=2)
    assert [p.holds_rows for p, _ in results] == [True, True, False, False]
    assert results[3][1]["w"].shape == (0,) and results[3][1]["B"].shape == (0, 19)
    _check("gemver", inputs, _assemble(results, 4), "float64")


def test_one_rank_holding_rows_broadcasts_whole_results():
    inputs, results = _run_everywhere("atax", 3, {"n": 21}, active=1)
    _check("atax", inputs, _assemble(results, 3), "float64")


def test_a_rank_that_raises_ends_the_others_at_once():
    def work(comm):
        prog = _compile("bicgk", comm, {"n": 20})
        if comm.rank == 1:
            raise ValueError("rank 1 gives up")
        A = np.ones(prog.local_shape("A"))
        return prog(A=A, p=np.ones(20), r=np.ones(prog.local_shape("r")))
    started = time.monotonic()
    with pytest.raises(ValueError, match="rank 1 gives up"):
        run_ranks(3, work, timeout=60)
    assert time.monotonic() - started < 30  # not the timeout: the failing rank aborted the others


def test_a_rank_that_never_comes_times_out():
    errors = []

    def work(comm):
        prog = _compile("axpydot", comm, {"n": 20})
        if comm.rank == 0:
            time.sleep(1.5)  # past the others' deadline: it never joins their all-reduce in time
            return None
        try:
            return prog(w=np.ones(10), v=np.ones(10), u=np.ones(10), alpha=2.0)
        except CollectiveTimeoutError as exc:
            errors.append(exc)
            raise
    with pytest.raises(CollectiveError):
        run_ranks(2, work, timeout=0.5)
    assert errors and "did not finish within 0.5 s" in str(errors[0])


def test_scatter_and_gather_whole_arrays():
    rng = np.random.default_rng(5)
    A, p = rng.uniform(size=(11, 7)), rng.uniform(size=7)

    def work(comm):
        prog = _compile("bicgk", comm, {"m": 11, "n": 7})
        mine = prog.scatter("A", A if comm.rank == 0 else None)
        whole_p = prog.scatter("p", p if comm.rank == 0 else None)
        lo, hi = prog.rows("A")
        np.testing.assert_array_equal(mine, A[lo:hi])
        np.testing.assert_array_equal(whole_p, p)
        return prog.gather("A", mine)
    results = run_ranks(3, work)
    np.testing.assert_array_equal(results[0], A)
    assert results[1] is None and results[2] is None


def test_timings_name_every_step():
    def work(comm):
        prog = _compile("gemver", comm, {"n": 12})
        args = {k: (np.ones(prog.local_shape(k)) if k not in ("alpha", "beta") else 1.0) for k in prog.inputs}
        prog.run(args, timings=True)
        return prog.last_timings
    timings = run_ranks(2, work)[0]
    assert [s.label for s in timings.steps] == ["stage 0", "all-reduce x", "stage 1"]
    assert [s.kind for s in timings.steps] == ["local", "collective", "local"]


@pytest.mark.parametrize("change, argument, message", [
    (lambda a, p: a.update(A=a["A"][:-1]), "A", r"rank \d of 2 passes rows .* expected shape"),
    (lambda a, p: a.pop("r"), "r", "is missing"),
    (lambda a, p: a.update(q=a["r"]), "q", "is not an input"),
    (lambda a, p: a.update(p=a["p"][:-1]), "p", "passes the whole of p"),
])
def test_bad_arguments_name_the_argument_and_the_rank(change, argument, message):
    def work(comm):
        prog = _compile("bicgk", comm, {"n": 9})
        args = {k: np.ones(prog.local_shape(k)) for k in prog.inputs}
        change(args, prog)
        with pytest.raises(ArgumentError, match=f"argument '{argument}'.*{message}"):
            prog(**args)
    run_ranks(2, work)


def test_a_communicator_of_another_size_is_refused():
    plan = fd.plan(_path("bicgk"), sizes={"n": 9}, ranks=3)

    def work(comm):
        from fusec.distributed.program import DistributedProgram
        with pytest.raises(ArgumentError, match="argument 'comm'.*2 rank"):
            DistributedProgram(plan, script_dag("bicgk"), comm, oracle_executor(library(), "float64"))
    run_ranks(2, work)


def test_a_callers_communicator_is_wrapped_once(monkeypatch):
    """The programs and graphs kept between solves are kept by fusec's communicator: the same
    NCCL communicator or process group of the caller's gets the same one each call (a new one
    each call compiled the solve's programs again), another its own; the oldest of more than
    MOST_GIVEN go."""
    from fusec.distributed import comm as comm_module

    class Nccl:  # cupy.cuda.nccl.NcclCommunicator's part fusec reads
        __module__ = "cupy.cuda.nccl"

        def rank_id(self):
            return 0

        def device_id(self):
            return 0

    class Group:
        __module__ = "torch.distributed.distributed_c10d"
    made = []
    monkeypatch.setattr(comm_module, "_GIVEN", {})
    monkeypatch.setattr(comm_module, "_use_device", lambda device: None)
    monkeypatch.setattr(comm_module, "NcclComm", lambda handle, device: made.append(handle) or object())
    monkeypatch.setattr(comm_module, "TorchComm", lambda group: made.append(group) or object())
    first, second, group = Nccl(), Nccl(), Group()
    assert comm_module.communicator(first) is comm_module.communicator(first)
    assert comm_module.communicator(second) is not comm_module.communicator(first)
    assert comm_module.communicator(group) is comm_module.communicator(group)
    assert comm_module.communicator("torch") is comm_module.communicator("torch")
    assert made == [first, second, group, None]
    for _ in range(comm_module.MOST_GIVEN):
        comm_module.communicator(Nccl())
    comm_module.communicator(first)
    assert made[-1] is first  # dropped as the oldest, wrapped anew


OVERLAP = """\
# s's sum is first read two stages on: its reduce-scatter may run beside stage 1
matrix A[n, n];
vector r[n], p[n], s[n], q[n], t[n], z[n], w[n];
input A, r, p;
s = sgemtv(A, r);
q = sgemv(A, p);
t = sgemv(A, q);
z = sgemv(A, t);
w = svadd(z, s);
return w;
"""


def test_a_collective_that_stages_can_overlap():
    plan = fd.plan(source=OVERLAP, sizes={"n": 23}, ranks=3)
    (spare,) = [c for c in plan.collectives if c.overlaps]
    assert (spare.op, spare.after, spare.first_use, spare.overlaps) == (fd.Op.REDUCE_SCATTER, 0, 2, (1,))
    from fusec.frontend import check, parse
    dag = check(parse(OVERLAP, "<string>"), library())
    inputs = oracle.random_inputs(dag, {"n": 23}, "float64", 3)

    def work(comm):
        prog = fd.compile(source=OVERLAP, dtype="float64", sizes={"n": 23}, comm=comm,
                          executor=oracle_executor(library(), "float64"), latency=False)
        return prog, prog(**{k: prog.local(k, v) for k, v in inputs.items()})
    results = run_ranks(3, work)
    whole = {"w": np.concatenate([w for _, w in results])}
    checks = oracle.check_outputs(dag, library(), inputs, whole, "float64")
    assert all(c.passed for c in checks), [str(c) for c in checks]


def test_a_programs_side_stream_lives_as_long_as_the_program(monkeypatch):
    """The stream a program's overlapping collective runs on is made once and kept by the
    program: a call's helper is gone after the call, and a stream kept only by it was destroyed
    while the program went on using its handle (CuPy: a crash in cuStreamWaitEvent on the second
    call, met by BiCGStab's iterations on two GPUs)."""
    import gc
    import weakref

    from fusec.distributed import arrays, program
    made: list = []

    class Owner:  # stands for a framework's stream object
        pass

    class Helper(arrays.NumpyArrays):
        def new_stream(self):
            owner = Owner()
            made.append(weakref.ref(owner))
            return arrays.SideStream(len(made), owner)

    monkeypatch.setattr(program, "arrays_for", lambda name, device: Helper())
    from fusec.frontend import check, parse
    dag = check(parse(OVERLAP, "<string>"), library())
    inputs = oracle.random_inputs(dag, {"n": 23}, "float64", 3)

    def work(comm):
        prog = fd.compile(source=OVERLAP, dtype="float64", sizes={"n": 23}, comm=comm,
                          executor=oracle_executor(library(), "float64"), latency=False)
        local = {k: prog.local(k, v) for k, v in inputs.items()}
        first = prog(**local)
        gc.collect()
        return prog, first, prog(**local)
    results = run_ranks(3, work)
    gc.collect()
    assert len(made) == 3 and all(ref() is not None for ref in made)  # one a rank, alive
    for _, first, second in results:
        np.testing.assert_array_equal(first, second)


def test_out_arrays_take_the_results_and_stages_keep_their_own_arrays():
    """``out=`` arrays get the results and are returned as them; what a call makes and does not
    return (the collectives' sums, the stages' results the next stage reads) goes to arrays the
    program keeps, so its stages get the same arrays call after call; the results of one call
    are the caller's and stay as they were through the next call."""
    source = _path("solvers/cg")
    dag = script_dag("solvers/cg")
    seen: dict = {}  # (rank, stage) -> the ids of each call's arguments

    def recording(dtype, rank_of):
        inner = oracle_executor(library(), dtype)

        def compile_stage(stage):
            run = inner(stage)

            def call(**arrays):
                seen.setdefault((rank_of(), stage.index), []).append(
                    {k: id(v) for k, v in arrays.items() if not isinstance(v, float)})
                return run(**arrays)
            return call
        return compile_stage

    inputs = oracle.random_inputs(dag, {"n": 23}, "float64", 5)

    def work(comm):
        prog = fd.compile(source, dtype="float64", sizes={"n": 23}, comm=comm, latency=False,
                          executor=recording("float64", lambda: comm.rank), results={"p1": "whole"})
        local = {k: prog.local(k, v) for k, v in inputs.items()}
        out = {name: np.full(prog.local_shape(name), np.nan) for name in prog.outputs}
        first = prog(**local, out=out)
        assert all(a is out[name] for a, name in zip(first, prog.outputs))
        kept = [np.copy(a) for a in first]
        second = prog(**dict(local, x=local["x"] + 1.0))  # new arrays for results, given none
        assert all(a is not out[name] for a, name in zip(second, prog.outputs))
        for a, b in zip(first, kept):
            np.testing.assert_array_equal(a, b)
        with pytest.raises(ArgumentError, match="argument 'out': names 'q'"):
            prog(**local, out={"q": out["x1"]})
        with pytest.raises(ArgumentError, match=r"argument 'x1': \(out=\) has shape"):
            prog(**local, out={"x1": np.zeros(40)})
        with pytest.raises(ArgumentError, match=r"argument 'x1': \(out=\) has shape .* and dtype float32"):
            prog(**local, out={"x1": np.zeros(prog.local_shape("x1"), np.float32)})  # twice: the name is cached
        with pytest.raises(ArgumentError, match=r"argument 'x1': \(out=\) has shape .* and dtype float32"):
            prog(**local, out={"x1": np.zeros(prog.local_shape("x1"), np.float32)})
        with pytest.raises(ArgumentError, match="argument 'nope': is neither an input nor a result"):
            prog.local_shape("nope")
        return prog
    run_ranks(2, work)
    internal = {"q", "rr_whole", "pq_whole"}  # made and read inside a call (rr1 is a result: the caller's)
    for calls in seen.values():
        first, second = calls[0], calls[1]
        for name in internal & first.keys():
            assert first[name] == second[name], name


def test_packed_scalars_are_one_all_reduce_and_the_same_sums(monkeypatch):
    """CG's rr and pq, after stage 0, go in one all-reduce (two a call with rr1, not three);
    the results are the oracle's, on ranks holding rows and on one that holds none."""
    from fusec.distributed.threads import ThreadComm
    issued: dict = {}
    real = ThreadComm.all_reduce

    def counting(self, send, recv, stream=None):
        issued.setdefault(self.rank, []).append(int(np.size(send)))
        return real(self, send, recv, stream)
    monkeypatch.setattr(ThreadComm, "all_reduce", counting)
    dag = script_dag("solvers/cg")
    inputs = oracle.random_inputs(dag, {"n": 11}, "float64", np.random.default_rng(11))
    for ranks, active in ((2, 2), (3, 2)):
        def work(comm):
            prog = _compile("solvers/cg", comm, {"n": 11}, active=active)
            local = {k: prog.local(k, v) if isinstance(v, np.ndarray) else v for k, v in inputs.items()}
            issued.pop(comm.rank, None)  # what compiling sent
            out = prog(**local)
            return prog, dict(zip(prog.outputs, out))
        results = run_ranks(ranks, work)
        assert issued == {r: [2, 1] for r in range(ranks)}  # rr and pq packed, then rr1
        checks = oracle.check_outputs(dag, library(), inputs, _assemble(results, ranks), "float64")
        assert all(c.passed for c in checks), [str(c) for c in checks]


@pytest.mark.slow  # the oracle on 1001 x 1001 and 2049 x 1001 matrices, both precisions
def test_the_gpu_tests_cases_on_thread_ranks():
    """The cases tests/gpu/test_distributed.py runs on GPUs, here on thread ranks
    with the oracle for fusec's kernels: the worker's own logic (shapes, blocks,
    the comparison with one GPU) is right before it meets a GPU."""
    from tests.gpu.test_distributed import run_cases, where

    def executor(dtype, cache):
        return oracle_executor(library(), dtype)

    def plain(script, dtype, sizes):
        (stage,) = fd.plan(**where(script), sizes=sizes, ranks=1, dtype=dtype).stages
        return oracle_executor(library(), dtype)(stage)
    scripts = ["bicgk", "gemver", "axpydot", "overlap", "solvers/cg"]
    results = run_ranks(2, lambda comm: run_cases(comm, scripts, [0, 2], (np.asarray, np.asarray), (executor, plain)),
                        timeout=120)
    records = [r for rank in results for r in rank]
    assert {r["script"] for r in records} == set(scripts) and {r["rank"] for r in records} == {0, 1}
    assert not [r for r in records if r["why"]]
    assert all(r["ratio"] < r["threshold"] for r in records)
