"""The bounded search (issue 50): long scripts reach a first choice in bounded
time, with a one-line warning where the space was cut; what it relabels between
alike fusions is what building them gives; ``fusec space --all`` refuses a huge
space. No GPU, no nvcc; each test well under a few seconds (the real figures are
in bench/results/cpu-compile-time.md)."""

from __future__ import annotations

import time
import warnings

import pytest

from bench.compile_time import GENERATORS, first_choice
from fusec import cli
from fusec.cost.perfdb import predictor_for
from fusec.frontend import check, parse
from fusec.space import combinations
from fusec.space.combinations import build_space
from fusec.space.fusions import Fusion
from fusec.space.implementations import by_time, implementations
from fusec.space.search import LONGEST, Search, SpaceCutWarning, likeness
from tests.helpers import LIBRARY, ROOT, library

GPU = "h100-80gb-hbm3"
BOUND = 5.0  # seconds: generous against CI noise (the benchmark has the real time)


def dag_of(kind: str, calls: int):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return check(parse(GENERATORS[kind](calls), f"<{kind} {calls}>"), library())


# the chain and the mixture search the most cuts (seconds each): the slow tier's
@pytest.mark.parametrize("kind", [pytest.param(k, marks=pytest.mark.slow) if k in ("chain", "mixture") else k
                                  for k in sorted(GENERATORS)])
@pytest.mark.filterwarnings("ignore::fusec.errors.ScriptWarning")  # the dead statements are meant
def test_thirty_calls_reach_a_first_choice_in_bounded_time(kind):
    predictor_for(library(), GPU)  # loaded once, as by any compile
    start = time.perf_counter()
    with pytest.warns(SpaceCutWarning, match=r"too large to enumerate \(more than 10\^\d+ combinations\)"):
        plan, predicted, dag = first_choice(GENERATORS[kind](30))
    assert time.perf_counter() - start < BOUND
    assert sorted(c for k in plan.kernels for c in k.calls) == [c.id for c in dag.calls]
    assert predicted > 0


def test_the_cut_is_one_line_naming_the_script():
    with pytest.warns(SpaceCutWarning) as record:
        first_choice(GENERATORS["side"](12))
    message = str(record[0].message)
    assert "\n" not in message and message.startswith("<bench>: ") and f"at most {LONGEST}" in message


def test_dead_code_is_left_out_before_the_search():
    with pytest.warns(Warning) as record:
        plan, _, dag = first_choice(GENERATORS["dead"](8))
    assert len(dag.calls) == 4  # the four dead statements are gone
    assert any("no returned value depends on" in str(w.message) for w in record)


