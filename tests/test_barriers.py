"""Barrier placement and shared-memory reuse (fusec/codegen/barriers.py) on crafted events.

Each test builds a short schedule by hand: events in the three sections of
Algorithm 1 (before the loop, its body, after it), each touching named
elements with a mapping. Barrier positions are indices into the event list.
"""

from __future__ import annotations

import pytest

from fusec.ir.barriers import LOOP, POST, PRE, Event, Mode, Region, Touch, allocate, lifetimes, place_barriers

R, W, U = Mode.READ, Mode.WRITE, Mode.UPDATE


def sh(element: str, mode: Mode, mapping: str = "a") -> Touch:
    """A shared-memory touch."""
    return Touch(element, mode, mapping, True)


def reg(element: str, mode: Mode, mapping: str = "a") -> Touch:
    """A register touch (private to a thread: never a hazard)."""
    return Touch(element, mode, mapping, False)


def ev(section: str, *touches: Touch, sync: bool = False) -> Event:
    return Event(section, touches, sync)


def apart(*elements: str, size: int = 4) -> dict[str, Region]:
    """Regions that do not overlap, so only rule 1 can place a barrier."""
    return {e: Region(i * size, size) for i, e in enumerate(elements)}


# -- rule 1: one element, two mappings ----------------------------------------------


def test_same_mapping_needs_no_barrier():
    events = [ev(PRE, sh("x", W, "a")), ev(PRE, sh("x", R, "a")),
              ev(LOOP, sh("x", R, "a")), ev(LOOP, sh("y", W, "a")), ev(LOOP, sh("y", R, "a")),
              ev(POST, sh("y", R, "a"))]
    assert place_barriers(events, apart("x", "y")) == set()


def test_read_after_write_with_another_mapping():
    events = [ev(PRE, sh("x", W, "a")), ev(PRE, sh("x", R, "b"))]
    assert place_barriers(events, apart("x")) == {1}


def test_write_after_read_with_another_mapping():
    events = [ev(PRE, sh("x", R, "a")), ev(PRE, sh("x", W, "b"))]
    assert place_barriers(events, apart("x")) == {1}


def test_update_counts_as_a_write():
    events = [ev(PRE, sh("x", U, "a")), ev(PRE, sh("x", R, "b"))]
    assert place_barriers(events, apart("x")) == {1}


def test_reads_with_different_mappings_do_not_race():
    events = [ev(PRE, sh("x", R, "a")), ev(PRE, sh("x", R, "b")), ev(PRE, sh("x", R, "c"))]
    assert place_barriers(events, apart("x")) == set()


def test_register_touches_never_need_a_barrier():
    events = [ev(PRE, reg("x", W, "a")), ev(PRE, reg("x", R, "b")), ev(PRE, reg("x", W, "c")),
              ev(LOOP, reg("x", U, "a")), ev(LOOP, reg("x", R, "b")), ev(POST, reg("x", R, "c"))]
    # Even with every region on top of the other: registers have none.
    regions = {"x": Region(0, 4)}
    assert place_barriers(events, regions) == set()


def test_a_register_touch_does_not_conflict_with_a_shared_one():
    events = [ev(PRE, sh("x", W, "a")), ev(PRE, reg("x", R, "b"))]
    assert place_barriers(events, apart("x")) == set()


def test_hazards_count_only_since_the_last_barrier():
    # The barrier before event 2 (for y) also orders x's write before its read.
    events = [ev(PRE, sh("x", W, "a")), ev(PRE, sh("y", W, "a")),
              ev(PRE, sh("y", R, "b")), ev(PRE, sh("x", R, "b"))]
    assert place_barriers(events, apart("x", "y")) == {2}


def test_one_barrier_per_conflicting_call():
    events = [ev(PRE, sh("x", W, "a")), ev(PRE, sh("x", R, "b")), ev(PRE, sh("x", W, "a"))]
    assert place_barriers(events, apart("x")) == {1, 2}


# -- rule 2: memory reused while still in use ----------------------------------------


