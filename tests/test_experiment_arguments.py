"""The GPU experiments' arguments are checked before anything touches the GPU (no GPU here):
a bad value ends the run with an error naming the argument."""

from __future__ import annotations

import pytest

solver_fixed_cost = pytest.importorskip("experiments.solver_fixed_cost",
                                        reason="experiments/ is beside the source, not in the wheel")


@pytest.mark.parametrize("argv,message", [
    (["--cases", "bicg:float16:1024"], "--cases 'bicg:float16:1024': pass solver:dtype:n"),
    (["--cases", "cg:float32"], "--cases 'cg:float32': pass solver:dtype:n"),
    (["--cases", "cg:float32:1024,gmres:float32:1024"], "--cases 'gmres:float32:1024'"),
    (["--cases", "cg:float32:1"], "n a whole number of 2 or more"),
    (["--repeat", "0"], "--repeat 0: 1 or more"),
])
def test_solver_fixed_cost_refuses_a_bad_argument(argv, message, monkeypatch, capsys):
    monkeypatch.setattr("sys.argv", ["solver_fixed_cost", *argv])
    with pytest.raises(SystemExit) as exit:
        solver_fixed_cost.main()
    assert exit.value.code == 2 and message in capsys.readouterr().err


@pytest.mark.parametrize("argv,message", [
    (["--cases", "cg:float16:1024"], "--cases 'cg:float16:1024': pass solver:dtype:n"),
    (["--k", "7"], "--k 7: an even count of 2 or more"),
    (["--k", "0"], "--k 0: an even count of 2 or more"),
    (["--repeat", "0"], "--repeat 0: 1 or more"),
])
def test_loop_against_replay_refuses_a_bad_argument(argv, message, monkeypatch, capsys):
    from experiments import loop_against_replay
    monkeypatch.setattr("sys.argv", ["loop_against_replay", *argv])
    with pytest.raises(SystemExit) as exit:
        loop_against_replay.main()
    assert exit.value.code == 2 and message in capsys.readouterr().err
