"""Compiling generated CUDA with nvcc, with a cache and a resource report.

Compiled cubins are cached by a hash of the source, the options, the target
and ``nvcc --version`` (a new compiler never reuses old code), written
atomically. ``ptxas -v`` tells registers, shared memory and spills per kernel.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
import warnings
from pathlib import Path
from typing import Callable

from . import validate
from .cache import atomic_write_bytes, cache_dir
from .emit.lines import resolve
from .errors import CompileError, FusecWarning, GPUUnavailableError, ToolError
from .version import __version__

DEFAULT_ARCH = "sm_90"
OLDEST_ARCH = 80  # the generated code drops summed scratch lines with PTX discard.global.L2 (PTX ISA 7.4: sm_80)


@dataclasses.dataclass(frozen=True)
class Resources:
    """What ptxas reported for one kernel."""

    registers: int
    shared_bytes: int
    stack_bytes: int
    spill_stores: int
    spill_loads: int


@dataclasses.dataclass(frozen=True)
class Compiled:
    cubin: bytes = dataclasses.field(repr=False)
    arch: str
    log: str = dataclasses.field(repr=False)
    resources: dict[str, Resources] = dataclasses.field(compare=False)
    cached: bool = False


def nvcc_path() -> str | None:
    """nvcc on PATH, or $FUSEC_NVCC; None where neither is set and PATH has none.
    A $FUSEC_NVCC that names no executable is a :class:`ToolError`: the user asked for it."""
    configured = os.environ.get("FUSEC_NVCC")
    found = shutil.which(configured or "nvcc")
    if configured and found is None:
        raise ToolError(f"FUSEC_NVCC={configured!r} names no executable file (unset it to use nvcc on PATH)")
    return found


@functools.lru_cache(maxsize=None)
def nvcc_version(path: str) -> str:
    """``nvcc --version``; a :class:`ToolError` when it does not run or fails."""
    try:
        done = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"nvcc at {path} does not run: {exc}") from None
    if done.returncode != 0 or not done.stdout.strip():
        said = (done.stderr or done.stdout).strip()[:500]
        raise ToolError(f"nvcc at {path} does not work: '{path} --version' exited {done.returncode}"
                        + (f": {said}" if said else " and printed nothing") + " (check FUSEC_NVCC and PATH)")
    return done.stdout


def nvcc_options(arch: str, lineinfo: bool) -> list[str]:
    """The options fusec gives nvcc for a cubin of ``arch`` (``lineinfo`` or $FUSEC_LINEINFO=1: with
    -lineinfo); part of a compiled kernel's cache key."""
    options = ["-cubin", f"-arch={arch}", "-Xptxas", "-v", "-O3", "-std=c++17"]
    if lineinfo or validate.environment_flag("FUSEC_LINEINFO", False):
        options.append("-lineinfo")  # for compute-sanitizer reports with source lines
    return options


def check_arch(arch: str) -> None:
    """A :class:`CompileError` unless ``arch`` names an nvcc target such as ``sm_90``,
    one the generated code can be compiled for (ptxas's errors past it say less)."""
    match = re.fullmatch(r"sm_(\d+)[a-z]?", arch)
    if match is None:
        raise CompileError(f"bad architecture {arch!r}: expected something like sm_90")
    if int(match.group(1)) < OLDEST_ARCH:
        raise CompileError(f"architecture {arch!r}: fusec's kernels need sm_{OLDEST_ARCH} or later"
                           " (compute capability 8.0: A100, L40S, H100, ...)")


def compile_cubin(source: str, arch: str = DEFAULT_ARCH, lineinfo: bool = False,
                  use_cache: bool = True) -> Compiled:
    """Compile ``source`` to a cubin for ``arch`` (e.g. ``sm_90``)."""
    check_arch(arch)
    nvcc = nvcc_path()
    if nvcc is None:
        raise GPUUnavailableError("nvcc is not on PATH (set FUSEC_NVCC to its location)")
    options = nvcc_options(arch, lineinfo)
    key = hashlib.sha256("\0".join([__version__, nvcc_version(nvcc), *options, source]).encode()).hexdigest()
    try:
        folder = cache_dir("nvcc")
    except OSError as exc:  # a cache that cannot be kept is a miss, never a failed compile
        folder = cache_dir("nvcc", create=False)
        if use_cache:
            _warn_once(f"the nvcc cache {folder} cannot be made ({exc.strerror or exc}: {exc.filename};"
                       " $FUSEC_CACHE_DIR names its root): compiling without it")
        use_cache = False
    cubin_path, log_path = folder / f"{key}.cubin", folder / f"{key}.log"
    if use_cache:
        hit = _cached(cubin_path, log_path, arch)
        if hit is not None:
            return hit
    with tempfile.TemporaryDirectory(prefix="fusec-nvcc-") as tmp:
        cu, out = Path(tmp) / "program.cu", Path(tmp) / "program.cubin"
        # the markers after library routines become #line directives back into this file
        # (one line for one: the numbers are those of the source as given)
        cu.write_text(resolve(source, str(cu)), encoding="utf-8")
        try:
            proc = subprocess.run([nvcc, *options, "-o", str(out), str(cu)], capture_output=True, text=True)
        except OSError as exc:
            raise ToolError(f"nvcc at {nvcc} does not run: {exc}") from None
        log = proc.stdout + proc.stderr
        if proc.returncode != 0 or not out.is_file():
            raise CompileError(_failure(source, key, log, str(cu), arch))
        cubin = out.read_bytes()
    if use_cache:
        # the cubin's sha256 goes first into its log: a cubin truncated or changed since
        # does not match it, and is compiled again instead of loaded
        try:
            atomic_write_bytes(cubin_path, cubin)
            atomic_write_bytes(log_path, f"{_DIGEST}{hashlib.sha256(cubin).hexdigest()}\n{log}".encode())
        except OSError as exc:  # a read-only cache: the cubin is here all the same
            warnings.warn(FusecWarning(f"could not write the nvcc cache ({exc.strerror or exc}: {exc.filename})"))
    return Compiled(cubin, arch, log, parse_resources(log))


