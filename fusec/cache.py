"""Where fusec keeps what it computed once, and how it writes it safely.

Everything under ``$FUSEC_CACHE_DIR`` (default ``~/.cache/fusec``); :class:`Recent`
keeps frozen results in memory. Files are
written to a temporary file in the same directory and renamed over the
target, so a reader never sees half a file and two writers never interleave.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import tempfile
import threading
from pathlib import Path
from typing import Any, Hashable


def cache_dir(*parts: str, create: bool = True) -> Path:
    """The folder ``parts`` under the cache root, made unless ``create`` is false
    (a reader need not make what it only looks into)."""
    root = Path(os.environ.get("FUSEC_CACHE_DIR") or Path.home() / ".cache" / "fusec")
    folder = root.joinpath(*parts)
    if create:
        folder.mkdir(parents=True, exist_ok=True)
    return folder


def _read_umask() -> int:
    mask = os.umask(0)  # the only way to read it; done once, at import, before any thread
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def atomic_write_bytes(path: Path, data: bytes) -> None:
    path = Path(path)
    if path.is_dir():  # else os.replace's error names the temporary file, not the folder in the way
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:  # owns fd from here: closed whatever follows
            os.fchmod(f.fileno(), 0o666 & ~_UMASK)  # mkstemp makes 0600; a cache or database is shared
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def locked(path: Path):
    """An exclusive lock on ``<path>.lock`` for the block (its folder made): read, merge and
    write ``path`` inside it, and two processes doing so at once each keep the other's part."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # released when the file closes
        yield


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


class Recent:
    """At most ``most`` values in memory, the least recently used dropped first; safe to
    share between threads (spaces are built in threads too). For frozen values only:
    every taker gets the same object."""

    def __init__(self, most: int):
        self.most = most
        self._items: dict[Hashable, Any] = {}  # oldest first
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._items)

    def get(self, key: Hashable) -> Any:
        """The value kept for ``key`` (now the most recently used), or None."""
        with self._lock:
            value = self._items.pop(key, None)
            if value is not None:
                self._items[key] = value
            return value

    def keep(self, key: Hashable, value: Any) -> None:
        with self._lock:
            self._items.pop(key, None)
            while len(self._items) >= self.most:
                del self._items[next(iter(self._items))]
            self._items[key] = value
