"""Fitting the correction to measured plan times (``fusec perfdb fit``).

The model: a plan's time is the sum of its kernels' corrected prices,
``T = sum_k p_k exp(w_c(k) . x_k)``, where ``p_k`` is the performance database's
price of kernel k, ``x_k`` its features and ``w_c`` the coefficients of its class
(:mod:`fusec.cost.correction`). The fit minimises the squared error of log T against
the log of the measured time, each point (script, precision, sizes) weighing the
same whatever its number of plans and, within it, plans far slower than its fastest
less (:func:`plan_weights`), plus a ridge term that pulls every coefficient
towards 0 (no correction) where the data do not say otherwise. By default each point
also has a free offset (``relative``): only how a point's plans compare is fitted,
which is what ranking needs, and the corrected prices are left at the database's level
on average (:func:`_level`). Levenberg-Marquardt
from w = 0 (a single-kernel plan is linear in w, so most of the problem is least
squares); NumPy only, deterministic.

A class is fitted only where at least MIN_PLANS measured plans over MIN_POINTS points
have a kernel of it; the others keep the database's prices. The report scores the
first choice among each point's measured plans (the measured time of the plan
predicted fastest over the fastest measured) and Spearman's rho, for the database
alone and for the fit, in sample and under cross-validation by point.

A fit uses a set of the features (``used``): :func:`choose` keeps the block size's
indicators (``features.BLOCK_SIZE``) only where they cross-validate better on the
points at hand. The choice is made on the points it is then scored on, so the chosen
set's cross-validated score is optimistic by that one choice.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from .correction import ClassFit
from .features import BASE, CLASSES, FEATURES, FEATURES_VERSION
from .training import TrainingData

MIN_PLANS = 12
NEAR = 1.5  # plans within this factor of their point's fastest weigh fully in the fit
MIN_POINTS = 2
RIDGE = 1e-4  # per point, whose weight is 1: its squared log errors are ~1e-3 (a few % of noise)
FOLDS = 10
FEATURE_SETS = (BASE, FEATURES)  # what choose() chooses from, smaller first
# how much better (a share of the geometric mean) a larger set's cross-validated first choices
# must be to be chosen: on the H100's 26 points two ways of cross-validating disagree by 0.2 %
# on the block size's indicators (experiments/results/prediction-models.md), within noise
CHOICE_MARGIN = 0.005
WITHIN = 1.05  # the target: a first choice within 5 % of the best measured
MAX_ITERATIONS = 200


@dataclasses.dataclass(frozen=True)
class Samples:
    """Measured plans as arrays: plan i at point ``point_of[i]`` took ``exp(log_time[i])``
    seconds; kernel k of plan ``plan_of[k]`` (kernels of a plan are adjacent) is of
    class ``kind_of[k]`` (an index into CLASSES), priced ``exp(log_price[k])`` by the
    database, with features ``x[k]``."""

    point_of: np.ndarray
    log_time: np.ndarray
    plan_of: np.ndarray
    kind_of: np.ndarray
    log_price: np.ndarray
    x: np.ndarray
    labels: tuple[str, ...]  # per point

    @property
    def plans(self) -> int:
        return len(self.log_time)

    def select(self, keep: np.ndarray) -> "Samples":
        """The plans where ``keep`` (per plan) is true, renumbered."""
        kept_kernels = keep[self.plan_of]
        new_index = np.cumsum(keep) - 1
        return Samples(self.point_of[keep], self.log_time[keep], new_index[self.plan_of[kept_kernels]],
                       self.kind_of[kept_kernels], self.log_price[kept_kernels], self.x[kept_kernels], self.labels)


def samples(training: TrainingData, database=None) -> tuple[Samples, list[str]]:
    """The measured plans of ``training`` priced by ``database`` (its library hash and
    ``built`` stamp; any, when None) with this fusec's features, and notes on the points
    left out."""
    notes, labels = [], []
    point_of, log_time, plan_of, kind_of, log_price, x = [], [], [], [], [], []
    wanted = (str(database.library.get("hash")), database.built) if database is not None else None
    for point in training.points:
        if point.features_version != FEATURES_VERSION:
            notes.append(f"{point.label}: features of version {point.features_version}, not {FEATURES_VERSION}")
            continue
        if wanted is not None and (point.library, point.perfdb_built) != wanted:
            notes.append(f"{point.label}: priced by the database of library {point.library} built"
                         f" {point.perfdb_built}, not the one in use")
            continue
        measured = [p for p in point.plans if p.measured is not None]
        if not measured:
            notes.append(f"{point.label}: no plan measured")
            continue
        index = len(labels)
        labels.append(point.label)
        for plan in measured:
            for kernel in plan.kernels:
                plan_of.append(len(log_time))
                kind_of.append(CLASSES.index(kernel.kind))
                log_price.append(math.log(kernel.predicted))
                x.append(kernel.values)
            point_of.append(index)
            log_time.append(math.log(plan.measured))
    as_int = lambda values: np.asarray(values, dtype=np.int64)  # noqa: E731
    return Samples(as_int(point_of), np.asarray(log_time, float), as_int(plan_of), as_int(kind_of),
                   np.asarray(log_price, float), np.asarray(x, float).reshape(-1, len(FEATURES)),
                   tuple(labels)), notes


@dataclasses.dataclass(frozen=True)
class Fit:
    """Coefficients per class (rows of CLASSES; zeros where not fitted), which classes
    were fitted, and each feature's range per class in the data."""

    weights: np.ndarray  # (classes, features): 0 for a feature not used
    fitted: tuple[str, ...]
    low: np.ndarray
    high: np.ndarray
    kernels: dict[str, int]
    used: tuple[str, ...] = FEATURES  # the features fitted, in the order of FEATURES

    def classes(self) -> tuple[tuple[str, ClassFit], ...]:
        return tuple((kind, ClassFit(tuple(float(v) for v in self.weights[c]), tuple(float(v) for v in self.low[c]),
                                     tuple(float(v) for v in self.high[c]), self.kernels[kind]))
                     for c, kind in enumerate(CLASSES) if kind in self.fitted)




