"""bench.striped_variants without a GPU: each variant rewrites only what it names, and nvcc takes it."""

from __future__ import annotations

import difflib

import pytest

from bench import striped_variants
from fusec import nvcc
from fusec.emit.program import generate
from fusec.cost.analytic import DEFAULT
from fusec.frontend import load_script
from fusec.space.combinations import build_space
from fusec.ir.plan import StripedPlan
from helpers import ROOT, library

SCRIPTS = ("gemver", "sgemvt", "atax")


def striped_source(script: str, dtype: str = "float32") -> str:
    dag = load_script(ROOT / "scripts" / f"{script}.script", library())
    space = build_space(dag, library(), dtype, {s: 4096 for s in dag.sizes}, DEFAULT)
    plan = next(c.plan for c in space.ranked() if any(isinstance(k, StripedPlan) for k in c.plan.kernels))
    return generate(dag, library(), plan, dtype).source


def changed(a: str, b: str) -> list[str]:
    return [line for line in difflib.unified_diff(a.splitlines(), b.splitlines(), lineterm="", n=0)
            if line[:1] in "+-" and not line.startswith(("+++", "---"))]


@pytest.mark.parametrize("script", SCRIPTS)
def test_each_variant_rewrites_what_it_names(script):
    source = striped_source(script)
    variants = striped_variants.variants(source)
    assert variants["fusec"] == source
    lag = int(striped_variants.TICKET.search(source).group(1))
    for k in striped_variants.LAGS:
        lines = changed(source, variants[f"lag {k}"])
        assert lines == ([] if k == lag else [lines[0], lines[1]]) and (k == lag or lines[1].endswith(f", {k});"))
    assert changed(source, variants["no wait"]) == [f"-    {striped_variants.WAIT}",
                                                      "+    // bench.striped_variants: no wait"]
    p0, p1, kernel = striped_variants.parts(source)
    for part, (start, end) in (("producer", (p0, p1)), ("consumer", (p1, kernel))):
        lines = changed(source, variants[f"{part} STREAM_MATRIX flipped"])
        assert len(lines) == 2 and all("#define STREAM_MATRIX" in line for line in lines)
        assert source[start:end].count("#define STREAM_MATRIX") == 1
    loads = changed(source, variants["producer loads evict-last"])
    assert [line for line in loads if "bench_load16_last(p" in line] and not any(
        "bench_store16_last(p" in line for line in loads)
    assert ("producer stores evict-last" in variants) == (script == "gemver")  # only GEMVER's producer stores B


@pytest.mark.nvcc
@pytest.mark.parametrize("dtype", ("float32", "float64"))
def test_every_variant_compiles(dtype):
    sources = [v for script in SCRIPTS for v in striped_variants.variants(striped_source(script, dtype)).values()]
    assert all(nvcc.compile_many(list(dict.fromkeys(sources)), "sm_90"))