def _reuse_events(y_reads_x: bool) -> list[Event]:
    """x lives over events 0-1; y over 2-3 (and x up to 3 too when y_reads_x)."""
    events = [ev(PRE, sh("x", W)), ev(PRE, sh("x", R)), ev(PRE, sh("y", W)), ev(PRE, sh("y", R))]
    if y_reads_x:
        events[3] = ev(PRE, sh("y", R), sh("x", R))
    return events


def test_writing_reused_memory_needs_a_barrier():
    events = _reuse_events(y_reads_x=False)
    regions, total = allocate({"x": 8, "y": 8}, events, align=4)
    assert regions["x"].overlaps(regions["y"])  # disjoint lifetimes: the same words
    assert total == 8
    # One mapping everywhere, so rule 1 never fires: the barrier is rule 2's.
    assert place_barriers(events, regions) == {2}


def test_no_barrier_when_elements_live_together_in_separate_memory():
    events = _reuse_events(y_reads_x=True)
    regions, total = allocate({"x": 8, "y": 8}, events, align=4)
    assert not regions["x"].overlaps(regions["y"])
    assert total == 16
    assert place_barriers(events, regions) == set()


def test_reading_an_overlapping_region_is_not_rule_2():
    regions = {"x": Region(0, 8), "y": Region(4, 8)}
    assert place_barriers([ev(PRE, sh("x", W)), ev(PRE, sh("y", R))], regions) == set()
    assert place_barriers([ev(PRE, sh("x", R)), ev(PRE, sh("y", W))], regions) == {1}


def test_adjacent_regions_do_not_overlap():
    assert not Region(0, 4).overlaps(Region(4, 4))
    assert Region(0, 5).overlaps(Region(4, 4))
    assert Region(4, 4).overlaps(Region(0, 5))
    assert Region(2, 1).overlaps(Region(0, 8))


# -- routines that synchronise inside -------------------------------------------------


def test_a_sync_routine_orders_what_came_before():
    events = [ev(PRE, sh("x", W, "a")), ev(PRE, sh("s", W), sync=True), ev(PRE, sh("x", R, "b"))]
    assert place_barriers(events, apart("x", "s")) == set()
    without = [events[0], ev(PRE, sh("s", W)), events[2]]
    assert place_barriers(without, apart("x", "s")) == {2}


def test_a_sync_routine_still_needs_a_barrier_for_its_own_touches():
    # Its inner barrier comes after its first accesses: those can race with earlier ones.
    events = [ev(PRE, sh("x", W, "a")), ev(PRE, sh("x", R, "b"), sync=True)]
    assert place_barriers(events, apart("x")) == {1}


# -- the loop: hazards wrap around --------------------------------------------------------


def test_hazard_from_the_prologue_into_the_body():
    events = [ev(PRE, sh("x", W, "a")), ev(LOOP, sh("x", R, "b"))]
    assert place_barriers(events, apart("x")) == {1}


def test_wrap_around_hazard_found_in_a_later_pass():
    # Body: x written with mapping b at its start, read with mapping a at its end.
    # The first pass over the body sees no hazard at event 0 (nothing came before);
    # the second iteration's write races with the first iteration's read.
    events = [ev(LOOP, sh("x", W, "b")),
              ev(LOOP, sh("z", W, "b")),
              ev(LOOP, sh("z", R, "a")),  # rule 1 on z: a barrier here, which clears x too
              ev(LOOP, sh("x", R, "a"))]
    assert place_barriers(events, apart("x", "z")) == {0, 2}


WRAP_ONLY = {
    # x written with mapping b at the body start and read with mapping a at its end;
    # a synchronising routine between them orders the two within one iteration.
    "sync-between": [ev(PRE, sh("y", W)),
                     ev(LOOP, sh("x", W, "b")),
                     ev(LOOP, sh("s", W), sync=True),
                     ev(LOOP, sh("x", R, "a"))],
    # One routine reads x with one mapping and writes it with another (it synchronises
    # inside); the next iteration's call races with this one's.
    "one-call": [ev(LOOP, sh("x", R, "a"), sh("x", W, "b"), sync=True)],
}


