"""Progress of a long loop of known length, on stderr.

On a terminal: one line redrawn in place (``\\r``) with a bar, count/total,
percent, elapsed time and a short label. Elsewhere (a log file, CI): a plain
line each time another tenth is done, and the last one, so logs stay short.

    with Progress(len(jobs), "compiling") as progress:
        for job in jobs:
            run(job)
            progress.advance(label=job.name)
"""

from __future__ import annotations

import shutil
import sys
import time

BAR = 24  # characters of the bar
REDRAW = 0.05  # seconds between redraws of a terminal line (the last is always drawn)


class Progress:
    def __init__(self, total: int, title: str = "", *, stream=None, enabled: bool = True,
                 clock=time.monotonic):
        self.total = max(int(total), 0)
        self.title = title
        self.stream = sys.stderr if stream is None else stream
        self.enabled = enabled and self.total > 0
        self.tty = self.enabled and _isatty(self.stream)
        self.done = 0
        self._clock = clock
        self._start = clock()
        self._drawn_at = -1.0
        self._width = 0  # characters of the terminal line now shown
        self._tenths = 0  # tenths already reported on a plain stream

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def advance(self, count: int = 1, label: str = "") -> None:
        """``count`` more items done; ``label`` says which (or what comes next)."""
        self.done = min(self.done + count, self.total)
        if not self.enabled:
            return
        if self.tty:
            now = self._clock()
            if self.done == self.total or now - self._drawn_at >= REDRAW:
                self._draw(self._line(label, bar=True))
                self._drawn_at = now
            return
        tenths = self.done * 10 // self.total
        if tenths > self._tenths or self.done == self.total:
            self._tenths = tenths
            self.stream.write(self._line(label, bar=False) + "\n")
            self.stream.flush()

    def note(self, text: str) -> None:
        """A line of its own (a warning, a result), printed above the bar."""
        if not self.enabled:
            return
        if self.tty and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self._width = 0
        self.stream.write(text + "\n")
        self.stream.flush()
        self._drawn_at = -1.0  # redraw the bar on the next advance

    def close(self) -> None:
        """End the terminal line (the bar stays on screen, complete or not)."""
        if self.tty and self._width:
            self.stream.write("\n")
            self.stream.flush()
            self._width = 0

    def _line(self, label: str, bar: bool) -> str:
        percent = self.done * 100 // self.total
        seconds = int(self._clock() - self._start)
        parts = [self.title] if self.title else []
        if bar:
            filled = self.done * BAR // self.total
            parts.append("[" + "#" * filled + "." * (BAR - filled) + "]")
        parts += [f"{self.done}/{self.total}", f"{percent:3d}%", f"{seconds // 60}:{seconds % 60:02d}"]
        if label:
            parts.append(label)
        return "  ".join(parts)

    def _draw(self, line: str) -> None:
        columns = shutil.get_terminal_size((80, 24)).columns
        line = line[:max(columns - 1, 10)]
        self.stream.write("\r" + line + " " * max(self._width - len(line), 0))
        self.stream.flush()
        self._width = len(line)


def _isatty(stream) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed file
        return False
