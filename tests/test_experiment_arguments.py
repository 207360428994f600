"""The GPU experiments' arguments are checked before anything touches the GPU (no GPU here):
a bad value ends the run with an error naming the argument."""

from __future__ import annotations

import importlib

import pytest

pytest.importorskip("experiments.solver_fixed_cost", reason="experiments/ is beside the source, not in the wheel")


@pytest.mark.parametrize("module,argv,message", [
    ("solver_fixed_cost", ["--cases", "bicg:float16:1024"], "--cases 'bicg:float16:1024': pass solver:dtype:n"),
    ("solver_fixed_cost", ["--cases", "cg:float32"], "--cases 'cg:float32': pass solver:dtype:n"),
    ("solver_fixed_cost", ["--cases", "cg:float32:1024,gmres:float32:1024"], "--cases 'gmres:float32:1024'"),
    ("solver_fixed_cost", ["--cases", "cg:float32:1"], "n a whole number of 2 or more"),
    ("solver_fixed_cost", ["--repeat", "0"], "--repeat 0: 1 or more"),
    ("loop_against_replay", ["--cases", "cg:float16:1024"], "--cases 'cg:float16:1024': pass solver:dtype:n"),
    ("loop_against_replay", ["--k", "7"], "--k 7: an even count of 2 or more"),
    ("loop_against_replay", ["--k", "0"], "--k 0: an even count of 2 or more"),
    ("loop_against_replay", ["--repeat", "0"], "--repeat 0: 1 or more"),
    ("rho_ceiling", ["--scripts", "atax,gemm"], "--scripts: no sequence 'gemm'"),
    ("rho_ceiling", ["--seed", "-1"], "--seed -1: 0 or more"),
    ("rho_ceiling", ["--budget", "0"], "--budget 0: seconds, more than 0"),
    ("rho_ceiling", ["--repeat", "0"], "--repeat 0: 1 or more"),
    ("cross_depth", ["with", "--top", "0"], "--top 0: 1 or more"),
    ("cross_depth", ["with", "--wide", "0"], "--wide 0: 1 or more"),
    ("cross_depth", ["with", "--cases", "cg-float16-1024"], "--cases 'cg-float16-1024': pass script-dtype-n"),
    ("cross_depth", ["with", "--cases", "gmres-float32-1024"], "--cases 'gmres-float32-1024'"),
    ("cross_depth", ["sideways"], "invalid choice: 'sideways'"),
    ("column_split", ["--top", "0"], "--top 0: 1 or more"),
    ("column_split", ["--layouts", "0"], "--layouts 0: 1 or more"),
    ("column_split", ["--cases", "atax-float32-16384"], "--cases 'atax-float32-16384': pass script-dtype-n"),
    ("column_split", ["--cases", "bicgk-float32-1"], "--cases 'bicgk-float32-1'"),
    ("band_tma", ["--repeat", "0"], "--repeat 0: 1 or more"),
    ("finish_cost", ["--rounds", "0"], "--rounds 0: 1 or more"),
    ("finish_cost", ["--repeat", "-2"], "--repeat -2: 1 or more"),
    ("finish_cost", ["--case", "float16:4096"], "'float16:4096': expected DTYPE:N"),
    ("finish_tail", ["--runs", "0"], "--runs 0: 1 or more"),
    ("finish_tail", ["--case", "float32"], "'float32': expected DTYPE:N"),
    ("cluster_finish", ["--rounds", "0"], "--rounds 0: 1 or more"),
    ("spread_finish", ["--repeat", "0"], "--repeat 0: 1 or more"),
    ("spread_finish", ["--case", "4096"], "'4096': expected DTYPE:N"),
    ("cluster_finish", ["--repeat", "-1"], "--repeat -1: 1 or more"),
    ("cluster_finish", ["--case", "float32:n"], "'float32:n': expected DTYPE:N"),
    ("band_double_buffer", ["--repeat", "0"], "--repeat 0: 1 or more"),
    ("warm_vectors", ["--repeat", "0"], "--repeat 0: 1 or more"),
    ("warm_vectors", ["--n", "0"], "--n 0: 1 or more"),
    ("warm_vectors", ["--scripts", "sscal,saxpyy"], "--scripts: no sequence 'saxpyy'"),
    ("vector_unroll", ["--n", "-4"], "--n -4: 1 or more"),
    ("vector_unroll", ["--scripts", "gemm"], "--scripts: no sequence 'gemm'"),
    ("distributed_host_work", ["0"], "n 0: 1 or more"),
    ("distributed_host_work", ["--watchdog", "none"], "invalid choice: 'none'"),
    ("out_call_host", ["--n", "0"], "--n 0: 1 or more"),
    ("out_call_host", ["--calls", "0"], "--calls 0: 1 or more"),
    ("distributed_host_work", ["many"], "invalid int value: 'many'"),
    ("distributed_marginal", ["out.json", "--n", "1"], "--n 1: 2 or more"),
    ("distributed_marginal", ["out.json", "--layouts", "most"], "--layouts 'most': agreed, calls or fewest"),
    ("distributed_marginal", ["out.json", "--check-every", "0"], "--check-every '0': whole numbers of 1 or more"),
    ("distributed_marginal", ["out.json", "--check-every", "two"], "--check-every 'two'"),
])
def test_an_experiment_refuses_a_bad_argument(module, argv, message, monkeypatch, capsys):
    main = importlib.import_module(f"experiments.{module}").main
    monkeypatch.setattr("sys.argv", [module, *argv])
    with pytest.raises(SystemExit) as exit:
        main()
    assert exit.value.code == 2 and message in capsys.readouterr().err