def log_predictions(s: Samples, fit: Fit | None) -> np.ndarray:
    """log of each plan's predicted time: the database's prices, corrected by ``fit``
    (features clamped to its ranges, as at run time)."""
    u = s.log_price.copy()
    if fit is not None:
        cols = _columns(fit.used)
        x = np.clip(s.x[:, cols], fit.low[s.kind_of][:, cols], fit.high[s.kind_of][:, cols])
        u += np.einsum("kf,kf->k", x, fit.weights[s.kind_of][:, cols])
    return _log_sums(u, s.plan_of, s.plans)


def _columns(used) -> list[int]:
    """The columns of FEATURES that ``used`` names; ValueError on a name that is not a feature."""
    unknown = [f for f in used if f not in FEATURES]
    if unknown:
        raise ValueError(f"{unknown[0]!r} is not a feature ({', '.join(FEATURES)})")
    return [FEATURES.index(f) for f in FEATURES if f in used]


def _log_sums(u: np.ndarray, plan_of: np.ndarray, plans: int) -> np.ndarray:
    """log sum exp of ``u`` over each plan's kernels."""
    top = np.full(plans, -np.inf)
    np.maximum.at(top, plan_of, u)
    sums = np.zeros(plans)
    np.add.at(sums, plan_of, np.exp(u - top[plan_of]))
    return top + np.log(sums)


