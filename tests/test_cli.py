"""The command line (fusec/cli.py), run in-process through ``main`` and once as
the installed ``fusec`` console script.

Exit codes: 0 success, 1 a fusec error (printed as ``fusec: error: ...``), 2 a
usage error (argparse's).
"""

from __future__ import annotations

import argparse
import importlib.util
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import fusec
from fusec import cli
from fusec.errors import ArgumentError, FusecError
from tests.helpers import LIBRARY, ROOT, library

SCRIPTS = ROOT / "scripts"


# Where no performance database matches (none is committed, and a CPU machine names no GPU),
# the predictor falls back to the analytic model and says so; test_compile_says_*
# checks that line, the other tests look at the rest of stderr.
FALLBACK = re.compile(r"^fusec: warning: .*kernels are chosen by the analytic model.*\n", re.M)


def run(capsys, *argv) -> tuple[int, str, str]:
    code = cli.main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, FALLBACK.sub("", err)


def compile_args(script, out_dir, *extra):
    return ["compile", script, "--library", LIBRARY, "-o", out_dir, *extra]


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def subcommands() -> dict[str, argparse.ArgumentParser]:
    (action,) = [a for a in cli.parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(action.choices)


# -- help ---------------------------------------------------------------------------------


def test_top_level_help_lists_the_commands(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert "usage: fusec" in out and "fuses sequences of BLAS" in out
    for name in subcommands():
        assert re.search(rf"^\s+{name}\s+\S", out, re.M), name  # each command with its line of help
    assert "fusec compile scripts/bicgk.script" in out  # the examples


def test_python_dash_m_fusec_is_the_fusec_command(tmp_path):
    """``python -m fusec`` where the scripts folder is not on PATH: the same parser, the same
    exit statuses and messages as the ``fusec`` script's."""
    import sys
    proc = subprocess.run([sys.executable, "-m", "fusec", "--help"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "usage: fusec" in proc.stdout
    proc = subprocess.run([sys.executable, "-m", "fusec", "compile", str(SCRIPTS / "waxpby.script"), "--size",
                           "n=x", "--no-nvcc", "-o", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr == "fusec: error: --size 'n=x': 'x' is not a whole number (digits 0-9 only)\n"


def test_the_help_examples_parse_and_name_no_library_folder():
    """The examples `fusec --help` ends with run from any folder that holds the scripts: with an
    installed wheel there is no fusec/data/blas below the current folder, and the bundled library
    is the default anyway."""
    examples = [line.split()[1:] for line in cli.EPILOG.splitlines() if line.startswith("  fusec ")]
    assert len(examples) >= 6
    for argv in examples:
        args = cli.parser().parse_args(argv)
        assert getattr(args, "library", None) is None, argv


def test_the_commands_include_compile_and_run():
    assert {"compile", "run"} <= set(subcommands())


@pytest.mark.parametrize("command", sorted(subcommands()))
def test_command_help_explains_every_option(capsys, command):
    with pytest.raises(SystemExit) as info:
        cli.main([command, "--help"])
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: fusec {command}")
    sub = subcommands()[command]
    assert sub.description and " ".join(sub.description.split()[:3]) in " ".join(out.split())
    for action in sub._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        assert action.help and len(action.help) > 10, action.dest  # every option says what it does
        for flag in action.option_strings or [action.metavar]:
            assert flag in out, (command, flag)


def _commands_and_options() -> dict[str, list[tuple[str, ...]]]:
    """Every command ("compile", "perfdb fit", ...) with the option strings of each of its options
    (a command that takes a SCRIPT with ("SCRIPT",) among them)."""
    found = {}
    for name, sub in subcommands().items():
        actions = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        parsers = {f"{name} {k}": v for a in actions for k, v in a.choices.items()} or {name: sub}
        for full, each in parsers.items():
            found[full] = [tuple(a.option_strings) or (a.metavar,) for a in each._actions
                           if (a.option_strings or a.metavar == "SCRIPT") and not isinstance(a, argparse._HelpAction)]
    return found


def _flags_in(text: str) -> set[str]:
    """The flags a Markdown text names in `code` spans that start with one (`-o, --output DIR`,
    `-o/--output`; not a command line such as `pip install -e .`)."""
    spans = [s.strip() for s in re.findall(r"`([^`]+)`", text)]
    return {f for span in spans if span.startswith("-")
            for f in re.findall(r"(?:^|(?<=[\s,/(]))(--?[a-zA-Z][\w-]*)", span)}


def test_docs_cli_names_exactly_the_options_each_command_takes():
    """docs/cli.md has a section per command; it names every option the command takes (in its
    section, or, for a command that takes a SCRIPT, among the options every such command takes,
    before the first section), and no flag the command does not take."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    common, *sections = re.split(r"^## ", text, flags=re.M)
    sections = [s for s in sections if s.startswith("`fusec ")]
    commands = _commands_and_options()
    flags = {c: {s for option in options for s in option} for c, options in commands.items()}
    common_flags = _flags_in(common) - {"--version"}
    for command, options in commands.items():
        (section,) = [s for s in sections if f"`fusec {command}`" in s.splitlines()[0]]
        named = _flags_in(section) | (common_flags if ("SCRIPT",) in options else set())
        unnamed = [option for option in options if option != ("SCRIPT",) and not set(option) & named]
        assert not unnamed, (command, unnamed)
    for section in sections:
        titled = [c for c in commands if f"`fusec {c}`" in section.splitlines()[0]]
        taken = set().union(*(flags[c] for c in titled))
        assert not _flags_in(section) - taken, (titled, sorted(_flags_in(section) - taken))
    assert not common_flags - set().union(*flags.values()), sorted(common_flags)


def test_docs_cli_gives_every_dtype_flag_its_choices_and_default():
    """Every --dtype whose choices or default differ from the common table's (float32|float64,
    default float32) says so in its command's section."""
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    assert "| `--dtype float32\\|float64` | precision of the compiled program (default `float32`) |" in text
    for name, sub in subcommands().items():
        actions = [a for a in sub._actions if isinstance(a, argparse._SubParsersAction)]
        for full, each in ({f"{name} {k}": v for a in actions for k, v in a.choices.items()} or {name: sub}).items():
            (dtype,) = [a for a in each._actions if "--dtype" in a.option_strings] or [None]
            if dtype is None or (tuple(dtype.choices), dtype.default) == (("float32", "float64"), "float32"):
                continue
            (section,) = [s for s in re.split(r"^## ", text, flags=re.M) if f"`fusec {full}`" in s.splitlines()[0]]
            assert f"`--dtype {'|'.join(dtype.choices)}` (default {dtype.default})" in section, full


def test_compile_help_names_its_outputs_and_defaults(capsys):
    with pytest.raises(SystemExit):
        cli.main(["compile", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--library", "--dtype", "float32", "float64", "-o", "--arch", "sm_90", "--no-nvcc",
                 "--size", "NAME=VALUE", "NAME.DTYPE.cu", "NAME.DTYPE.plan.txt"):
        assert text in out, text


def test_run_help_names_its_options(capsys):
    with pytest.raises(SystemExit):
        cli.main(["run", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    for text in ("--size", "--repeat", "--warmup", "--seed", "--dtype", "--library", "median"):
        assert text in out, text


def test_no_command_prints_help_and_exits_2(capsys):
    code, out, err = run(capsys)
    assert code == 2
    assert "usage: fusec" in out and "compile" in out and "run" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--version"])
    assert info.value.code == 0
    assert capsys.readouterr().out.strip() == f"fusec {fusec.__version__}"


def test_unknown_command_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["frobnicate"])
    assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_bad_dtype_is_a_usage_error(capsys):
    with pytest.raises(SystemExit) as info:
        run(capsys, *compile_args(SCRIPTS / "sscal.script", "out", "--dtype", "float16"))
    assert info.value.code == 2
    assert "float16" in capsys.readouterr().err


# -- compile ------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_compile_writes_the_source_and_the_plan(capsys, tmp_path, dtype):
    out_dir = tmp_path / "new" / "dir"  # created as needed
    code, out, err = run(capsys, *compile_args(SCRIPTS / "bicgk.script", out_dir, "--no-nvcc",
                                               "--dtype", dtype))
    assert (code, err) == (0, "")
    cu, plan = out_dir / f"bicgk.{dtype}.cu", out_dir / f"bicgk.{dtype}.plan.txt"
    assert sorted(p.name for p in out_dir.iterdir()) == sorted([cu.name, plan.name])
    source = cu.read_text()
    assert source.startswith("// Generated by fusec")
    assert f"typedef {'float' if dtype == 'float32' else 'double'} real;" in source
    plan_text = plan.read_text()
    assert plan_text.startswith("program bicgk ") and f", {dtype}," in plan_text.splitlines()[0]
    assert "bicgk.script:5  q = sgemv(A, p)" in plan_text
    assert "bicgk.script:6  s = sgemtv(A, r)" in plan_text
    assert not re.search(r"^  nvcc ", plan_text, re.M)  # nvcc did not run
    assert plan_text in out
    assert "nvcc: not run (--no-nvcc)" in out
    assert str(cu) in out


def test_compile_uses_the_bundled_library_by_default(capsys, tmp_path):
    code, out, err = run(capsys, "compile", SCRIPTS / "sscal.script", "-o", tmp_path, "--no-nvcc")
    assert code == 0 and "library blas" in out
    assert (tmp_path / "sscal.float32.cu").is_file()


@pytest.mark.nvcc
def test_compile_with_nvcc_writes_the_cubin_and_registers(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    out_dir = tmp_path / "out"
    code, out, err = run(capsys, *compile_args(SCRIPTS / "sscal.script", out_dir))
    assert code == 0, err
    names = sorted(p.name for p in out_dir.iterdir())
    assert names == ["sscal.float32.cu", "sscal.float32.plan.txt", "sscal.float32.sm_90.cubin"]
    assert (out_dir / "sscal.float32.sm_90.cubin").stat().st_size > 0
    plan_text = (out_dir / "sscal.float32.plan.txt").read_text()
    assert re.search(r"nvcc +\d+ registers, \d+ bytes shared, 0 bytes spilled", plan_text)
    # the predicted plan was compiled once to check its registers, so this is the cache's
    assert "plan: predicted (rank 1)" in out and "nvcc: compiled for sm_90" in out
    # Again: from the cache.
    code, out, _ = run(capsys, *compile_args(SCRIPTS / "sscal.script", out_dir))
    assert code == 0 and "nvcc: compiled for sm_90 (cached)" in out


def test_a_compile_leaves_no_earlier_runs_cubin_beside_its_code(capsys, tmp_path, monkeypatch):
    """The files of one compile describe one code: a cubin (and plan) of an earlier run go
    where nvcc is not run, fails or is not found, and a failed compile writes its plan."""
    from fusec import nvcc
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    stale = out_dir / "sscal.float32.sm_90.cubin"
    stale.write_bytes(b"an earlier run's")
    (out_dir / "sscal.float32.plan.txt").write_text("an earlier run's plan")
    code, _, err = run(capsys, *compile_args(SCRIPTS / "sscal.script", out_dir), "--no-nvcc")
    assert code == 0, err
    assert not stale.exists() and "an earlier" not in (out_dir / "sscal.float32.plan.txt").read_text()

    def failing(source, arch=nvcc.DEFAULT_ARCH, lineinfo=False, use_cache=True):
        raise fusec.errors.CompileError("nvcc failed")
    stale.write_bytes(b"an earlier run's")
    (out_dir / "sscal.float32.plan.txt").write_text("an earlier run's plan")
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: "/usr/bin/nvcc")
    monkeypatch.setattr(nvcc, "compile_cubin", failing)
    code, _, err = run(capsys, *compile_args(SCRIPTS / "sscal.script", out_dir), "--gpu", "h100")
    assert code == 1 and "nvcc failed" in err and "sscal.float32.cu" in err
    assert not stale.exists() and "an earlier" not in (out_dir / "sscal.float32.plan.txt").read_text()


@pytest.mark.nvcc
def test_compile_says_when_the_analytic_model_chose_the_kernels(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_PERFDB", str(tmp_path / "no-perfdb"))
    code = cli.main(["compile", str(SCRIPTS / "sscal.script"), "--library", str(LIBRARY), "-o", str(tmp_path),
                     "--no-nvcc", "--gpu", "h100"])
    err = capsys.readouterr().err
    assert code == 0 and FALLBACK.fullmatch(err), err


def test_compile_with_a_bad_arch_is_an_error(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = run(capsys, *compile_args(SCRIPTS / "sscal.script", tmp_path, "--arch", "90"))
    assert code == 1
    assert err.startswith("fusec: error: bad architecture '90'")
    assert "Traceback" not in err


def test_compile_for_an_arch_older_than_sm_80_is_an_error_before_any_work(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path / "cache"))
    code, out, err = run(capsys, *compile_args(SCRIPTS / "sscal.script", tmp_path, "--arch", "sm_75"))
    assert (code, out) == (1, "")
    assert err == "fusec: error: architecture 'sm_75': fusec's kernels need sm_80 or later" \
                  " (compute capability 8.0: A100, L40S, H100, ...)\n"
    assert not list(tmp_path.glob("sscal.*"))


@pytest.mark.parametrize("sizes,shown", [(["--size", "n=1000"], {"m": 1000, "n": 1000}),
                                         (["--size", "m=1000", "--size", "n=500"], {"m": 1000, "n": 500}),
                                         (["--size", "n=33", "--size", "m=4097"], {"m": 4097, "n": 33})])
@pytest.mark.filterwarnings("ignore:no GPU here and none named")  # it compiles for no GPU named
def test_compile_shows_launch_numbers_for_sizes(capsys, tmp_path, sizes, shown):
    code, out, err = run(capsys, *compile_args(SCRIPTS / "bicgk.script", tmp_path, "--no-nvcc", *sizes))
    assert (code, err) == (0, "")
    assert "sizes:   " + ", ".join(f"{k}={v}" for k, v in shown.items()) in out
    # The blocks launched are those of the program compiled for these sizes.
    prog = fusec.compile(SCRIPTS / "bicgk.script", library(), "float32", sizes=shown)
    launches = re.findall(r"^  launch .* = (\d+) blocks$", out, re.M)
    assert [int(b) for b in launches] == [k.grid(shown) for k in prog.kernels]
    assert all(int(b) > 0 for b in launches)


def test_compile_without_sizes_shows_no_block_counts(capsys, tmp_path):
    code, out, _ = run(capsys, *compile_args(SCRIPTS / "bicgk.script", tmp_path, "--no-nvcc"))
    assert code == 0 and "blocks" not in out and "sizes:" not in out


@pytest.mark.parametrize("size,message", [
    ("n", "expected NAME=VALUE"),
    ("n=", "expected NAME=VALUE"),
    ("=3", "expected NAME=VALUE"),
    ("n=x", "'x' is not a whole number"),
    ("n=1.5", "'1.5' is not a whole number"),
    ("n=1_000", "'1_000' is not a whole number (digits 0-9 only)"),
    ("n=+5", "'+5' is not a whole number"),
    ("n= 5", "' 5' is not a whole number"),
    ("n=\u0665", "is not a whole number"),  # an Arabic-Indic five, which int() takes
    ("n=0", "sizes must be at least 1"),
    ("n=-4", "sizes must be at least 1"),
    ("q=3", "the script has no size 'q' (its sizes: m, n)"),
    ("m=3", "give --size for n"),
])
def test_bad_size(capsys, tmp_path, size, message):
    code, out, err = run(capsys, *compile_args(SCRIPTS / "bicgk.script", tmp_path, "--no-nvcc",
                                               "--size", size))
    assert code == 1
    assert err.startswith("fusec: error: --size") or err.startswith("fusec: error: give --size")
    assert message in err, err
    assert "Traceback" not in err
    assert list(tmp_path.iterdir()) == []  # nothing written


def test_a_size_given_twice_with_two_values_is_an_error(capsys, tmp_path):
    code, out, err = run(capsys, *compile_args(SCRIPTS / "bicgk.script", tmp_path, "--no-nvcc",
                                               "--size", "n=5", "--size", "m=7", "--size", "n=6"))
    assert code == 1 and err == "fusec: error: --size 'n=6': n is given twice (n=5 before)\n"
    assert list(tmp_path.iterdir()) == []
    code, out, err = run(capsys, *compile_args(SCRIPTS / "bicgk.script", tmp_path, "--no-nvcc",
                                               "--size", "n=5", "--size", "n=5"))
    assert code == 0, err  # the same value again says nothing new


@pytest.mark.parametrize("flag", ["--top", "--layouts"])
def test_tune_refuses_more_candidates_than_it_measures_before_anything(capsys, flag):
    code, out, err = run(capsys, "tune", SCRIPTS / "bicgk.script", "--size", "n=64", flag, "1001")
    assert code == 1 and err == f"fusec: error: {flag} 1001: at most 1,000 (each candidate is compiled and run)\n"

@pytest.mark.parametrize("command", ["compile", "space"])
def test_a_size_left_out_beside_one_given_is_an_error_the_help_foretells(capsys, command):
    # "default 8192" holds where no --size is given, not for each size left out of those given
    with pytest.raises(SystemExit):
        cli.main([command, "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "n=VALUE sets every size not given; without --size, every size is 8192)" in out
    args = cli.parser().parse_args([command, str(SCRIPTS / "bicgk.script"), "--library", str(LIBRARY),
                                    "--size", "m=5", "--analytic"])
    with pytest.raises(FusecError) as info:
        args.handler(args)
    assert info.value.message == "give --size for n (or --size n=VALUE for all of them)"


def test_size_for_a_symbol_of_another_script(capsys, tmp_path):
    code, _, err = run(capsys, *compile_args(SCRIPTS / "sscal.script", tmp_path, "--no-nvcc",
                                             "--size", "m=3"))
    assert code == 1 and "the script has no size 'm' (its sizes: n)" in err


SCRIPT_ERRORS = {
    "undeclared": ("vector x[n], y[n];\ninput x;\ny = sscal(beta, x);\nreturn y;\n",
                   3, 11, "'beta' is not declared", "y = sscal(beta, x);"),
    "syntax": ("vector x[n], y[n];\ninput x;\ny = sscal(2.0, x)\nreturn y;\n",
               4, 1, "unexpected 'return'", "return y;"),
    "unknown-function": ("vector x[n], y[n];\ninput x;\ny = frob(x);\nreturn y;\n",
                         3, 5, "frob", "y = frob(x);"),
}


@pytest.mark.parametrize("case", sorted(SCRIPT_ERRORS))
def test_script_error_points_at_the_source(capsys, tmp_path, case):
    text, line, column, message, source_line = SCRIPT_ERRORS[case]
    script = write(tmp_path, "bad.script", text)
    code, out, err = run(capsys, *compile_args(script, tmp_path / "out", "--no-nvcc"))
    assert code == 1
    first, shown, caret = err.splitlines()[:3]
    assert first.startswith(f"fusec: error: {script}:{line}:{column}: ")
    assert message in first
    assert shown == "    " + source_line
    assert caret == "    " + " " * (column - 1) + "^"
    assert "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_unused_input_is_a_warning(capsys, tmp_path):
    script = write(tmp_path, "unused.script", "vector x[n], y[n], w[n];\nscalar alpha;\n"
                                              "input x, alpha, w;\ny = sscal(alpha, x);\nreturn y;\n")
    code, out, err = run(capsys, *compile_args(script, tmp_path, "--no-nvcc"))
    assert code == 0
    assert err.startswith(f"fusec: warning: {script}:3:17: input 'w' is never used")
    assert "    input x, alpha, w;\n" + "    " + " " * 16 + "^" in err
    assert (tmp_path / "unused.float32.cu").is_file()


def test_missing_library_directory(capsys, tmp_path):
    missing = tmp_path / "no-such-library"
    code, out, err = run(capsys, "compile", SCRIPTS / "sscal.script", "--library", missing,
                         "-o", tmp_path / "out", "--no-nvcc")
    assert code == 1
    assert err == f"fusec: error: library directory {str(missing)!r} does not exist\n"
    assert not (tmp_path / "out").exists()


def test_library_directory_without_an_index(capsys, tmp_path):
    code, out, err = run(capsys, "compile", SCRIPTS / "sscal.script", "--library", tmp_path,
                         "-o", tmp_path / "out", "--no-nvcc")
    assert code == 1 and err.startswith("fusec: error: ") and "not a fusec library" in err


@pytest.mark.parametrize("case", ["missing-script", "output-is-a-file"])
def test_file_system_errors_are_reported_cleanly(capsys, tmp_path, case):
    script, out_dir = SCRIPTS / "sscal.script", tmp_path / "out"
    if case == "missing-script":
        script = tmp_path / "nothere.script"
    else:
        out_dir.write_text("a file, not a folder")
    code, out, err = run(capsys, *compile_args(script, out_dir, "--no-nvcc"))
    assert code == 1
    assert err.startswith("fusec: error: ") and str(script if case == "missing-script" else out_dir) in err


@pytest.mark.parametrize("where", ["output", "under-output"])
def test_an_output_folder_that_is_a_file_is_called_so(capsys, tmp_path, where):
    blocker = tmp_path / "out"
    blocker.write_text("a file, not a folder")
    out_dir = blocker if where == "output" else blocker / "sub"
    code, out, err = run(capsys, *compile_args(SCRIPTS / "sscal.script", out_dir, "--no-nvcc"))
    assert code == 1
    assert err == f"fusec: error: {blocker} is a file, not a folder\n"  # not "File exists"
    assert blocker.read_text() == "a file, not a folder" and list(tmp_path.iterdir()) == [blocker]


# -- run -----------------------------------------------------------------------------------


def test_run_needs_a_size(capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["run", str(SCRIPTS / "sscal.script"), "--library", str(LIBRARY)])
    assert info.value.code == 2
    assert "--size" in capsys.readouterr().err


@pytest.mark.skipif(importlib.util.find_spec("pycuda") is not None, reason="PyCUDA is installed here")
def test_run_without_pycuda_says_so(capsys):
    code, out, err = run(capsys, "run", SCRIPTS / "bicgk.script", "--library", LIBRARY, "--size", "n=64")
    assert code == 1
    assert err.startswith("fusec: error: ") and "PyCUDA" in err
    assert "Traceback" not in err


def test_run_checks_sizes_before_the_gpu(capsys):
    code, out, err = run(capsys, "run", SCRIPTS / "bicgk.script", "--library", LIBRARY, "--size", "n=0")
    assert code == 1 and "sizes must be at least 1" in err


def test_run_measure_with_reproducible_names_the_flags(monkeypatch):
    # the API's words (measure=True, reproducible=True) mean nothing on the command line
    monkeypatch.delenv("FUSEC_MEASURE", raising=False)
    args = cli.parser().parse_args(["run", str(SCRIPTS / "bicgk.script"), "--library", str(LIBRARY),
                                    "--size", "n=64", "--measure", "--reproducible"])
    with pytest.raises(ArgumentError) as info:
        args.handler(args)
    assert info.value.argument == "--measure"
    assert "--reproducible" in info.value.message and "=True" not in info.value.message


def test_tunings_names_the_file_of_an_entry_that_does_not_parse(capsys, tmp_path, monkeypatch):
    # its row says nothing else (script, sizes: '?'): the path is how to find it and delete it
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    broken = tmp_path / "tuning" / "h200" / "0123abcd.json"
    broken.parent.mkdir(parents=True)
    broken.write_text('{"format": 1, "key": {"sizes": "x"}}')
    code, out, err = run(capsys, "tunings", "--library", LIBRARY, "--gpu", "h200")
    assert code == 0
    assert re.search(r"^  h200 +\? .* no: does not parse \(Invalid\)$", out, re.M), out
    assert f"1 file(s) do not parse (listed with '?' above); fix or delete them:\n  {broken}\n" in out


@pytest.mark.parametrize("named", ["h200", "H200", "NVIDIA H200"])
def test_tunings_takes_a_gpu_name_as_every_other_gpu_flag_does(capsys, tmp_path, monkeypatch, named):
    monkeypatch.setenv("FUSEC_CACHE_DIR", str(tmp_path))
    code, out, err = run(capsys, "tunings", "--library", LIBRARY, "--gpu", named)
    assert code == 0
    rows = re.findall(r"^  (\S+) +\S+ +float(?:32|64) ", out, re.M)
    assert rows and set(rows) == {"h200"}, out


# -- empty paths ---------------------------------------------------------------------------


@pytest.mark.parametrize("argv, named", [
    (["compile", "", "--no-nvcc"], "SCRIPT"),
    (["compile", "{script}", "--no-nvcc", "-o", ""], "-o/--output"),
    (["compile", "{script}", "--no-nvcc", "--library", ""], "--library"),
    (["space", "{script}", "--library", ""], "--library"),
    (["tunings", "--library", ""], "--library"),
    (["perfdb", "build", "-o", ""], "-o/--output"),
    (["perfdb", "show", "--gpu", "h200", "--dir", ""], "--dir"),
    (["perfdb", "measure-plans", "{script}", ""], "SCRIPT"),
    (["perfdb", "measure-plans", "{script}", "-o", ""], "-o/--output"),
    (["perfdb", "fit", "--gpu", "h200", "--training", ""], "--training"),
    (["perfdb", "fit", "--gpu", "h200", "-o", ""], "-o/--output")])
def test_an_empty_path_is_a_usage_error_naming_its_argument(capsys, tmp_path, monkeypatch, argv, named):
    # `-o "$OUT"` with OUT unset: not the current folder, not the default file (fit's would
    # replace the database's correction), not the library '.'
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as info:
        cli.main([a.format(script=SCRIPTS / "vadd.script") for a in argv])
    assert info.value.code == 2
    assert f"argument {named}: an empty path" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


# -- the installed console script ------------------------------------------------------------


def test_console_script(tmp_path):
    exe = shutil.which("fusec", path=str(Path(sys.executable).parent)) or shutil.which("fusec")
    if exe is None:
        pytest.skip("the fusec console script is not installed")
    proc = subprocess.run([exe, "compile", str(SCRIPTS / "waxpby.script"), "--library", str(LIBRARY),
                           "-o", str(tmp_path), "--no-nvcc", "--dtype", "float64", "--size", "n=4097"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "waxpby.float64.cu").is_file()
    assert (tmp_path / "waxpby.float64.plan.txt").read_text() in proc.stdout
    assert "sizes:   n=4097" in proc.stdout
    proc = subprocess.run([exe, "compile", str(SCRIPTS / "waxpby.script"), "--size", "n=x", "--no-nvcc",
                           "-o", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert proc.stderr == "fusec: error: --size 'n=x': 'x' is not a whole number (digits 0-9 only)\n"
    proc = subprocess.run([exe], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "usage: fusec" in proc.stdout


def test_a_reader_that_stops_early_gets_no_error_on_stderr():
    # `fusec tunings | head -1`: the pipe closes under fusec, which stops quietly
    proc = subprocess.run(f"{sys.executable} -m fusec.cli tunings --library {LIBRARY} | head -1",
                          shell=True, capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, "FUSEC_SHIPPED_TUNINGS": "1"})
    assert proc.stdout.startswith("library blas at ")
    assert proc.stdout.count("\n") == 1
    assert proc.stderr == ""


def test_compile_reads_a_device_scalar_from_memory(capsys, tmp_path):
    code, out, err = run(capsys, *compile_args(SCRIPTS / "waxpby.script", tmp_path, "--no-nvcc",
                                               "--device-scalar", "alpha"))
    assert (code, err) == (0, "")
    source = (tmp_path / "waxpby.float32.cu").read_text()
    assert "const real* __restrict__ g_v2_alpha" in source and "const real v3_beta" in source
    assert "device:  alpha read from device memory" in (tmp_path / "waxpby.float32.plan.txt").read_text()


@pytest.mark.parametrize("name, why", [
    ("x", "names 'x', a vector input of"),
    ("gamma", "names 'gamma', which is not an input of")])
def test_compile_refuses_a_device_scalar_that_is_no_scalar_input(capsys, tmp_path, name, why):
    code, out, err = run(capsys, *compile_args(SCRIPTS / "waxpby.script", tmp_path, "--no-nvcc",
                                               "--device-scalar", name))
    assert code != 0 and f"fusec: error: --device-scalar: {why}" in err
    assert not list(tmp_path.iterdir())  # nothing written


def test_ctrl_c_ends_a_command_with_130_and_no_traceback(capsys, monkeypatch):
    """A KeyboardInterrupt in a command (Ctrl-C during a tune) is the shell's status 130 and
    one line, not a Python traceback."""
    def interrupted(args):
        raise KeyboardInterrupt
    parser = cli.parser()
    args = parser.parse_args(["space", str(SCRIPTS / "bicgk.script"), "--library", str(LIBRARY)])
    monkeypatch.setattr(cli, "parser", lambda: parser)
    monkeypatch.setattr(args, "handler", interrupted)
    monkeypatch.setattr(parser, "parse_args", lambda argv=None: args)
    assert cli.main([]) == 130
    assert capsys.readouterr().err == "fusec: interrupted\n"


def test_an_ambiguous_gpu_prefix_is_one_warning_naming_the_name(capsys):
    """`--gpu h` matches the H100's and the H200's databases: the lookup says so once (the
    flag's check and the predictor each looked), naming the name as the library saw it."""
    argv = ["space", str(SCRIPTS / "bicgk.script"), "--library", str(LIBRARY), "--gpu", "h", "--top", "1"]
    assert cli.main(argv) == 0
    warned = [line for line in capsys.readouterr().err.splitlines() if "matches several databases" in line]
    assert len(warned) == 1 and "the GPU name 'h'" in warned[0], warned