_DIGEST = "fusec cubin sha256 "


@functools.lru_cache(maxsize=None)
def _warn_once(message: str) -> None:
    """One warning per process for the same trouble (a program compiles several times)."""
    warnings.warn(FusecWarning(message), stacklevel=3)


def _cached(cubin_path: Path, log_path: Path, arch: str) -> Compiled | None:
    """The cache's entry, if whole: its log names kernels and records the sha256 of the
    cubin beside it. A damaged one is a miss with a warning (compiled again)."""
    if not (cubin_path.is_file() and log_path.is_file()):
        return None
    try:
        recorded, _, log = log_path.read_text(encoding="utf-8").partition("\n")
        cubin = cubin_path.read_bytes()
    except (OSError, UnicodeDecodeError):
        recorded, log, cubin = "", "", b""
    resources = parse_resources(log)
    if recorded == _DIGEST + hashlib.sha256(cubin).hexdigest() and resources:
        return Compiled(cubin, arch, log, resources, cached=True)
    warnings.warn(FusecWarning(f"ignoring a damaged entry of the nvcc cache ({cubin_path}): its cubin"
                               " does not match the sha256 its log records, or the log names no kernel;"
                               " compiling again"))
    return None


def _failure(source: str, key: str, log: str, compiled: str, arch: str) -> str:
    """nvcc's error, with where to read the code it failed on: the source is kept in the
    cache, and its errors cite it (lines as in NAME.DTYPE.cu, which 'fusec compile -o'
    writes: the same text), or, in a library routine, the library's file and line."""
    kept = cache_dir("nvcc-failed") / f"{key}.cu"  # beside the cache, never read back
    try:
        atomic_write_bytes(kept, source.encode())
        where = f"; the code it compiled is kept in {kept}"
        log = log.replace(compiled, str(kept))  # the temporary file is gone
    except OSError:
        where = ""
    return f"nvcc failed on the generated code ({arch}){where}:\n{log.strip()}"


_ENTRY = re.compile(r"Compiling entry function '(\w+)'")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers(?:.*?, (\d+) bytes smem)?")


def parse_resources(log: str) -> dict[str, Resources]:
    """Registers, shared memory and spills per entry function, from ``ptxas -v``."""
    out: dict[str, Resources] = {}
    current, frame = None, (0, 0, 0)
    for line in log.splitlines():
        if m := _ENTRY.search(line):
            current, frame = m.group(1), (0, 0, 0)
        elif (m := _FRAME.search(line)) and current:
            frame = tuple(int(x) for x in m.groups())
        elif (m := _USED.search(line)) and current:
            out[current] = Resources(int(m.group(1)), int(m.group(2) or 0), *frame)
            current = None
    return out


def compile_many(sources: list[str], arch: str = DEFAULT_ARCH, workers: int | None = None,
                 lineinfo: bool = False, *, return_errors: bool = False,
                 done: Callable[[int], None] | None = None) -> list[Compiled | CompileError]:
    """Compile several programs at once (nvcc runs in parallel processes).

    With ``return_errors`` a source nvcc rejects gives its :class:`CompileError`
    in its place instead of raising (a tuner scores it and goes on); anything
    else (no nvcc, a bad ``arch``) still raises. ``done(i)`` is called, on the
    caller's thread, as source ``i`` finishes.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed
    workers = workers or min(32, os.cpu_count() or 1)
    results: list[Compiled | CompileError | None] = [None] * len(sources)
    with ThreadPoolExecutor(max_workers=workers) as pool:
        futures = {pool.submit(compile_cubin, s, arch, lineinfo): i for i, s in enumerate(sources)}
        try:
            for future in as_completed(futures):
                i = futures[future]
                try:
                    results[i] = future.result()
                except CompileError as exc:
                    if not return_errors:
                        raise
                    results[i] = exc
                if done is not None:
                    done(i)
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    return results
