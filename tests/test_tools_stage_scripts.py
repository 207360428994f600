"""tools/stage_scripts.py: the local stages of a distributed program written as scripts whose
text is the stage's, so that a plan tuned from the file is the one a rank looks up."""

from __future__ import annotations

import pytest

from fusec import distributed
from fusec.frontend import load_script
from tests.helpers import ROOT, library
from tools.stage_scripts import main, write

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("script", ["bicgk", "gemver"])
def test_each_stage_is_written_with_the_text_and_sizes_a_rank_compiles(tmp_path, script):
    path = ROOT / "scripts" / f"{script}.script"
    plan = distributed.plan(path, ranks=2, sizes={"n": 1001}, dtype="float64")
    written = write(str(path), 2, {"n": 1001}, "float64", tmp_path)
    assert [p.read_text(encoding="utf-8") for p, _ in written] == [s.source for s in plan.stages]
    assert [sizes for _, sizes in written] == [dict(s.sizes) for s in plan.stages]
    for (file, _), stage in zip(written, plan.stages):
        # the tuning key hashes the script's text: the file's is the stage's
        assert load_script(file, library()).text == stage.source


def test_the_tune_commands_name_each_file_and_its_sizes(tmp_path, capsys):
    assert main([str(ROOT / "scripts" / "bicgk.script"), "--ranks", "2", "--n", "16384",
                 "--out", str(tmp_path)]) == 0
    line, = capsys.readouterr().out.splitlines()
    assert line == (f"python -m fusec.cli tune {tmp_path}/bicgk-p2-stage0.script"
                    " --size n=16384 --size m_local=8192 --dtype float32")


@pytest.mark.parametrize("args, said", [
    (["scripts/nosuch.script", "--ranks", "2", "--n", "8"], "does not exist"),
    (["scripts/bicgk.script", "--ranks", "0", "--n", "8"], "'ranks'"),
])
def test_bad_input_is_one_line_and_exit_2(tmp_path, capsys, args, said):
    args = [str(ROOT / args[0])] + args[1:] + ["--out", str(tmp_path)]
    assert main(args) == 2
    assert said in capsys.readouterr().err


@pytest.mark.parametrize("solver", ["cg", "bicg", "bicgstab"])
def test_a_solvers_stages_are_those_its_iteration_runs(tmp_path, solver):
    """--solver writes the stages of the plan fusec.distributed.solvers compiles its iteration
    with (the state in the layouts it chooses), not the plain script's."""
    from fusec.distributed.solvers import _input_layouts, _iteration_layouts
    from fusec.solvers.methods import METHODS
    method = METHODS[solver]
    chosen, own = _input_layouts(method, "float32", 1001, 2, "agreed")
    compiled = distributed.plan(method.script, ranks=2, sizes={"n": 1001}, dtype="float32",
                                **_iteration_layouts(method, chosen, own))
    written = write(None, 2, {"n": 1001}, "float32", tmp_path, solver=solver)
    assert [p.read_text(encoding="utf-8") for p, _ in written] == list(dict.fromkeys(s.source for s in compiled.stages))
    assert all(p.name.startswith(f"{solver}-p2-stage") for p, _ in written)


def test_cg_passes_its_state_whole_where_that_saves_collectives():
    from fusec.distributed.solvers import iteration_plan
    agreed, calls = iteration_plan("cg", 1001, 2), iteration_plan("cg", 1001, 2, layouts="calls")
    assert len(agreed.collectives) <= len(calls.collectives)


@pytest.mark.parametrize("args, said", [
    (["--ranks", "2", "--n", "8"], "pass a script or --solver"),
    (["scripts/bicgk.script", "--solver", "cg", "--ranks", "2", "--n", "8"], "pass a script or --solver"),
])
def test_a_script_or_a_solver(tmp_path, capsys, args, said):
    if args[0].startswith("scripts/"):
        args = [str(ROOT / args[0])] + args[1:]
    with pytest.raises(SystemExit) as stop:
        main(args + ["--out", str(tmp_path)])
    assert stop.value.code == 2 and said in capsys.readouterr().err


@pytest.mark.parametrize("kwargs, argument", [
    ({"solver": "gmres"}, "'solver'"), ({"n": 0}, "'n'"), ({"ranks": 0}, "'ranks'"), ({"dtype": "float16"}, "dtype"),
    ({"layouts": "most"}, "'layouts'"),
])
def test_iteration_plan_names_a_bad_argument(kwargs, argument):
    from fusec.distributed.solvers import iteration_plan
    from fusec.errors import ArgumentError
    given = {"solver": "cg", "n": 64, "ranks": 2, **kwargs}
    with pytest.raises(ArgumentError, match=argument):
        iteration_plan(**given)
