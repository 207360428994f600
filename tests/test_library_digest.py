"""fusec/library/digest.py: the library files a script's kernels are built from.

What a tuned plan is keyed on (fusec/tune/store.py), so it must name every file whose text
reaches a kernel of the script (else an edit to it would leave a plan keyed as current that
generates other code) and no file the script does not read (else a library that only gains
files would stale every plan).
"""

from __future__ import annotations

import dataclasses
import shutil
import warnings
from pathlib import Path
from types import MappingProxyType

import pytest

from fusec import families
from fusec.cost.analytic import DEFAULT
from fusec.errors import Coord
from fusec.frontend import load_script
from fusec.library.digest import digest, files_read, library_digest
from fusec.library.loader import load_library
from fusec.space.combinations import build_space
from tests.helpers import LIBRARY, ROOT, SCRIPTS, library, script_dag
from tests.test_library_loader import readme_examples

MARK = "// digest test: this text comes from "


@pytest.fixture(scope="module")
def marked(tmp_path_factory) -> Path:
    """The bundled library copied, every CUDA file ending in a comment naming it."""
    folder = tmp_path_factory.mktemp("marked") / "blas"
    shutil.copytree(LIBRARY, folder, ignore=shutil.ignore_patterns("tunings"))
    for path in [*folder.glob("*.cu"), *folder.glob("*.cuh")]:
        path.write_text(path.read_text(encoding="utf-8") + f"\n{MARK}{path.name}\n", encoding="utf-8")
    return folder


def _kernels(space):
    """One kernel per slot for every distinct family, calls, implementations and geometry
    of its parts (what decides which files a kernel includes; block shapes do not)."""
    seen = {}
    for slot, options in space.options.items():
        for plan, kernel, _ in options:
            parts = tuple((p.calls, p.implementations, p.geometry) for p in plan.parts)
            seen.setdefault((slot, type(plan).__name__, parts), kernel)
    return list(seen.values())


@pytest.mark.parametrize("script", [
    pytest.param(p.stem, marks=[] if p.stem in ("bicgk", "gesummv", "axpydot") else [pytest.mark.slow])
    for p in SCRIPTS])
def test_every_file_whose_text_reaches_a_kernel_is_one_the_script_reads(script, marked):
    lib = load_library(marked)
    dag = load_script(Path(script_dag(script).file), lib)
    read = files_read(lib, (c.function for c in dag.calls))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a space cut short (GEMVER's) says so
        space = build_space(dag, lib, "float32", {s: 4096 for s in dag.sizes}, DEFAULT)
    reached = set()
    for kernel in _kernels(space):
        source = families.emit(kernel, dag, lib)
        reached |= {line.split(MARK)[1].strip() for line in source.split("\n") if MARK in line}
    assert reached, "no marked file reached a kernel: the test checks nothing"
    assert reached <= set(read), sorted(reached - set(read))
    assert {Path(f.path).name for f in lib.prelude} <= set(read) and "library.fusec" in read


def test_the_files_are_named_as_the_loader_names_them_with_its_digests():
    lib = library()
    read = files_read(lib, ["sgemv", "sdot"])
    assert list(read) == sorted(read)
    assert set(read) == {"library.fusec", "prelude.cuh", "sgemv.cu", "sdot.cu", "tile.cuh", "band.cuh", "vector.cuh"}
    assert read == {name: lib.files[name] for name in read}
    assert digest(read) != digest({**read, "sdot.cu": "0" * 16}) != digest({**read, "extra.cu": "0" * 16})
    assert library_digest(lib, script_dag("sgemv")) == digest(files_read(lib, ["sgemv_ab"]))


def test_a_function_added_is_no_file_of_another_script(tmp_path):
    """A library that gains a function (sexp.cu, as strmv.cu would be added) has another
    content hash, but every bundled script reads the same files with the same digests."""
    shutil.copytree(LIBRARY, tmp_path / "blas", ignore=shutil.ignore_patterns("tunings"))
    (tmp_path / "blas" / "sexp.cu").write_text(readme_examples()["sexp.cu"], encoding="utf-8")
    grown = load_library(tmp_path / "blas")
    assert "sexp.cu" in grown.files and grown.content_hash != library().content_hash
    for path in SCRIPTS:
        dag = load_script(path, grown)
        assert library_digest(grown, dag) == library_digest(library(), dag), path.name
    assert "sexp.cu" in files_read(grown, ["sexp"])


def test_a_mapping_declared_in_another_index_file_names_that_file():
    """A mapping's declaring file comes from its coordinate (a part index file beside
    library.fusec), made relative to the library's folder: a function using it reads that
    file; one that does not, does not."""
    lib = library()
    part = str(Path(lib.path) / "triangle.fusec")
    moved = dataclasses.replace(lib.mappings["cols"], coord=Coord(part, 3, 1))
    parted = dataclasses.replace(lib, mappings=MappingProxyType({**lib.mappings, "cols": moved}),
                                 files=MappingProxyType({**lib.files, "triangle.fusec": "0" * 16}))
    assert files_read(parted, ["sgemv"])["triangle.fusec"] == "0" * 16  # sgemv loads x as cols
    assert "triangle.fusec" not in files_read(parted, ["sscal"])


def test_a_function_added_leaves_every_generated_program_as_it_was(tmp_path):
    """The .cu header names the digest of the files its kernels read, not the whole library's
    hash: a library that gains a function generates the same source for every other script
    (nvcc's cache finds it again). The #line directives name the files where they are."""
    from fusec.emit.program import generate
    shutil.copytree(LIBRARY, tmp_path / "blas", ignore=shutil.ignore_patterns("tunings"))
    before = load_library(tmp_path / "blas")
    (tmp_path / "blas" / "sexp.cu").write_text(readme_examples()["sexp.cu"], encoding="utf-8")
    grown = load_library(tmp_path / "blas")
    assert grown.content_hash != before.content_hash
    for name in ("sgemv", "bicgk"):
        sources = []
        for lib in (before, grown):
            dag = load_script(ROOT / "scripts" / f"{name}.script", lib)
            plan = build_space(dag, lib, "float32", {"m": 300, "n": 200}, DEFAULT).best().plan
            sources.append(generate(dag, lib, plan, "float32").source)
        assert sources[0] == sources[1], name
        assert f"digest {library_digest(before, dag)}" in sources[0] and before.content_hash not in sources[0]