def fit(s: Samples, *, ridge: float = RIDGE, relative: bool = True, pool: float | None = None,
        used: tuple[str, ...] | None = None) -> Fit:
    """The coefficients that fit ``s`` (see the module's docstring). ``pool``: each class's
    coefficients are one set shared by every class (pulled to 0 by ``ridge``) plus the
    class's own departure from it (pulled to 0 by ``pool``, per point): a class with few
    plans borrows the others' coefficients, and every class with kernels is corrected.
    ``used``: the features fitted (default all); the others' coefficients and ranges are 0,
    and the fit is the one made on their columns alone."""
    cols = _columns(FEATURES if used is None else used)
    found = _fit(dataclasses.replace(s, x=s.x[:, cols]), ridge, relative, pool, [FEATURES[c] for c in cols])
    if len(cols) == len(FEATURES):
        return found
    wide = []
    for part in (found.weights, found.low, found.high):
        full = np.zeros((len(CLASSES), len(FEATURES)))
        full[:, cols] = part
        wide.append(full)
    return Fit(wide[0], found.fitted, wide[1], wide[2], found.kernels, tuple(FEATURES[c] for c in cols))


def _fit(s: Samples, ridge: float, relative: bool, pool: float | None, names: list[str]) -> Fit:
    """fit() on samples whose columns are the features ``names``."""
    n_classes, n_features = len(CLASSES), len(names)
    points = int(s.point_of.max()) + 1 if s.plans else 0
    plans_with = np.zeros((s.plans, n_classes), bool)
    plans_with[s.plan_of, s.kind_of] = True
    points_with = [len(set(s.point_of[plans_with[:, c]].tolist())) for c in range(n_classes)]
    active = [c for c in range(n_classes)
              if (plans_with[:, c].sum() >= MIN_PLANS and points_with[c] >= MIN_POINTS)
              or (pool is not None and plans_with[:, c].any())]
    low, high = np.zeros((n_classes, n_features)), np.zeros((n_classes, n_features))
    kernels = {}
    for c in range(n_classes):
        mine = s.x[s.kind_of == c]
        if len(mine):
            low[c], high[c] = mine.min(axis=0), mine.max(axis=0)
        kernels[CLASSES[c]] = int(len(mine))
    weights = np.zeros((n_classes, n_features))
    if active:
        weights = _solve(s, active, points, ridge, relative, pool)
        if relative and "bias" in names:
            weights[active, names.index("bias")] += _level(s, weights, active)
    return Fit(weights, tuple(CLASSES[c] for c in active), low, high, kernels, tuple(names))


def _level(s: Samples, weights: np.ndarray, active: list[int]) -> float:
    """The shift of the fitted classes' bias that leaves the corrected prices of the
    training plans at the database's level on average (each point weighing the same).
    A relative fit cannot tell that level (each point's offset takes it), so this is
    where it is set: the correction moves plans against each other, and a class left
    unfitted, priced by the database alone, is compared with the others fairly on
    average."""
    per_point = np.bincount(s.point_of).astype(float)
    omega = 1.0 / per_point[s.point_of]
    database = _log_sums(s.log_price, s.plan_of, s.plans)
    fitted = np.isin(s.kind_of, active)
    u = s.log_price + np.einsum("kf,kf->k", s.x, weights[s.kind_of])
    shift = 0.0
    for _ in range(50):  # Newton's method on a monotonic function of one variable
        shifted = u + shift * fitted
        predicted = _log_sums(shifted, s.plan_of, s.plans)
        gap = float(np.sum(omega * (predicted - database)))
        share = np.zeros(s.plans)
        np.add.at(share, s.plan_of, np.exp(shifted - predicted[s.plan_of]) * fitted)
        slope = float(np.sum(omega * share))
        if slope <= 0 or abs(gap) < 1e-13 * np.sum(omega):
            break
        shift -= gap / slope
    return shift


