"""The candidates of a quick tune: a few plans the model cannot tell apart, timed in two rounds.

The predictor's first choice is often more than 1.05x a wide tune's best at sizes nobody
tuned, and timing more of its first choices helps little
(experiments/results/h200-prediction-topk.md): where it errs, the fastest plan is of another kernel family
(a tile kernel where a band one was ranked first, or the reverse) or of the same
family at another shape, ranks down. So a quick tune times

1. the predictor's first choice and the best of the ``first`` best-predicted layouts
   (:meth:`~fusec.space.combinations.Space.layouts`); the best-predicted of each
   *family structure* (the class of each kernel: band, tile, vector, horizontal,
   striped, held, a fusion's with its parts') predicted within ``within`` times the first choice, of the
   ``FAMILIES`` best-predicted structures at most (a solver iteration's many calls
   combine into some 40 within ``within``, the eleven sequences' into 10 or fewer); the
   plan tuned for the nearest size where the space offers it, and the one the tuning
   cache holds (:func:`fusec.tune.search.quick_first_round` adds those two); and of
   each of these whose heaviest kernel fuses calls one after another, its best-predicted
   other routine order (:func:`with_other_orders`);
2. then, of the winner's *structure* (its cover and each kernel's class), and of each
   other structure timed within ``TIE`` of it (:func:`leaders`), the best of the
   ``refine`` next-best layouts not timed yet: its shape and serial iterations, which
   the model prices within a few per cent of each other; and the ``orders``
   best-predicted other routine orders of its heaviest kernel (how many phases it loads
   its operands in), which layouts leave out.

About ten plans in all for the eleven sequences (the first round at most 1 + ``first`` +
``FAMILIES`` before the nearby and cached plans, and as many other routine orders again at
most); the study behind the defaults is experiments/results/h200-prediction-quick.md.
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
# choice: the fastest plan measured in the H200's draws was never predicted further off, and
# structures priced past it are many (docs/tuning.md, "Quick tunes at first use")
WITHIN = 1.6
# and at most this many family structures, best-predicted first: the eleven sequences offer
# fewer, a solver iteration's many calls many more, each one more plan to compile and time
FAMILIES = 12
# Of each plan the first round times, its best-predicted other routine order too, where its
# heaviest kernel fuses calls in an order: the model prices the orders alike, and they can
# time far apart (experiments/results/h200-prediction-quick-reruns.md)
FIRST_ORDERS = 1
# The second round refines the structure of each first-round plan within this factor of the
# fastest, not only the fastest's: two structures apart by less are apart by noise
TIE = 1.02
LEADERS = 2  # at most: where many structures tie (small, launch-bound sizes) the second round stays short


def kernel_class(kernel) -> str:
    """A kernel's class; a fusion's with its parts' (``held(band,band)``): a held fusion of
    band parts and one of tile parts time apart by more than the model's error, so each is a
    structure of its own."""
    if not kernel.composite:
        return plan_class(kernel)
    return f"{plan_class(kernel)}({','.join(plan_class(p) for p in kernel.parts)})"


def families(plan: ProgramPlan) -> tuple[str, ...]:
    """Each kernel's class, in launch order: the first round times the best of each."""
    return tuple(kernel_class(k) for k in plan.kernels)


def structure(plan: ProgramPlan) -> tuple:
    """The cover (the calls of each kernel) and each kernel's class: the second round
    times further layouts of the winner's."""
    return tuple((k.calls, kernel_class(k)) for k in plan.kernels)


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


def with_other_orders(space: Space, combinations: Sequence[Combination],
                      orders: int = FIRST_ORDERS) -> list[Combination]:
    """``combinations``, then of each whose heaviest kernel fuses several calls one after
    another, the ``orders`` best-predicted other routine orders of that kernel
    (:func:`routine_orders`; a horizontal fusion's variants are register bounds, left to the
    second round), each plan once."""
    out = _distinct(combinations)
    done = {c.plan for c in out}
    for combination in list(out):
        variants = [c for c in routine_orders(space, combination.plan) if c.plan not in done]
        if variants and _varies_an_order(combination.plan, variants[0].plan):
            for variant in variants[:orders]:
                done.add(variant.plan)
                out.append(variant)
    return out


def _varies_an_order(plan: ProgramPlan, variant: ProgramPlan) -> bool:
    kernel = next(k for k, v in zip(plan.kernels, variant.kernels) if k != v)
    return len(kernel.calls) > 1 and plan_class(kernel) != "horizontal"


def leaders(timed: Iterable[tuple[float, ProgramPlan]], tie: float = TIE, most: int = LEADERS) -> list[ProgramPlan]:
    """The fastest of ``timed`` ((seconds, plan) pairs), then the fastest of each other
    structure timed within ``tie`` times it, ``most`` in all: the structures the second
    round refines."""
    ranked = sorted(timed, key=lambda t: t[0])
    out, seen = [], set()
    for seconds, plan in ranked:
        if seconds > tie * ranked[0][0] or len(out) == most:
            break
        if structure(plan) not in seen:
            seen.add(structure(plan))
            out.append(plan)
    return out


def second_round(space: Space, timed: Iterable[tuple[float, ProgramPlan]], measured: Iterable[ProgramPlan],
                 refine: int = REFINE, orders: int = ORDERS, tie: float = TIE,
                 most: int = LEADERS) -> list[Combination]:
    """For each of the first round's :func:`leaders` (of ``timed``), the best-predicted
    combination of each of the ``refine`` best-predicted layouts of its structure, then the
    ``orders`` best-predicted other routine orders of its heaviest kernel
    (:func:`routine_orders`), none among ``measured`` (every plan the first round timed)."""
    done = set(measured)
    seen = {_bytes_moved(plan) for plan in done}
    every, out = space.layouts(ALL_LAYOUTS), []  # best first; once for every leader
    for leader in leaders(timed, tie, most):
        wanted, layouts = structure(leader), []
        for combination in every:
            if len(layouts) == refine:
                break
            key = _bytes_moved(combination.plan)
            if key not in seen and structure(combination.plan) == wanted:
                seen.add(key)
                done.add(combination.plan)
                layouts.append(combination)
        variants = [c for c in routine_orders(space, leader) if c.plan not in done][:orders]
        done.update(c.plan for c in variants)
        out += layouts + variants
    return out


def routine_orders(space: Space, plan: ProgramPlan) -> list[Combination]:
    """``plan`` with its heaviest kernel in each other variant the space offers for it, best-
    predicted first: another routine order, or for a horizontal fusion another register
    bound, of the same calls, implementations, shapes and serial axes. Layouts leave the
    order out, yet the order of a kernel's operand loads can time far apart at small sizes
    (docs/tuning.md). Empty where
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
    experiments/results/h200-prediction-quick-reruns.md)."""
    return tuple(k.traffic() for k in plan.kernels)


def rule() -> dict:
    """The quick tune's parameters, for a report to say which rule it measured."""
    return {"first": FIRST, "within": WITHIN, "families": FAMILIES, "first_orders": FIRST_ORDERS,
            "refine": REFINE, "orders": ORDERS, "tie": TIE, "leaders": LEADERS,
            "twins": "as one layout", "fusions": "by their parts' classes"}


def _distinct(combinations: Sequence[Combination]) -> list[Combination]:
    seen: set[ProgramPlan] = set()
    out = []
    for c in combinations:
        if c.plan not in seen:
            seen.add(c.plan)
            out.append(c)
    return out
