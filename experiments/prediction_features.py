"""Which further kernel feature would the H200's correction choose better with? (CPU)

    python -m experiments.prediction_features [--gpu h200] [--out experiments/results]

QUESTION (issue 49). Looking at the worst cross-validated first choices of the eleven-feature fit
(GESUMMV fp64 n = 10792 at 1.59x: a horizontal fusion whose two products stage the vector in
shared memory, 664 us against 417 in registers, priced alike), which property the database
prices alike but the GPU does not would help: the shared memory a block uses
(``shared``), the share of an SM's shared memory its resident blocks take (``shared_share``),
how far a horizontal fusion's register bound squeezes a kernel below its register estimate
(``squeeze``), the block barriers a serial iteration waits at (``loop_barriers``)?
(experiments.prediction_models.extra_columns defines each.)

ANSWER (H200, 143 points, 2026-11-29; ``experiments/results/h200-prediction-features.md``):
``shared`` is the one that helps clearly under both protocols: first choice gmean by point / one
script out, base 1.082 / 1.094; + shared 1.071 / 1.081; + shared_share 1.082 / 1.089; + squeeze
1.082 / 1.100; + loop_barriers 1.076 / 1.092; + shared + squeeze 1.069 / 1.087; + shared +
loop_barriers 1.065 / 1.089 (each pair added to shared helps one protocol and hurts the other).
A fit with ``shared`` was then tried as fusec's correction and backed out: a tie in a draw of
the eleven sequences, but slower solver iterations (docs/design/fitted-correction.md).

Each variant is the eleven base features (fusec.cost.features.BASE) plus the named ones, fitted
as fusec.cost.fit fits (relative, ridge 1e-4 per point), cross-validated as
experiments.prediction_models does it: by point (one point out at a time) and one script out.
"""

from __future__ import annotations

import json

from experiments import prediction_latency as PL
from experiments import prediction_models as PM

VARIANTS = ((), ("shared",), ("shared_share",), ("squeeze",), ("loop_barriers",), ("shared", "squeeze"),
            ("shared", "loop_barriers"))


def main(argv=None) -> int:
    args = PL.arguments(__doc__, argv)
    from fusec.cost import fit as F
    data = {args.gpu: PM.load(args.gpu)}
    samples = data[args.gpu][0]
    report = {"gpu": args.gpu, "points": len(samples.labels), "plans": samples.plans, "rows": []}
    for scheme, label in (("point", "by point"), ("script", "one script out")):
        for add in VARIANTS:
            s, predicted = PM.cross_validated(data, args.gpu, scheme, {"add": add})
            name = "base" + "".join(f" + {a}" for a in add)
            report["rows"].append({"variant": name, "scheme": label, **F.scores(s, predicted).summary()})
            print(json.dumps(report["rows"][-1]), flush=True)
    PL.write(args, "prediction-features", report, "Further kernel features for the correction",
             "base: the eleven features of fusec.cost.features.BASE; each added feature as"
             " experiments.prediction_models.extra_columns defines it.")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
