"""GPU tier: the examples run and pass their own checks (each a subprocess, at an odd size that
no tile or block divides, in both precisions), and README.md's ```python blocks run as written
(each in a fresh namespace from the repository root), so neither drifts from fusec.
README.md's blocks are self-contained by design; the docs' blocks use names from their text and
are only compiled (tests/test_examples.py)."""

from __future__ import annotations

import re

import pytest

from tests.helpers import DTYPES, ROOT, imported_modules, python_blocks, run_example

pytestmark = pytest.mark.gpu
if not (ROOT / "examples").is_dir() or not (ROOT / "README.md").is_file():
    pytest.skip("examples/ and README.md are beside the source, not in the wheel", allow_module_level=True)

N = "1001"
LIMIT = 600  # seconds: the first solve of a size compiles its iteration and the loop's kernels
README_BLOCKS = python_blocks(ROOT / "README.md")


def _ran(example: str, dtype: str) -> str:
    pytest.importorskip("cupy")
    done = run_example(example, "--n", N, "--dtype", dtype, timeout=LIMIT)
    assert done.returncode == 0, f"{done.stdout}\n{done.stderr}"
    return done.stdout


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_bicg_example_converges_with_the_cupy_loop(dtype):
    out = _ran("solver_bicg.py", dtype)
    assert re.search(r"^CuPy loop: +info 0, \d+ iterations, true residual \S+, [\d.]+ ms$", out, re.M), out
    assert re.search(r"^fusec\.solvers\.bicg: info 0, true residual \S+, [\d.]+ ms$", out, re.M), out
    assert re.search(r"^answers differ by \S+ relative", out, re.M), out
    assert re.search(r"^speed-up: [\d.]+x", out, re.M), out
    assert out.rstrip().endswith("all checks passed"), out


@pytest.mark.parametrize("dtype", DTYPES)
def test_the_embedding_example_checks_every_call_and_replay(dtype):
    out = _ran("embed_streams_graphs.py", dtype)
    assert re.search(r"^1\. stream=stream, new result arrays: .*: ok$", out, re.M), out
    assert re.search(r"^2\. the current stream, out= arrays: .*: ok$", out, re.M), out
    assert re.search(r"^3\. captured one call into a CUDA graph$", out, re.M), out
    assert len(re.findall(r"^ +replay \d+ on new inputs: .*: ok$", out, re.M)) >= 2, out
    assert "FAILED" not in out
    assert re.search(r"all \d+ checks passed$", out.rstrip()), out


@pytest.mark.parametrize("line, code", README_BLOCKS, ids=[f"README.md:{line}" for line, _ in README_BLOCKS])
def test_readme_python_blocks_run_as_written(line, code, monkeypatch):
    for name in sorted(imported_modules(code) & {"cupy", "torch"}):  # skipped where one is missing
        module = pytest.importorskip(name)
        if name == "torch" and not module.cuda.is_available():
            pytest.skip("PyTorch sees no CUDA device")
    monkeypatch.chdir(ROOT)  # the blocks name scripts/... relative to the checkout
    exec(compile(code, f"README.md:{line}", "exec"), {"__name__": "__readme__"})
