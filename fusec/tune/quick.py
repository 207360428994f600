"""The candidates of a quick tune: a few plans the model cannot tell apart, timed in two rounds.

The predictor's first choice is within 1.05x of a wide tune's best at only about
60 % of sizes nobody tuned, and timing more of its first choices helps little
(experiments/results/h200-prediction-topk.md: the fastest of its first 8 is still
1.29x slow at worst): where it errs, the fastest plan is of another kernel family
(a tile kernel where a band one was ranked first, or the reverse) or of the same
family at another shape, ranks down. So a quick tune times

1. the predictor's first choice and the best of the ``first`` best-predicted layouts
   (:meth:`~fusec.space.combinations.Space.layouts`); the best-predicted of each
   *family structure* (the class of each kernel: band, tile, vector, horizontal,
   striped, held) predicted within ``within`` times the first choice; the plan tuned
   for the nearest size where the space offers it, and the one the tuning cache holds
   (:func:`fusec.tune.search.quick_first_round` adds those two);
2. then, of the winner's *structure* (its cover and each kernel's class), the best
   of the ``refine`` next-best layouts not timed yet: its shape and serial
   iterations, which the model prices within a few per cent of each other.

About eight plans in all; the study behind the defaults is
experiments/results/h200-prediction-quick.md.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..cost.features import plan_class
from ..ir.plan import ProgramPlan
from ..space.combinations import ALL_LAYOUTS, Combination, Space

FIRST = 2  # the best-predicted layouts timed in the first round, beside the first choice
REFINE = 3  # the further layouts of the winner's structure timed in the second
# A family structure is timed only if its best is predicted within this factor of the first
# choice: in the H200's 140 drawn points the fastest plan measured was predicted at most 1.52x
# the first choice (95 % within 1.2x), while GEMVER has structures of four kernels at 2x
WITHIN = 1.6


def families(plan: ProgramPlan) -> tuple[str, ...]:
    """Each kernel's class, in launch order: the first round times the best of each."""
    return tuple(plan_class(k) for k in plan.kernels)


def structure(plan: ProgramPlan) -> tuple:
    """The cover (the calls of each kernel) and each kernel's class: the second round
    times further layouts of the winner's."""
    return tuple((k.calls, plan_class(k)) for k in plan.kernels)


def first_round(space: Space, first: int = FIRST, also: Iterable[Combination] = (),
                within: float = WITHIN) -> list[Combination]:
    """The first choice and the best of the ``first`` best-predicted layouts, then the
    best-predicted of each family structure predicted within ``within`` times the first
    choice not among them, then ``also`` (a nearby size's tuned plan, the cached one),
    each plan once, in that order."""
    every = space.layouts(ALL_LAYOUTS)  # best first
    # the first choice, then the best of the next layouts: the next combinations of the
    # ranking mostly differ from it in routine order only, which times alike
    out = _distinct(space.top(1) + every[:first])
    seen_families = set()
    for combination in every:
        if combination.predicted > within * out[0].predicted:
            break
        key = families(combination.plan)
        if key not in seen_families:
            seen_families.add(key)
            out.append(combination)
    return _distinct(out + list(also))


def second_round(space: Space, winner: ProgramPlan, measured: Iterable[ProgramPlan],
                 refine: int = REFINE) -> list[Combination]:
    """The best-predicted combination of each of the ``refine`` best-predicted layouts of
    ``winner``'s structure that are not among ``measured``."""
    wanted, done = structure(winner), set(measured)
    out = []
    for combination in space.layouts(ALL_LAYOUTS):
        if len(out) == refine:
            break
        if combination.plan not in done and structure(combination.plan) == wanted:
            done.add(combination.plan)
            out.append(combination)
    return out


def _distinct(combinations: Sequence[Combination]) -> list[Combination]:
    seen: set[ProgramPlan] = set()
    out = []
    for c in combinations:
        if c.plan not in seen:
            seen.add(c.plan)
            out.append(c)
    return out
