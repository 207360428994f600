"""Running a rewrite of a program's generated CUDA: the step the studies that rewrite fusec's
source (band_deferred, band_tma, cache_hints) share. Each builds its variants and reports them its
own way; this runs one on the inputs, keeps the first variant's outputs as the reference the
others are checked against, and times it as `fusec tune` does (GPU time, median)."""

from __future__ import annotations

import copy
import dataclasses
import statistics
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


@dataclasses.dataclass
class Outcome:
    us: float  # median GPU time of the runs
    check: str  # against the reference: "same bits", "close" (within 1e-4), "DIFFERENT"


def run_variant(base, source: str, inputs: dict, repeat: int, reference: list, dynamic_shared: int = 0) -> Outcome:
    """``base`` (a compiled fusec program) with its CUDA replaced by ``source`` (and its first
    kernel given ``dynamic_shared`` bytes of dynamic shared memory, passed by every launch),
    run on ``inputs`` and timed ``repeat`` times. ``reference``: the outputs of the variant run
    first, on the host; an empty list is filled with this one's."""
    import cupy
    import numpy as np

    from fusec.runtime import cuda
    from fusec.runtime.program import Program
    generated = dataclasses.replace(base.generated, source=source)
    if dynamic_shared:
        kernels = [copy.copy(k) for k in generated.kernels]
        object.__setattr__(kernels[0], "dynamic_shared_bytes", dynamic_shared)
        generated = dataclasses.replace(generated, kernels=tuple(kernels))
    program = Program(generated)
    try:
        with cuda.context():
            results = program(**inputs)
            results = results if isinstance(results, tuple) else (results,)
            host = [cupy.asnumpy(r) for r in results]
            del results
            if not reference:
                reference.extend(host)
            same = all(np.array_equal(a, b, equal_nan=True) for a, b in zip(reference, host))
            close = all(np.allclose(a, b, rtol=1e-4, atol=1e-4 * float(np.abs(a).max()))
                        for a, b in zip(reference, host))
            times = program.time(inputs, repeat=repeat, host=False)
    finally:
        program.release()
    return Outcome(statistics.median(times) * 1e3, "same bits" if same else "close" if close else "DIFFERENT")


def record(row: dict, name: str, base, source: str, inputs: dict, repeat: int, reference: list,
           nbytes: int, dynamic_shared: int = 0) -> None:
    """Build variant ``name`` (ptxas's registers and spilled stores into ``row["registers"]``;
    one that does not build is printed and recorded as None), run and time it
    (:func:`run_variant`) into ``row["us"]`` and ``row["check"]``, and print a line."""
    from fusec import nvcc
    label = f"{row['sequence']:6s} {row['dtype']} {row['size']:6d} {row.get('origin', ''):12s} {name:16s}"
    try:
        resources = nvcc.compile_cubin(source).resources
    except Exception as exc:  # a variant that does not build is reported, not fatal
        print(f"{label} does not build: {str(exc)[:2000]}", flush=True)
        row.setdefault("us", {})[name] = None
        return
    row.setdefault("registers", {})[name] = {k: [r.registers, r.spill_stores] for k, r in resources.items()}
    outcome = run_variant(base, source, inputs, repeat, reference, dynamic_shared)
    row.setdefault("us", {})[name] = outcome.us
    row.setdefault("check", {})[name] = outcome.check
    print(f"{label} {outcome.us:8.1f} us {nbytes / outcome.us / 1e3:6.0f} GB/s {outcome.check:9s}"
          f" regs {row['registers'][name]}  {row['plan'][:60]}", flush=True)


def run_case(script: str, base, sizes: dict, dtype: str, origin: str, variants: dict, shared: dict,
             repeat: int) -> dict:
    """Every variant of ``base`` (name -> CUDA source; the first is the reference), on one set of
    random inputs at ``sizes``, each recorded (:func:`record`; ``shared``: name -> bytes of
    dynamic shared memory): the case's row."""
    import cupy

    from bench.fusion import device_inputs
    inputs = device_inputs(cupy, base.dag, sizes, dtype, seed=5)
    row = {"sequence": script, "dtype": dtype, "size": max(sizes.values()), "origin": origin,
           "plan": base.generated.plan.summary(base.dag), "us": {}, "registers": {}, "check": {}}
    reference: list = []
    for name, source in variants.items():
        record(row, name, base, source, inputs, repeat, reference, base.minimum_bytes(sizes), shared.get(name, 0))
    del inputs
    cupy.get_default_memory_pool().free_all_blocks()
    return row


def shipped_and_first(cases):
    """(script, dtype, sizes, origin, program) for each (script, dtype, n) of ``cases`` at
    m = n = n: the program of the plan shipped for it (origin "shipped"), then of the
    predictor's first choice ("first choice"), the plans each study rewrites."""
    import fusec
    for script, dtype, n in cases:
        path = ROOT / "scripts" / f"{script}.script"
        sizes = {"m": n, "n": n}
        for origin, tuned in (("shipped", True), ("first choice", False)):
            yield script, dtype, sizes, origin, fusec.compile(path, dtype=dtype, sizes=sizes, tuned=tuned)