# (A regression test: place_barriers once stopped after a first pass that placed nothing.)
@pytest.mark.parametrize("case", sorted(WRAP_ONLY))
def test_wrap_around_hazard_that_the_first_pass_does_not_see(case):
    events = WRAP_ONLY[case]
    first = next(i for i, e in enumerate(events) if e.section == LOOP)
    assert first in place_barriers(events, apart("x", "y", "s"))


def test_no_wrap_around_barrier_for_one_mapping():
    events = [ev(LOOP, sh("x", W, "a")), ev(LOOP, sh("x", R, "a")), ev(LOOP, sh("x", U, "a"))]
    assert place_barriers(events, apart("x")) == set()


def test_wrap_around_with_reused_memory():
    # x and y live at different times of the body, so they share words (rule 2).
    events = [ev(LOOP, sh("x", W)), ev(LOOP, sh("x", R)), ev(LOOP, sh("y", W)), ev(LOOP, sh("y", R))]
    regions, _ = allocate({"x": 4, "y": 4}, events, align=4)
    assert regions["x"] == regions["y"]
    # Writing y while x's reads may still run needs one; so does writing x in the
    # next iteration while y's reads of the previous one may still run.
    assert place_barriers(events, regions) == {0, 2}


# -- after the loop -------------------------------------------------------------------


def test_post_section_sees_the_last_iteration():
    events = [ev(LOOP, sh("x", W, "a")), ev(POST, sh("x", R, "b"))]
    assert place_barriers(events, apart("x")) == {1}


def test_post_section_after_a_synchronising_body():
    events = [ev(LOOP, sh("x", W, "a")), ev(LOOP, sh("s", W), sync=True), ev(POST, sh("x", R, "b"))]
    assert place_barriers(events, apart("x", "s")) == set()


def test_post_section_sees_the_prologue_when_the_loop_may_not_run():
    events = [ev(PRE, sh("x", W, "a")), ev(LOOP, sh("s", W), sync=True), ev(POST, sh("x", R, "b"))]
    assert place_barriers(events, apart("x", "s")) == {2}


def test_positions_index_the_whole_event_list():
    events = [ev(PRE, reg("r", W)), ev(PRE, sh("x", W, "a")),
              ev(LOOP, reg("r", R)), ev(LOOP, sh("x", R, "a")),
              ev(POST, reg("r", R)), ev(POST, sh("x", W, "b"))]
    assert place_barriers(events, apart("x")) == {5}


def test_empty_schedule():
    assert place_barriers([], {}) == set()
    assert lifetimes([]) == {}
    assert allocate({}, [], align=4) == ({}, 0)


# -- lifetimes ---------------------------------------------------------------------------


def test_lifetimes_of_straight_line_code():
    events = [ev(PRE, sh("x", W)), ev(PRE, sh("x", R), sh("y", W)), ev(PRE, sh("y", R)),
              ev(PRE, reg("r", W))]
    assert lifetimes(events) == {"x": (0, 1), "y": (1, 2)}


def test_an_element_written_first_in_the_body_lives_only_there():
    events = [ev(PRE, sh("p", W)), ev(LOOP, sh("t", W)), ev(LOOP, sh("t", R)),
              ev(LOOP, sh("u", W)), ev(POST, sh("p", R))]
    live = lifetimes(events)
    assert live["t"] == (1, 2)
    assert live["p"] == (0, 4)


def test_an_element_touched_before_and_inside_the_loop_lives_over_the_whole_loop():
    events = [ev(PRE, sh("x", W)), ev(LOOP, sh("x", R)), ev(LOOP, sh("y", W)),
              ev(LOOP, sh("y", R)), ev(POST, sh("z", W))]
    assert lifetimes(events)["x"] == (0, 3)


def test_an_element_read_first_in_the_body_is_carried():
    events = [ev(PRE, sh("o", W)), ev(LOOP, sh("t", W)), ev(LOOP, sh("acc", R)),
              ev(LOOP, sh("acc", W)), ev(LOOP, sh("t", R))]
    assert lifetimes(events)["acc"] == (1, 4)


def test_an_accumulator_updated_in_the_body_is_carried():
    events = [ev(LOOP, sh("t", W)), ev(LOOP, sh("t", R)), ev(LOOP, sh("acc", U)),
              ev(POST, sh("acc", R))]
    assert lifetimes(events)["acc"] == (0, 3)


