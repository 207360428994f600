"""Does choosing by expected time, each kernel class's price raised by its spread, choose better? (CPU)

    python -m experiments.prediction_risk [--gpu h200] [--out experiments/results]

QUESTION (issue 49). The fitted correction predicts each plan's median time (least squares on
log time). Classes differ in how far their plans stray from the fit: on the H200's points the
held and striped fusions' residuals are wider than the tile and band kernels'. Choosing the
lowest of noisy predictions favours the widest (a winner's curse). Choosing instead by the
expected time, each kernel's corrected price times exp(lambda * s_c^2 / 2) with s_c^2 the
variance of its class's plans' residuals in the training folds (lambda = 1: the mean of a
log-normal), does it choose better, cross-validated?

ANSWER (H200, 143 points, 2026-11-29; ``experiments/results/h200-prediction-risk.md``): NO.
The classes' spreads differ (log variance: vector 0.003, striped 0.009, tile 0.011, band 0.022,
held 0.027, horizontal 0.029), but choosing by expected time moves the cross-validated first
choices by less than the noise of picking among four lambdas: by point 1.083 (shipped) against
1.084, 1.086, 1.084, 1.078 for lambda 0.5, 1, 2, 4; one script out 1.094 against 1.097, 1.097,
1.098, 1.091. The winner's curse is not what keeps the first choices from the targets.

Same data, fit and protocols as experiments.prediction_latency (10 folds by point, one script
out). A plan's residual (log measured - log predicted - its point's weighted mean of those) is
the class's of its dominant kernel (the largest corrected price); variances weighted as the fit
weighs plans (fit.plan_weights).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from experiments import prediction_latency as PL
from experiments import prediction_models as PM

ROOT = Path(__file__).resolve().parent.parent
LAMBDAS = (0.5, 1.0, 2.0, 4.0)


def spreads(s, found, used) -> np.ndarray:
    """Per class, the weighted variance of the training plans' residuals about their point's mean."""
    from fusec.cost import fit as F
    from fusec.cost.features import CLASSES
    predicted = F.log_predictions(s, found)
    omega = F.plan_weights(s)
    residual = s.log_time - predicted
    mean = np.bincount(s.point_of, omega * residual) / np.bincount(s.point_of, omega)
    residual -= mean[s.point_of]
    u = _unit(s, found)
    dominant = np.full(s.plans, -1)
    best = np.full(s.plans, -np.inf)
    for k in range(len(u)):
        if u[k] > best[s.plan_of[k]]:
            best[s.plan_of[k]], dominant[s.plan_of[k]] = u[k], s.kind_of[k]
    out = np.zeros(len(CLASSES))
    for c in range(len(CLASSES)):
        mine = dominant == c
        if mine.sum() >= 12:
            out[c] = float(np.sum(omega[mine] * residual[mine] ** 2) / np.sum(omega[mine]))
    return out


def _unit(s, found) -> np.ndarray:
    from fusec.cost import fit as F
    cols = F._columns(found.used)
    x = np.clip(s.x[:, cols], found.low[s.kind_of][:, cols], found.high[s.kind_of][:, cols])
    return s.log_price + np.einsum("kf,kf->k", x, found.weights[s.kind_of][:, cols])


def risky(lam: float, used):
    from fusec.cost import fit as F

    def predict(train, test):
        found = F.fit(train, used=used)
        variance = spreads(train, found, used)
        u = _unit(test, found) + lam * variance[test.kind_of] / 2
        return F._log_sums(u, test.plan_of, test.plans)
    return predict


def main(argv=None) -> int:
    args = PL.arguments(__doc__, argv)
    from fusec.cost import fit as F
    from fusec.cost.features import CLASSES

    s, _ = PM.load(args.gpu)
    used = PM.shipped_features(args.gpu)
    variants = {"shipped fit": lambda tr, te: F.log_predictions(te, F.fit(tr, used=used))}
    variants.update({f"expected time, lambda {lam}": risky(lam, used) for lam in LAMBDAS})
    report = {"gpu": args.gpu, "points": len(s.labels), "plans": s.plans, "rows": PL.scored_rows(s, variants)}
    whole = F.fit(s, used=used)
    report["variance_all_points"] = dict(zip(CLASSES, spreads(s, whole, used).tolist()))
    print(report["variance_all_points"])
    PL.write(args, "prediction-risk", report, "Choosing by expected time: each class's price raised by its spread",
             "Residual variance per class (log time, fitted on every point): " + ", ".join(
                 f"{c} {v:.4f}" for c, v in report["variance_all_points"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
