"""Does a fixed time per kernel of each class, beside the fitted power laws, choose better? (CPU)

    python -m experiments.prediction_latency [--gpu h200] [--out experiments/results]

QUESTION (issue 49). The shipped correction multiplies each kernel's database price ``p`` by
``exp(w_c . x)``: a power law, so a cost the database leaves out that is the same for every
kernel of a class (a grid barrier, the finish of a cross-block sum, a launch the probes hide)
can only be bent into it. On the H200's training points held fusions measured 1.2-1.8x their
price at 5-50 us and band kernels 0.96-1.07x: an offset, not a ratio. Does the model

    T = sum_k (p_k exp(w_c(k) . x_k) + L_c(k)),    L_c >= 0 fitted per class,

cross-validate to better first choices than the shipped fit?

ANSWER (H200, 143 points, 2026-11-29; ``experiments/results/h200-prediction-latency.md``): NO.
Cross-validated by point the shipped fit chooses at 1.083 gmean (worst 1.592); with a fixed time
for held kernels 1.084, held and striped 1.084, every class 1.090 (worst 1.853); one script
out 1.094 against 1.101, 1.101, 1.096. Fitted on every point the fixed times are sizeable (held
6.6 us, vector 8.9, the others 2.5-4.6) but they move prices that the power laws already bent
to the same plans: the first choices do not change for the better. The held fusions' excess is
not a constant per kernel; the model stays as shipped.

Same data, loss and protocols as fusec.cost.fit (the relative fit: a free offset per point,
fit.plan_weights, ridge on w; L_c = exp(a_c), a_c unpenalised, started at 0.5 us), 10 folds by
point as ``fusec perfdb fit`` deals them and one script out; the shipped fit is fusec.cost.fit
itself, with the features of the GPU's shipped correction.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
from pathlib import Path

import numpy as np

from experiments import prediction_models as PM

ROOT = Path(__file__).resolve().parent.parent
START_LATENCY = 0.5e-6  # seconds: where each class's fixed time starts


@dataclasses.dataclass(frozen=True)
class LatencyFit:
    weights: np.ndarray  # (classes, features), 0 outside the used columns and unfitted classes
    latency: np.ndarray  # (classes,) seconds; 0 for a class not fitted
    low: np.ndarray
    high: np.ndarray


def _design(s, cols):
    return s.x[:, cols]


def fit_latency(s, cols, ridge: float, latency_classes) -> LatencyFit:
    """The relative fit of fusec.cost.fit with a fixed time per kernel of each class in
    ``latency_classes`` (Gauss-Newton with Levenberg-Marquardt damping, as fit._solve)."""
    from fusec.cost import fit as F
    from fusec.cost.features import CLASSES
    n_classes = len(CLASSES)
    x = _design(s, cols)
    n_features = x.shape[1]
    points = int(s.point_of.max()) + 1
    plans_with = np.zeros((s.plans, n_classes), bool)
    plans_with[s.plan_of, s.kind_of] = True
    active = [c for c in range(n_classes) if plans_with[:, c].sum() >= F.MIN_PLANS
              and len(set(s.point_of[plans_with[:, c]].tolist())) >= F.MIN_POINTS]  # as fit._fit
    lat = [CLASSES.index(c) for c in latency_classes if CLASSES.index(c) in active]
    n_w, n_a, n_b = len(active) * n_features, len(lat), points
    column = np.full(n_classes, -1)
    column[active] = np.arange(len(active)) * n_features
    lat_index = np.full(n_classes, -1)
    lat_index[lat] = np.arange(len(lat))
    omega = F.plan_weights(s, points)
    penalty = np.zeros(n_w + n_a + n_b)
    penalty[:n_w] = ridge * points

    def unpack(theta):
        weights = np.zeros((n_classes, n_features))
        weights[active] = theta[:n_w].reshape(len(active), n_features)
        a = np.full(n_classes, -np.inf)
        a[lat] = theta[n_w:n_w + n_a]
        return weights, a, theta[n_w + n_a:]

    def forward(theta):
        weights, a, offsets = unpack(theta)
        u = s.log_price + np.einsum("kf,kf->k", x, weights[s.kind_of])
        fixed = np.exp(a[s.kind_of])  # 0 where no latency
        each = np.exp(u) + fixed
        total = np.zeros(s.plans)
        np.add.at(total, s.plan_of, each)
        r = np.log(total) + offsets[s.point_of] - s.log_time
        return r, u, fixed, total

    theta = np.zeros(n_w + n_a + n_b)
    theta[n_w:n_w + n_a] = math.log(START_LATENCY)
    r, u, fixed, total = forward(theta)
    value = float(np.sum(omega * r * r) + np.sum(penalty * theta * theta))
    damping = 1e-6
    rows = np.arange(s.plans)
    for _ in range(300):
        jac = np.zeros((s.plans, n_w + n_a + n_b))
        share = np.exp(u) / total[s.plan_of]
        on = column[s.kind_of] >= 0
        k_on = np.flatnonzero(on)
        for f in range(n_features):
            np.add.at(jac, (s.plan_of[k_on], column[s.kind_of[k_on]] + f), share[k_on] * x[k_on, f])
        l_on = np.flatnonzero(lat_index[s.kind_of] >= 0)
        np.add.at(jac, (s.plan_of[l_on], n_w + lat_index[s.kind_of[l_on]]), fixed[l_on] / total[s.plan_of[l_on]])
        jac[rows, n_w + n_a + s.point_of] = 1.0
        weighted = jac * omega[:, None]
        hessian = weighted.T @ jac + np.diag(penalty)
        gradient = weighted.T @ r + penalty * theta
        for _ in range(30):
            step = np.linalg.solve(hessian + damping * np.diag(np.diag(hessian) + 1e-12), -gradient)
            trial = theta + step
            trial[n_w:n_w + n_a] = np.clip(trial[n_w:n_w + n_a], math.log(1e-9), math.log(1e-3))
            r_t, u_t, fixed_t, total_t = forward(trial)
            v_t = float(np.sum(omega * r_t * r_t) + np.sum(penalty * trial * trial))
            if v_t <= value:
                break
            damping *= 10
        else:
            break
        done = value - v_t <= 1e-13 * max(value, 1e-300)
        theta, r, u, fixed, total, value = trial, r_t, u_t, fixed_t, total_t, v_t
        damping = max(damping / 10, 1e-12)
        if done:
            break
    weights, a, _ = unpack(theta)
    low, high = np.zeros((n_classes, n_features)), np.zeros((n_classes, n_features))
    for c in range(n_classes):
        mine = x[s.kind_of == c]
        if len(mine):
            low[c], high[c] = mine.min(axis=0), mine.max(axis=0)
    latency = np.where(np.isfinite(a), np.exp(a), 0.0)
    return LatencyFit(weights, latency, low, high)


def predict_latency(s, cols, found: LatencyFit) -> np.ndarray:
    x = np.clip(_design(s, cols), found.low[s.kind_of], found.high[s.kind_of])
    u = s.log_price + np.einsum("kf,kf->k", x, found.weights[s.kind_of])
    total = np.zeros(s.plans)
    np.add.at(total, s.plan_of, np.exp(u) + found.latency[s.kind_of])
    return np.log(total)


def folds_of(labels, scheme: str) -> np.ndarray:
    if scheme == "by point":
        return np.arange(len(labels)) % 10
    scripts = sorted({PM.script_of(label) for label in labels})
    return np.array([scripts.index(PM.script_of(label)) for label in labels])


def cross_validated(s, scheme: str, predict_fold) -> np.ndarray:
    fold_of = folds_of(s.labels, scheme)
    out = np.zeros(s.plans)
    for fold in np.unique(fold_of):
        held = fold_of[s.point_of] == fold
        train = s.select(~held)
        kept, renumbered = np.unique(train.point_of, return_inverse=True)
        train = dataclasses.replace(train, point_of=renumbered, labels=tuple(s.labels[i] for i in kept))
        test = s.select(held)
        out[held] = predict_fold(train, test)
    return out


def scored_rows(s, variants: dict) -> list[dict]:
    """Each variant's cross-validated first choices, by point and with one script out (printed as they come)."""
    from fusec.cost import fit as F
    rows = []
    for scheme in ("by point", "one script out"):
        for name, predict in variants.items():
            scored = F.scores(s, cross_validated(s, scheme, predict)).summary()
            rows.append({"variant": name, "scheme": scheme, **scored})
            print(json.dumps(rows[-1]), flush=True)
    return rows


