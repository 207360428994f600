"""The examples and the documentation's Python, without a GPU: every example's ``--help`` runs
without CuPy, PyTorch, PyCUDA or mpi4py, a bad flag value is argparse's error (status 2) naming
the flag, and every ```python block of README.md and docs/ is valid Python.
(tests/gpu/test_examples.py runs the examples and README.md's blocks.)"""

from __future__ import annotations

import re

import pytest

from tests.helpers import ROOT, imported_modules, python_blocks, run_example

if not (ROOT / "examples").is_dir() or not (ROOT / "README.md").is_file():
    pytest.skip("examples/ and README.md are beside the source, not in the wheel", allow_module_level=True)

EXAMPLES = sorted(path.name for path in (ROOT / "examples").glob("*.py"))
HIDDEN = ("cupy", "torch", "pycuda", "mpi4py")
BAD_VALUES = [("--n", "0"), ("--n", "many"), ("--dtype", "float16")]
DOCUMENTS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
BLOCKS = [(path, line, code) for path in DOCUMENTS for line, code in python_blocks(path)]

# A block that is a signature, as docs/python-api.md shows fusec.compile's, is not a statement:
# it is `NAME(PARAMETERS) -> ANNOTATION` and nothing else. Such a block is compiled as
# `def NAME(PARAMETERS) -> ANNOTATION: ...` (NAME's last dotted part), which checks the
# parameters' syntax, instead of as it stands; every other block is compiled as it stands.
SIGNATURE = re.compile(r"(?P<name>[A-Za-z_][\w.]*)\((?P<parameters>.*)\)\s*->\s*(?P<returns>[^\n]+)", re.S)


@pytest.fixture
def hidden(tmp_path) -> tuple[str]:
    """A folder of modules named as the GPU frameworks, each raising ImportError, to go first on
    an example's path: what its --help imports must do without them."""
    for name in HIDDEN:
        (tmp_path / f"{name}.py").write_text(f"raise ImportError('{name} is hidden by the test')\n")
    return (str(tmp_path),)


@pytest.mark.parametrize("example", EXAMPLES)
def test_help_needs_no_gpu_framework(example, hidden):
    done = run_example(example, "--help", path=hidden)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: ")
    assert "--n" in done.stdout and "--dtype" in done.stdout


@pytest.mark.parametrize("flag, value", BAD_VALUES)
@pytest.mark.parametrize("example", EXAMPLES)
def test_a_bad_flag_value_is_an_argparse_error_naming_it(example, flag, value, hidden):
    done = run_example(example, f"{flag}={value}", path=hidden)
    assert done.returncode == 2, done.stderr
    assert f"error: argument {flag}: " in done.stderr


@pytest.mark.parametrize("value", ["0", "1", "nan"])
def test_a_bad_rtol_is_an_argparse_error_naming_it(value, hidden):
    done = run_example("solver_bicg.py", f"--rtol={value}", path=hidden)
    assert done.returncode == 2, done.stderr
    assert "error: argument --rtol: must be a number above 0 and below 1" in done.stderr


@pytest.mark.parametrize("path, line, code", BLOCKS, ids=[f"{p.relative_to(ROOT)}:{n}" for p, n, _ in BLOCKS])
def test_python_blocks_of_the_documentation_are_valid_python(path, line, code):
    signature = SIGNATURE.fullmatch(code.strip())
    if signature:
        name = signature["name"].rsplit(".", 1)[-1]
        code = f"def {name}({signature['parameters']}) -> {signature['returns']}: ..."
    compile(code, f"{path.relative_to(ROOT)}:{line}", "exec")


def test_readme_shows_cupy_and_pytorch_blocks():
    """tests/gpu/test_examples.py runs README.md's blocks: it finds one for each framework."""
    imported = set()
    for _, code in python_blocks(ROOT / "README.md"):
        imported |= imported_modules(code)
    assert {"cupy", "torch", "fusec"} <= imported
