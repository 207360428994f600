"""The watchdog's polls: the finished events dropped in order, a poll's queries bounded by
the front of the queue however long it is, and an event past its deadline reported only
when it has not finished."""

from __future__ import annotations

import time

from fusec.distributed import watchdog

TIMEOUT = 60.0


class Event:
    def __init__(self, finished: bool = False):
        self.finished, self.queries = finished, 0

    def done(self) -> bool:
        self.queries += 1
        return self.finished


class Comm:
    rank, size, failed = 0, 2, None


def watched(events, timeouts=None) -> watchdog.Watchdog:
    dog = watchdog.Watchdog(polling=False)
    comm = Comm()
    for i, event in enumerate(events):
        dog.watch(event, f"collective {i}", comm, (timeouts or {}).get(i, TIMEOUT), "raise")
    return dog


def test_a_poll_queries_only_the_front_of_a_long_queue():
    events = [Event() for _ in range(10_000)]
    dog = watched(events)
    assert dog.poll(time.monotonic()) is None
    assert sum(event.queries for event in events) == 1
    assert len(dog.pending()) == 10_000


def test_finished_events_are_dropped_in_order_up_to_the_first_unfinished():
    events = [Event(True), Event(True), Event(False), Event(True)]
    dog = watched(events)
    assert dog.poll(time.monotonic()) is None
    assert [item.what for item in dog.pending()] == ["collective 2", "collective 3"]
    assert events[3].queries == 0  # finished behind an unfinished one: left for a later poll
    events[2].finished = True
    assert dog.poll(time.monotonic()) is None
    assert dog.pending() == []


def test_an_unfinished_event_past_its_deadline_is_reported_once():
    events = [Event(), Event(), Event()]
    dog = watched(events, timeouts={1: 1.0})  # the second's deadline comes first
    assert dog.poll(time.monotonic()) is None
    expired = dog.poll(time.monotonic() + 2.0)
    assert expired is not None and expired.what == "collective 1"
    assert [item.what for item in dog.pending()] == ["collective 0", "collective 2"]
    assert dog.poll(time.monotonic() + 2.0) is None  # the others' deadlines are a minute off


def test_a_finished_event_past_its_deadline_is_not_reported():
    events = [Event(), Event(True)]
    dog = watched(events, timeouts={1: 1.0})
    assert dog.poll(time.monotonic() + 2.0) is None
    assert [item.what for item in dog.pending()] == ["collective 0"]


def test_the_events_of_a_failed_communicator_count_as_finished():
    events = [Event(), Event()]
    dog = watched(events)
    dog.pending()[0].comm.failed = RuntimeError("rank 1 raised")
    assert dog.poll(time.monotonic() + 2 * TIMEOUT) is None
    assert dog.pending() == []
    assert sum(event.queries for event in events) == 0

