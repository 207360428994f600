"""What a kernel's sums cost when they run apart (Kernel.sums_apart): the analytic model's two
terms for them, fitted on the CPU to the GPU times of experiments.second_kernel_finish.

That study timed each tile plan with its sums in a second function ('lines, released at the
end', what fusec generates since) and with no finish at all (its partials stored, nothing
summed). The difference is what the sums add past the tile kernel's end. Each plan is
rebuilt here (the space at the study's size, the candidate of the study's summary, generated
for the study's GPU) and its partials counted as the model counts them
(``AnalyticPredictor.sums_seconds``): every reduction's arrivals times its tiles' outputs.
A least-squares line through (MB of partials, µs added) gives the fixed part
(``sums_launch``) and the rate at which partials are read back (``sums_rate``).

    python -m experiments.sums_apart_price [--study experiments/results/h200-second-kernel-finish.json]
        [--out experiments/results/h200-sums-apart-price.md]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
STUDY = ROOT / "experiments" / "results" / "h200-second-kernel-finish.json"
OUT = ROOT / "experiments" / "results" / "h200-sums-apart-price.md"
APART, NONE = "lines, released at the end", "no finish"


def rows(study: dict) -> list[dict]:
    """Per tile kernel with its sums apart in the study's plans: the case, its partials' MB,
    and the µs its sums added."""
    from fusec.cost.perfdb import predictor_for
    from fusec.data import LIBRARY
    from fusec.emit.program import generate
    from fusec.frontend import load_script
    from fusec.library.loader import load_library
    from fusec.space.combinations import ALL_LAYOUTS, build_space
    library = load_library(LIBRARY)
    predictor = predictor_for(library, study["device"], corrected=False)
    out = []
    for row in study["rows"]:
        dag = load_script(ROOT / "scripts" / f"{row['sequence']}.script", library)
        sizes = {s: row["size"] for s in dag.sizes}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            space = build_space(dag, library, row["dtype"], sizes, predictor)
        found = [c for c in space.top(ALL_LAYOUTS, twins=True) if c.plan.summary(dag) == row["plan"]]
        if not found:
            raise SystemExit(f"{row['sequence']} {row['dtype']} {row['size']}: no candidate {row['plan']}")
        program = generate(dag, library, found[0].plan, row["dtype"], predictor.target)
        for kernel in (k for k in program.kernels if k.sums_apart):
            model = predictor.analytic
            partials = (model.sums_seconds(kernel, sizes) - model.sums_launch) * model.sums_rate
            out.append({"case": f"{row['sequence']} {row['dtype']} {row['size']}", "kernel": kernel.name,
                        "mb": partials / 1e6, "added_us": row["us"][APART] - row["us"][NONE],
                        "priced_us": model.sums_seconds(kernel, sizes) * 1e6})
    return out


def fit(found: list[dict]) -> tuple[float, float]:
    """(µs fixed, µs per MB) of the least-squares line through the rows."""
    x = np.array([[1.0, r["mb"]] for r in found])
    y = np.array([r["added_us"] for r in found])
    (fixed, per_mb), *_ = np.linalg.lstsq(x, y, rcond=None)
    return float(fixed), float(per_mb)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--study", type=Path, default=STUDY)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    study = json.loads(args.study.read_text())
    found = rows(study)
    fixed, per_mb = fit(found)
    lines = [f"# The price of sums run apart, fitted to {args.study.name} ({study['device']})", "",
             "`python -m experiments.sums_apart_price` (CPU). µs added: the plan's time with its sums in a"
             " second function less its time with no finish (the study's medians); priced: the model's"
             " `sums_seconds` as shipped.", "",
             "| case | kernel | partials MB | µs added | µs priced |", "|---|---|---:|---:|---:|"]
    lines += [f"| {r['case']} | {r['kernel']} | {r['mb']:.2f} | {r['added_us']:.2f} | {r['priced_us']:.2f} |"
              for r in found]
    errors = [abs(fixed + per_mb * r["mb"] - r["added_us"]) for r in found]
    lines += ["", f"Least squares over {len(found)} kernels: {fixed:.2f} µs + {per_mb:.3f} µs a MB"
              f" ({1 / per_mb:.1f} TB/s); largest error {max(errors):.2f} µs, median {np.median(errors):.2f}."]
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
