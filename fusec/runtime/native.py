"""fusec's C extension for warm calls (``fastcall.c``), built on first use.

A warm program call in Python costs 10 to 16 µs of host time on the H100's
host (checks, dictionaries, PyCUDA's launch), more than the kernels take at
n = 4096. The extension does the same work in C (:mod:`.prepared` says what
that work is). It is compiled once per source and Python with the C compiler
(``$CC``, default ``cc``) against Python's headers, into
``$FUSEC_CACHE_DIR/native``, and imported from there; it opens the CUDA driver
itself with dlopen, so it builds where there is no GPU.

Where it cannot be built (no compiler or no headers) or ``FUSEC_FASTCALL=0``,
:func:`fastcall` returns None and calls take the Python path, which does the
same thing more slowly; :func:`unavailable` says why.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.machinery
import importlib.util
import os
import shlex
import subprocess
import sys
import sysconfig
import tempfile
from pathlib import Path

from ..cache import atomic_write_text, cache_dir

SOURCE = Path(__file__).with_name("fastcall.c")
MODULE = "fusec_fastcall"

_reason: str | None = None


def _target() -> Path:
    """Where the built extension goes: named by the source, the Python and the compiler."""
    digest = hashlib.sha256()
    digest.update(SOURCE.read_bytes())
    digest.update(sys.version.encode())
    digest.update(_compiler().encode())
    suffix = importlib.machinery.EXTENSION_SUFFIXES[0]
    return cache_dir("native") / f"{MODULE}-{digest.hexdigest()[:16]}{suffix}"


def _compiler() -> str:
    return os.environ.get("CC") or "cc"


def build(target: Path) -> None:
    """Compile the extension into ``target`` (written under a temporary name, then renamed)."""
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        raise OSError(f"Python's headers are not installed (no {include}/Python.h)")
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    os.close(fd)
    command = [*shlex.split(_compiler()), "-O2", "-shared", "-fPIC", "-std=c11", f"-I{include}",
               str(SOURCE), "-o", tmp, "-ldl"]
    try:
        done = subprocess.run(command, capture_output=True, text=True)
        if done.returncode:
            raise OSError(f"{shlex.join(command)} failed:\n{done.stderr.strip()}")
        digest = hashlib.sha256(Path(tmp).read_bytes()).hexdigest()
        atomic_write_text(_digest_path(target), digest + "\n")  # first: a reader checks the file against it
        os.replace(tmp, target)
    finally:
        Path(tmp).unlink(missing_ok=True)


def _digest_path(target: Path) -> Path:
    return target.with_name(target.name + ".sha256")


def _intact(target: Path) -> bool:
    """Whether ``target`` is the file its build wrote, by the sha256 recorded then:
    loading a truncated or changed shared object can kill the interpreter (SIGBUS,
    SIGILL), which no exception handler catches."""
    try:
        recorded = _digest_path(target).read_text(encoding="utf-8").strip()
        return recorded == hashlib.sha256(target.read_bytes()).hexdigest()
    except (OSError, UnicodeDecodeError):
        return False


@functools.lru_cache(maxsize=None)
def _load():
    global _reason
    if os.environ.get("FUSEC_FASTCALL", "1") == "0":
        _reason = "turned off by FUSEC_FASTCALL=0"
        return None
    try:
        target = _target()
        if target.exists() and not _intact(target):
            import warnings

            from ..errors import FusecWarning
            warnings.warn(FusecWarning(f"the cached C extension {target} does not match the sha256 recorded"
                                       " when it was built (damaged, or from an older fusec): building it again"))
            target.unlink()
        if not target.exists():
            build(target)
        spec = importlib.util.spec_from_file_location(MODULE, target)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    except (OSError, ImportError) as exc:
        _reason = f"the C extension could not be built or loaded: {exc}"
        return None
    from ..errors import DriverError
    module.set_error_class(DriverError)
    return module


def fastcall():
    """The extension module, or None (see :func:`unavailable`)."""
    return _load()


def unavailable() -> str | None:
    """Why :func:`fastcall` returns None; None when it does not."""
    _load()
    return _reason