def table(title: str, command: str, report: dict) -> list[str]:
    """The report's rows as a Markdown table under ``title``."""
    lines = [f"# {title}", "", f"`{command}`: {report['points']} points, {report['plans']} measured plans"
             " (fusec/data/training). First choice among each point's measured plans (its time over the"
             " fastest's), cross-validated.", "",
             "| variant | protocol | gmean | worst | <= 1.05x | rho mean |", "|---|---|---:|---:|---:|---:|"]
    for row in report["rows"]:
        lines.append(f"| {row['variant']} | {row['scheme']} | {row['first_gmean']:.3f} | {row['first_worst']:.3f} |"
                     f" {row['within']:.0%} | {row['rho_mean']:.2f} |")
    return lines


def arguments(doc: str, argv) -> argparse.Namespace:
    """--gpu and --out, as these studies take them."""
    parser = argparse.ArgumentParser(description=doc.split("\n")[0])
    parser.add_argument("--gpu", default="h200")
    parser.add_argument("--out", default=str(ROOT / "experiments" / "results"))
    return parser.parse_args(argv)


def main(argv=None) -> int:
    args = arguments(__doc__, argv)
    from fusec.cost import fit as F
    from fusec.cost.features import CLASSES, FEATURES

    s, _ = PM.load(args.gpu)
    used = PM.shipped_features(args.gpu)
    cols = [FEATURES.index(f) for f in FEATURES if f in used]
    variants = {
        "shipped fit (fusec.cost.fit)": lambda tr, te: F.log_predictions(te, F.fit(tr, used=used)),
        "fit + a fixed time, held": lambda tr, te: predict_latency(
            te, cols, fit_latency(tr, cols, F.RIDGE, ("held",))),
        "fit + a fixed time, held and striped": lambda tr, te: predict_latency(
            te, cols, fit_latency(tr, cols, F.RIDGE, ("held", "striped"))),
        "fit + a fixed time, every class": lambda tr, te: predict_latency(
            te, cols, fit_latency(tr, cols, F.RIDGE, CLASSES)),
    }
    report = {"gpu": args.gpu, "points": len(s.labels), "plans": s.plans, "features": list(used), "rows": []}
    database = F.scores(s, F.log_predictions(s, None)).summary()
    report["rows"] = [{"variant": "database alone", "scheme": "-", **database}] + scored_rows(s, variants)
    whole = fit_latency(s, cols, F.RIDGE, CLASSES)
    report["latency_us_all_points"] = {c: float(whole.latency[i] * 1e6) for i, c in enumerate(CLASSES)}
    print(report["latency_us_all_points"])
    write(args, "prediction-latency", report, "A fixed time per kernel class beside the fitted correction",
          "Fixed times fitted on every point (every class), us: " + ", ".join(
              f"{c} {v:.2f}" for c, v in report["latency_us_all_points"].items()))
    return 0


def write(args, name: str, report: dict, title: str, footer: str) -> None:
    """``<out>/<gpu>-<name>.json`` and ``.md`` (the table under ``title``, then ``footer``)."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / f"{args.gpu}-{name}.json").write_text(json.dumps(report, indent=1) + "\n")
    lines = table(f"{title} ({args.gpu}, CPU)", f"python -m experiments.{name.replace('-', '_')} --gpu {args.gpu}",
                  report)
    (out / f"{args.gpu}-{name}.md").write_text("\n".join(lines + ["", footer]) + "\n")


if __name__ == "__main__":
    raise SystemExit(main())