def plan_weights(s: Samples, points: int | None = None) -> np.ndarray:
    """Each plan's weight in the fit: every point weighs the same in all, and within a point
    a plan more than NEAR times slower than its fastest weighs (NEAR x fastest / time)^2:
    the first choice is decided among the fast plans, and a plan three times slower than
    the best only has to stay behind them."""
    points = int(s.point_of.max()) + 1 if points is None else points
    best = np.full(points, np.inf)
    np.minimum.at(best, s.point_of, s.log_time)
    near = np.minimum(1.0, np.exp(2 * (math.log(NEAR) + best[s.point_of] - s.log_time)))
    total = np.zeros(points)
    np.add.at(total, s.point_of, near)
    return near / total[s.point_of]


def _solve(s: Samples, active: list[int], points: int, ridge: float, relative: bool,
           pool: float | None = None) -> np.ndarray:
    n_classes, n_features = len(CLASSES), s.x.shape[1]
    shared = n_features if pool is not None else 0  # the pooled coefficients, first in theta
    n_w = shared + len(active) * n_features
    n_b = points if relative else 0
    column = np.full(n_classes, -1)
    column[active] = shared + np.arange(len(active)) * n_features
    omega = plan_weights(s, points)
    penalty = np.zeros(n_w + n_b)
    penalty[:n_w] = ridge * points
    if pool is not None:
        penalty[shared:n_w] = pool * points

    def unpack(theta):
        weights = np.zeros((n_classes, n_features))
        weights[active] = theta[shared:n_w].reshape(len(active), n_features)
        if shared:
            weights[active] += theta[:shared]
        return weights, (theta[n_w:] if relative else 0.0)

    def residual(theta):
        weights, offsets = unpack(theta)
        u = s.log_price + np.einsum("kf,kf->k", s.x, weights[s.kind_of])
        predicted = _log_sums(u, s.plan_of, s.plans)
        r = predicted + (offsets[s.point_of] if relative else 0.0) - s.log_time
        return r, u, predicted

    def objective(r, theta):
        return float(np.sum(omega * r * r) + np.sum(penalty * theta * theta))

    theta = np.zeros(n_w + n_b)
    r, u, predicted = residual(theta)
    value = objective(r, theta)
    damping = 1e-6
    kernel_rows = np.repeat(s.plan_of, n_features)
    for _ in range(MAX_ITERATIONS):
        share = np.exp(u - predicted[s.plan_of])  # d log T / d u_k
        jacobian = np.zeros((s.plans, n_w + n_b))
        on = column[s.kind_of] >= 0
        cols = (column[s.kind_of][:, None] + np.arange(n_features)[None, :])
        np.add.at(jacobian, (kernel_rows.reshape(-1, n_features)[on].ravel(), cols[on].ravel()),
                  (share[:, None] * s.x)[on].ravel())
        if shared:
            np.add.at(jacobian, (kernel_rows.reshape(-1, n_features)[on].ravel(),
                                 np.tile(np.arange(n_features), int(on.sum()))), (share[:, None] * s.x)[on].ravel())
        if relative:
            jacobian[np.arange(s.plans), n_w + s.point_of] = 1.0
        weighted = jacobian * omega[:, None]
        hessian = weighted.T @ jacobian + np.diag(penalty)
        gradient = weighted.T @ r + penalty * theta
        for _ in range(30):  # raise the damping until a step lowers the objective
            step = np.linalg.solve(hessian + damping * np.diag(np.diag(hessian) + 1e-12), -gradient)
            trial = theta + step
            r_trial, u_trial, predicted_trial = residual(trial)
            trial_value = objective(r_trial, trial)
            if trial_value <= value:
                break
            damping *= 10
        else:
            break
        done = value - trial_value <= 1e-14 * max(value, 1e-300) or np.max(np.abs(step)) < 1e-12
        theta, r, u, predicted, value = trial, r_trial, u_trial, predicted_trial, trial_value
        damping = max(damping / 10, 1e-12)
        if done:
            break
    return unpack(theta)[0]


# ---------------------------------------------------------------------------- scores