def test_an_element_touched_in_the_body_and_after_it_lives_over_the_whole_loop():
    events = [ev(LOOP, sh("a", W)), ev(LOOP, sh("a", R)), ev(LOOP, sh("y", W)),
              ev(POST, sh("y", R))]
    assert lifetimes(events)["y"] == (0, 3)


# -- allocation ------------------------------------------------------------------------


def test_disjoint_lifetimes_share_offsets():
    events = [ev(PRE, sh("a", W)), ev(PRE, sh("a", R)), ev(PRE, sh("b", W)), ev(PRE, sh("b", R)),
              ev(PRE, sh("c", W)), ev(PRE, sh("c", R))]
    regions, total = allocate({"a": 16, "b": 8, "c": 16}, events, align=4)
    assert regions == {"a": Region(0, 16), "b": Region(0, 8), "c": Region(0, 16)}
    assert total == 16


def test_overlapping_lifetimes_get_disjoint_memory():
    events = [ev(PRE, sh("a", W)), ev(PRE, sh("b", W)), ev(PRE, sh("c", W)),
              ev(PRE, sh("a", R), sh("b", R), sh("c", R))]
    sizes = {"a": 8, "b": 12, "c": 4}
    regions, total = allocate(sizes, events, align=4)
    for x in sizes:
        assert regions[x].size == sizes[x]
        for y in sizes:
            if x < y:
                assert not regions[x].overlaps(regions[y]), (x, y, regions)
    assert total == sum(sizes.values())


def test_a_loop_carried_element_does_not_share_with_body_temporaries():
    # acc is updated at the end of the body: it lives over the whole loop, so the
    # temporary t (written and read before it in the body) must not take its words.
    events = [ev(LOOP, sh("t", W)), ev(LOOP, sh("t", R)), ev(LOOP, sh("acc", U))]
    regions, total = allocate({"t": 4, "acc": 4}, events, align=4)
    assert not regions["t"].overlaps(regions["acc"])
    assert total == 8


def test_a_value_carried_from_the_prologue_does_not_share_with_body_temporaries():
    events = [ev(PRE, sh("x", W)), ev(LOOP, sh("t", W)), ev(LOOP, sh("t", R)),
              ev(LOOP, sh("x", R))]
    regions, _ = allocate({"x": 4, "t": 4}, events, align=4)
    assert not regions["x"].overlaps(regions["t"])
    # x is read at the start of the body here, and t written after: still carried.
    events = [ev(PRE, sh("x", W)), ev(LOOP, sh("x", R)), ev(LOOP, sh("t", W)),
              ev(LOOP, sh("t", R))]
    regions, _ = allocate({"x": 4, "t": 4}, events, align=4)
    assert not regions["x"].overlaps(regions["t"])


@pytest.mark.parametrize("align", [1, 2, 4, 8])
def test_offsets_respect_the_alignment(align):
    events = [ev(PRE, sh("a", W), sh("b", W), sh("c", W)), ev(PRE, sh("a", R), sh("b", R), sh("c", R))]
    sizes = {"a": 3, "b": 5, "c": 7}
    regions, total = allocate(sizes, events, align=align)
    for name, region in regions.items():
        assert region.offset % align == 0, (name, region)
        assert region.size == sizes[name]
    spans = sorted((r.offset, r.offset + r.size) for r in regions.values())
    assert all(hi <= lo for (_, hi), (lo, _) in zip(spans, spans[1:]))
    assert total == max(hi for _, hi in spans)


def test_reused_words_come_after_a_live_neighbour_aligned():
    # a (3 reals) lives throughout; b and c take turns next to it, at an aligned offset.
    events = [ev(PRE, sh("a", W)), ev(PRE, sh("b", W)), ev(PRE, sh("b", R)),
              ev(PRE, sh("c", W)), ev(PRE, sh("c", R), sh("a", R))]
    regions, total = allocate({"a": 3, "b": 4, "c": 2}, events, align=4)
    assert regions["a"] == Region(0, 3)
    assert regions["b"] == Region(4, 4)
    assert regions["c"] == Region(4, 2)
    assert total == 8
