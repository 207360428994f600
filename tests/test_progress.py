"""The progress reporter (fusec/progress.py): a redrawn line on a terminal, a line per tenth elsewhere."""

from __future__ import annotations

import io

from fusec.progress import Progress


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_a_plain_stream_gets_a_line_per_tenth_and_the_last():
    stream, clock = io.StringIO(), Clock()
    with Progress(35, "measuring", stream=stream, clock=clock) as progress:
        for i in range(35):
            clock.now += 2.0
            progress.advance(label=f"item {i}")
    lines = stream.getvalue().splitlines()
    assert "\r" not in stream.getvalue()
    assert len(lines) == 10  # one per tenth: 4/35 is the first past 10%, 35/35 the last
    assert lines[0].startswith("measuring  4/35   11%  0:08  item 3")
    assert lines[-1] == "measuring  35/35  100%  1:10  item 34"


def test_a_short_loop_reports_each_item_and_notes_go_between():
    stream = io.StringIO()
    progress = Progress(3, "compiling", stream=stream)
    progress.advance()
    progress.note("rank 2 wrong: q: the output contains NaN")
    progress.advance(2)
    progress.close()
    lines = stream.getvalue().splitlines()
    assert [line.split("  ")[1] for line in (lines[0], lines[2])] == ["1/3", "3/3"]
    assert lines[1] == "rank 2 wrong: q: the output contains NaN"


def test_a_terminal_gets_one_line_redrawn_and_ended():
    stream, clock = Terminal(), Clock()
    progress = Progress(4, "compiling", stream=stream, clock=clock)
    for i in range(4):
        clock.now += 1.0  # past the redraw interval each time
        progress.advance(label=f"rank {i + 1}")
    progress.close()
    text = stream.getvalue()
    assert text.count("\r") == 4 and text.endswith("\n") and text.count("\n") == 1
    last = text.split("\r")[-1]
    assert last.startswith("compiling  [" + "#" * 24 + "]  4/4  100%  0:04  rank 4")


def test_a_terminal_line_is_cleared_for_a_note_and_padded_when_shorter():
    stream, clock = Terminal(), Clock()
    progress = Progress(2, stream=stream, clock=clock)
    progress.advance(label="a long label that takes room")
    progress.note("a note")
    progress.advance(label="x")
    progress.close()
    text = stream.getvalue()
    assert "\ra note\n" in text  # the bar was blanked first
    assert text.rstrip("\n").split("\r")[-1].rstrip().endswith("2/2  100%  0:00  x")


def test_disabled_or_empty_prints_nothing():
    stream = Terminal()
    for progress in (Progress(5, stream=stream, enabled=False), Progress(0, stream=stream)):
        progress.advance()
        progress.note("hidden")
        progress.close()
    assert stream.getvalue() == ""