def spearman(xs, ys) -> float:
    """Spearman's rank correlation (average ranks for ties); nan when either is constant."""
    rx, ry = _ranks(np.asarray(xs, float)), _ranks(np.asarray(ys, float))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    scale = math.sqrt(float(np.sum(rx * rx) * np.sum(ry * ry)))
    return float(np.sum(rx * ry) / scale) if scale else float("nan")


def _ranks(values: np.ndarray) -> np.ndarray:
    order = np.argsort(values, kind="stable")
    ranks = np.empty(len(values))
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        ranks[order[i:j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


@dataclasses.dataclass(frozen=True)
class Scores:
    """Per point: the measured time of the plan predicted fastest over the fastest
    measured, and Spearman's rho of predicted and measured times."""

    first: np.ndarray
    rho: np.ndarray

    def summary(self) -> dict:
        first = self.first[np.isfinite(self.first)]
        rho = self.rho[np.isfinite(self.rho)]
        return {"points": int(len(first)),
                "first_gmean": float(np.exp(np.mean(np.log(first)))) if len(first) else float("nan"),
                "first_worst": float(first.max()) if len(first) else float("nan"),
                "within": float(np.mean(first <= WITHIN)) if len(first) else float("nan"),
                "rho_mean": float(rho.mean()) if len(rho) else float("nan"),
                "rho_worst": float(rho.min()) if len(rho) else float("nan")}


def scores(s: Samples, log_predicted: np.ndarray) -> Scores:
    points = len(s.labels)
    first, rho = np.full(points, np.nan), np.full(points, np.nan)
    for p in range(points):
        mine = np.flatnonzero(s.point_of == p)
        if not len(mine):
            continue
        chosen = mine[np.argmin(log_predicted[mine])]  # ties: the first recorded
        first[p] = math.exp(s.log_time[chosen] - s.log_time[mine].min())
        if len(mine) >= 3:
            rho[p] = spearman(log_predicted[mine], s.log_time[mine])
    return Scores(first, rho)


def cross_validated(s: Samples, *, ridge: float = RIDGE, relative: bool = True, folds: int = FOLDS,
                    pool: float | None = None, used: tuple[str, ...] | None = None) -> np.ndarray:
    """Each plan's log prediction by a fit that did not see its point (points dealt to
    ``folds`` folds in turn)."""
    points = len(s.labels)
    fold_of = np.arange(points) % max(1, min(folds, points))
    out = np.zeros(s.plans)
    for fold in range(int(fold_of.max()) + 1 if points else 0):
        held = fold_of[s.point_of] == fold
        train = s.select(~held)
        if not train.plans:
            out[held] = log_predictions(s.select(held), None)
            continue
        # the training fold's points renumbered from 0, so that offsets stay one per point
        kept, renumbered = np.unique(train.point_of, return_inverse=True)
        train = dataclasses.replace(train, point_of=renumbered, labels=tuple(s.labels[i] for i in kept))
        out[held] = log_predictions(s.select(held), fit(train, ridge=ridge, relative=relative, pool=pool, used=used))
    return out


def choose(s: Samples, *, ridge: float = RIDGE, relative: bool = True, folds: int = FOLDS,
           sets: tuple[tuple[str, ...], ...] = FEATURE_SETS) -> tuple[tuple[str, ...], dict]:
    """The set of features (of ``sets``, smaller first) whose fit's first choices are best
    cross-validated on ``s`` (the geometric mean), and per set (by its position) the
    cross-validated scores' summary. A larger set must beat the best smaller one by
    CHOICE_MARGIN of the geometric mean; short of that the smaller set stays. Chosen on the
    points it is scored on: the chosen set's score is optimistic by that one choice."""
    summaries = [scores(s, cross_validated(s, ridge=ridge, relative=relative, folds=folds, used=names)).summary()
                 for names in sets]
    best = 0
    for i, summary in enumerate(summaries):
        if summary["first_gmean"] < summaries[best]["first_gmean"] / (1.0 + CHOICE_MARGIN):
            best = i
    return sets[best], dict(enumerate(summaries))
