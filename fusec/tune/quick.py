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
   striped, held) predicted within ``within`` times the first choice, of the
   ``FAMILIES`` best-predicted structures at most (a solver iteration's many calls
   combine into some 40 within ``within``, the eleven sequences' into 10 or fewer); the
   plan tuned for the nearest size where the space offers it, and the one the tuning
   cache holds (:func:`fusec.tune.search.quick_first_round` adds those two);
2. then, of the winner's *structure* (its cover and each kernel's class), the best
   of the ``refine`` next-best layouts not timed yet: its shape and serial
   iterations, which the model prices within a few per cent of each other; and the
   ``orders`` best-predicted other routine orders of its heaviest kernel (how many
   phases it loads its operands in), which layouts leave out.

About ten plans in all (the first round at most 1 + ``first`` + ``FAMILIES`` before those
two); the study behind the defaults is experiments/results/h200-prediction-quick.md.
"""

from __future__ import annotations

from typing import Iterable, Sequence

from ..cost.features import plan_class
from ..ir.plan import ProgramPlan
from ..space.combinations import ALL_LAYOUTS, Combination, Space

FIRST = 2  # the best-predicted layouts timed in the first round, beside the first choice
REFINE = 3  # the further layouts of the winner's structure timed in the second (register-bound twins as one)
ORDERS = 2  # and other variants (routine orders, register bounds) of the winner's heaviest kernel
# A family structure is timed only if its best is predicted within this factor of the first
# choice: in the H200's 140 drawn points the fastest plan measured was predicted at most 1.52x
# the first choice (95 % within 1.2x), while GEMVER has structures of four kernels at 2x
WITHIN = 1.6
# and at most this many family structures, best-predicted first: the eleven sequences' spaces
# offer 10 or fewer within WITHIN (GEMVER the most, at the H200's drawn sizes and on a grid of
# 300 to 20000), while a solver iteration's many calls combine into some 40 (CG), each one
# more plan to compile and time at first use
FAMILIES = 12


def families(plan: ProgramPlan) -> tuple[str, ...]:
    """Each kernel's class, in launch order: the first round times the best of each."""
    return tuple(plan_class(k) for k in plan.kernels)


def structure(plan: ProgramPlan) -> tuple:
    """The cover (the calls of each kernel) and each kernel's class: the second round
    times further layouts of the winner's."""
    return tuple((k.calls, plan_class(k)) for k in plan.kernels)


def first_round(space: Space, first: int = FIRST, also: Iterable[Combination] = (),
                within: float = WITHIN, family_structures: int = FAMILIES) -> list[Combination]:
    """The first choice and the best of the ``first`` best-predicted layouts, then the
    best-predicted of each family structure predicted within ``within`` times the first
    choice not among them (of the ``family_structures`` best-predicted structures, those
    of the plans before counted), then ``also`` (a nearby size's tuned plan, the cached
    one), each plan once, in that order."""
    every = space.layouts(ALL_LAYOUTS)  # best first
    # the first choice, then the best of the next layouts: the next combinations of the
    # ranking mostly differ from it in routine order only, which times alike
    out = _distinct(space.top(1) + every[:first])
    seen_families = set()
    for combination in every:
        if len(seen_families) == family_structures or combination.predicted > within * out[0].predicted:
            break
        key = families(combination.plan)
        if key not in seen_families:
            seen_families.add(key)
            out.append(combination)
    return _distinct(out + list(also))


def second_round(space: Space, winner: ProgramPlan, measured: Iterable[ProgramPlan],
                 refine: int = REFINE, orders: int = ORDERS) -> list[Combination]:
    """The best-predicted combination of each of the ``refine`` best-predicted layouts of
    ``winner``'s structure, then the ``orders`` best-predicted other routine orders of its
    heaviest kernel (:func:`routine_orders`), none among ``measured``."""
    wanted, done = structure(winner), set(measured)
    seen = {_bytes_moved(plan) for plan in done}
    out = []
    for combination in space.layouts(ALL_LAYOUTS):
        if len(out) == refine:
            break
        key = _bytes_moved(combination.plan)
        if key not in seen and structure(combination.plan) == wanted:
            seen.add(key)
            done.add(combination.plan)
            out.append(combination)
    return out + [c for c in routine_orders(space, winner) if c.plan not in done][:orders]


def routine_orders(space: Space, plan: ProgramPlan) -> list[Combination]:
    """``plan`` with its heaviest kernel in each other variant the space offers for it, best-
    predicted first: another routine order, or for a horizontal fusion another register
    bound, of the same calls, implementations, shapes and serial axes. Layouts leave the
    order out, yet a kernel loading its operands in two phases instead of one measured 8-20 %
    apart at small sizes (AXPYDOT fp64 n = 1418481, BiCGK fp64 3219 x 999:
    bench/results/h200-prediction-draw.md, seeds 815831556 and 1701336686). Empty where
    ``plan`` is none of the space's combinations."""
    for cover in space.covers:
        if len(cover) != len(plan.kernels):
            continue
        picked = [next((o for o in space.options[slot] if o[0] == kernel), None)
                  for slot, kernel in zip(cover, plan.kernels)]
        if None in picked:
            continue
        heaviest = max(range(len(cover)), key=lambda i: (picked[i][2], -i))
        layout = plan.kernels[heaviest].traffic()
        out = []
        for option in space.options[cover[heaviest]]:  # best-predicted first
            if option[0] != plan.kernels[heaviest] and option[0].traffic() == layout:
                chosen = picked[:heaviest] + [option] + picked[heaviest + 1:]
                times = tuple(t for _, _, t in chosen)
                out.append(Combination(ProgramPlan(tuple(p for p, _, _ in chosen)), sum(times), times))
        return out
    return []


def _bytes_moved(plan: ProgramPlan) -> tuple:
    """Each kernel's :meth:`~fusec.ir.plan.Plan.traffic`: a second round times one combination
    of each. Among layouts a register-bounded twin counts apart, yet times as a variant (BiCGK fp32 795 x 795:
    the fastest plan, a fourth layout, was left for two twins of those before it;
    bench/results/h200-prediction-quick-reruns.md)."""
    return tuple(k.traffic() for k in plan.kernels)


def rule() -> dict:
    """The quick tune's parameters, for a report to say which rule it measured."""
    return {"first": FIRST, "within": WITHIN, "families": FAMILIES, "refine": REFINE, "orders": ORDERS,
            "twins": "as one layout"}


def _distinct(combinations: Sequence[Combination]) -> list[Combination]:
    seen: set[ProgramPlan] = set()
    out = []
    for c in combinations:
        if c.plan not in seen:
            seen.add(c.plan)
            out.append(c)
    return out