def test_scripts_are_searched_whole():
    """Table 1's scripts and the horizontal ones; the solver iterations (BiCG 11 calls, BiCGStab 14) are
    past EXACT_CALLS and searched by the bounded search."""
    for path in sorted(p for p in (ROOT / "scripts").rglob("*.script") if p.parent.name != "solvers"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            dag = check(parse(path.read_text(), str(path)), library())
        assert combinations.exhaustive_is_small(dag, library())[0], path.name


@pytest.mark.parametrize("kind,calls", [("side", 3), ("chain", 4)])
def test_bounded_search_finds_the_exhaustive_first_choice_where_both_run(kind, calls, monkeypatch):
    dag = dag_of(kind, calls)
    sizes = {s: 8192 for s in dag.sizes}
    whole = build_space(dag, library(), "float32", sizes, predictor_for(library(), GPU)).best()
    monkeypatch.setattr(combinations, "exhaustive_is_small", lambda dag, library: (False, None))
    with pytest.warns(SpaceCutWarning):
        cut = build_space(dag, library(), "float32", sizes, predictor_for(library(), GPU))
    assert cut.best().predicted <= whole.predicted * (1 + 1e-9)


def test_alike_fusions_get_the_options_building_them_gives():
    """x1 + x2 and x2 + x3 of three ``xi = svadd(w, y)``: one is built, the other
    relabelled, and the relabelled options are those of building it."""
    dag = dag_of("side", 3)
    sizes = {"n": 8192}
    predictor = predictor_for(library(), GPU)
    assert likeness(dag, (0, 1), ((0, 1),)) == likeness(dag, (1, 2), ((1, 2),))
    search = Search(dag, library(), "float32", sizes, predictor)
    search.fusion(Fusion((0, 1)))
    relabelled = search.fusion(Fusion((1, 2)))()
    built = sorted(((plan, kernel, predictor.kernel_seconds(kernel, dag, sizes)) for plan, kernel in
                    implementations(dag, library(), Fusion((1, 2)), "float32", None, sizes, predictor.target, 1)),
                   key=by_time)
    assert [(p, s) for p, _, s in relabelled] == [(p, s) for p, _, s in built]


def test_a_chain_end_is_not_alike_its_middle():
    dag = dag_of("chain", 7)  # t6 is read by the next call; t7 is returned
    assert likeness(dag, (3,), ((3,),)) != likeness(dag, (6,), ((6,),))


def test_space_all_refuses_a_huge_space_and_says_how_large(capsys):
    code = cli.main(["space", str(ROOT / "scripts" / "gemver.script"), "--library", str(LIBRARY),
                     "--gpu", GPU, "--all"])
    assert code == 1
    assert ("has 24,107,044 combinations, too many to list (at most 100,000); show the best with --top K"
            in capsys.readouterr().err)


def test_space_says_where_it_was_cut(tmp_path, capsys):
    script = tmp_path / "side.script"
    script.write_text(GENERATORS["side"](12))
    assert cli.main(["space", str(script), "--library", str(LIBRARY), "--gpu", GPU,
                     "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert "bounded          " in out and "too large to enumerate" in out


def test_a_tuned_plan_of_another_cover_than_the_bounded_search_finds_is_used(monkeypatch, tmp_path):
    """A bounded space offers the kernels of the one cover it finds best under its predictor;
    a plan tuned under another predictor may have another cover (a solver's iteration lost
    its shipped plan to a refitted correction so). Such a plan is used where the search
    offers each of its kernels for its own slots; one with a kernel no slot offers is not."""
    import json

    import fusec
    from fusec import data
    from fusec.errors import FusecWarning
    from fusec.frontend import load_script
    from fusec.ir.plan import ProgramPlan
    from fusec.tune import store as tuning
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    script, sizes = data.SOLVERS / "bicg.script", {"n": 4096}  # bundled: the wheel's tests run outside the tree
    dag = load_script(script, library())
    predictor = predictor_for(library(), GPU)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SpaceCutWarning)
        space = build_space(dag, library(), "float64", sizes, predictor)
    assert space.cut
    search = Search(dag, library(), "float64", sizes, predictor)
    unfused = ProgramPlan(tuple(search.fusion(Fusion((call.id,)))()[0][0] for call in dag.calls))
    offered = {plan for options in space.options.values() for plan, _, _ in options}
    assert not all(kernel in offered for kernel in unfused.kernels)  # not the cover the search found
    key = tuning.key(dag, library(), "float64", sizes, GPU)
    tuning.store(tuning.TuningEntry(key, unfused, 90.0, 99.0, 7, 10, "NVIDIA H100 80GB HBM3",
                                    "2026-11-29T10:00:00+00:00", "bicg"))

    def compiled():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", SpaceCutWarning)
            return fusec.compile(script, library(), "float64", sizes=sizes, gpu="h100")
    program = compiled()
    assert program.tuned and program.generated.plan == unfused
    # a kernel no slot offers (a block of threads no shape has) is still refused
    data = json.loads(key.path.read_text())
    data["plan"][1]["shape"]["block"] = 96
    key.path.write_text(json.dumps(data))
    with pytest.warns(FusecWarning, match="not one the optimization space offers"):
        program = compiled()
    assert program.tuned is None
    # three kernels side by side, which no slot of the search pairs, offer nothing
    from fusec.ir.plan import HorizontalPlan
    from fusec.space.search import offered_for
    three = HorizontalPlan(tuple(k for k in unfused.kernels[:3]))
    assert offered_for(dag, library(), "float64", sizes, predictor, [three]) == set()


def _shipped_entries():
    """(entry file, script file) of each plan shipped with the library whose script is a file here
    (the distributed programs' stage scripts are made at run time)."""
    import json

    from fusec import data
    out = []
    for path in sorted((LIBRARY / "tunings").glob("*/*.json")):
        name = json.loads(path.read_text())["script"].split(" ")[0]
        script = next((s for s in (ROOT / "scripts" / f"{name}.script", data.SOLVERS / f"{name}.script")
                       if s.is_file()), None)
        if script is not None:
            out.append(pytest.param(path, script, id=f"{path.parent.name}/{name}/{path.stem[:8]}"))
    return out


@pytest.mark.parametrize("path,script", _shipped_entries())
def test_every_plan_shipped_with_the_library_is_taken_at_its_sizes(path, script, monkeypatch, tmp_path):
    """A shipped plan is one the space offered when it was tuned; a compile at its sizes for its
    GPU takes it, whatever the predictor shipped since ranks first (BiCGStab fp32 n = 1024 on
    the H200 lost its plan so: two of its kernels pair parts the refitted correction no longer
    ranks first of their block size). A plan gone stale (a library file changed) fails here:
    tune it again, or re-key it (tools/rekey.py) where its kernels did not change."""
    import json

    import fusec
    from fusec.errors import FusecWarning
    from fusec.ir.plan import ProgramPlan
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    monkeypatch.setenv("FUSEC_CORRECTION", "1")  # the predictor a user's compile ranks by
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    entry = json.loads(path.read_text())
    key = entry["key"]
    with warnings.catch_warnings():
        warnings.simplefilter("error", FusecWarning)
        warnings.simplefilter("ignore", SpaceCutWarning)  # (the later filter is matched first)
        program = fusec.compile(script, library(), key["dtype"], sizes=key["sizes"], gpu=key["gpu"])
    assert program.tuned, f"{path.name}: not taken"
    assert program.generated.plan == ProgramPlan.from_json(json.dumps(entry["plan"]))


@pytest.mark.nvcc
def test_every_plan_shipped_with_the_library_compiles_without_spilling(monkeypatch, tmp_path):
    """A shipped plan was tuned as its kernels compiled then: one that spills registers after a
    change to the library's support code runs slower than it was timed (the sums of partials
    loading 16 fp64 values a thread spilled so in a triangle kernel)."""
    import json

    import fusec
    from fusec import nvcc
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("FUSEC_SHIPPED_TUNINGS", "1")
    monkeypatch.delenv("FUSEC_GPU", raising=False)
    names, sources = [], []
    for param in _shipped_entries():
        path, script = param.values
        key = json.loads(path.read_text())["key"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            program = fusec.compile(script, library(), key["dtype"], sizes=key["sizes"], gpu=key["gpu"])
        names.append(param.id)
        sources.append(program.source)
    for name, compiled in zip(names, nvcc.compile_many(sources, "sm_90")):
        spills = {kernel: r.spill_stores for kernel, r in compiled.resources.items() if r.spill_stores}
        assert not spills, (name, spills)


def test_a_tuned_pair_of_parts_the_predictor_no_longer_ranks_first_is_offered():
    """The search pairs each part's best-predicted option per block of threads only; a tuned
    plan pairing others (as ranked under the predictor of its tuning) is offered all the same,
    and one whose part no option of that part's fusion is (a shape edited) is not."""
    import dataclasses

    from fusec import data
    from fusec.frontend import load_script
    from fusec.ir.plan import HorizontalPlan
    from fusec.space.search import offered_for
    dag = load_script(data.SOLVERS / "bicgstab.script", library())
    predictor = predictor_for(library(), "h200")
    sizes = {"n": 1024}
    search = Search(dag, library(), "float32", sizes, predictor)
    x1, r1 = Fusion((8,)), Fusion((9, 10))  # x1 = x + alpha p beside r1 = s - omega t with rho1 = <r1, r0>
    pair = search.pair_of(x1, r1)[0][1]()
    paired = {(plan.parts[0], plan.parts[1]) for plan, _, _ in pair}
    options = [search.fusion(f, 6)() for f in (x1, r1)]
    other = next((a, b) for a, _, _ in options[0] for b, _, _ in options[1]
                 if (a, b) not in paired and a.geometry is b.geometry and a.shape.block == b.shape.block)
    plan = HorizontalPlan(other)
    assert plan in offered_for(dag, library(), "float32", sizes, predictor, [plan])
    edited = HorizontalPlan((other[0], dataclasses.replace(other[1], shape=dataclasses.replace(other[1].shape,
                                                                                             block=96))))
    assert edited not in offered_for(dag, library(), "float32", sizes, predictor, [edited])
