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

from .version import __version__
from .cache import atomic_write_bytes, cache_dir
from .errors import CompileError, FusecWarning, GPUUnavailableError

DEFAULT_ARCH = "sm_90"


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
    return shutil.which(os.environ.get("FUSEC_NVCC", "nvcc"))


@functools.lru_cache(maxsize=None)
def nvcc_version(path: str) -> str:
    return subprocess.run([path, "--version"], capture_output=True, text=True, check=True).stdout


def _options(arch: str, lineinfo: bool) -> list[str]:
    options = ["-cubin", f"-arch={arch}", "-Xptxas", "-v", "-O3", "-std=c++17"]
    if lineinfo or os.environ.get("FUSEC_LINEINFO"):
        options.append("-lineinfo")  # for compute-sanitizer reports with source lines
    return options


def compile_cubin(source: str, arch: str = DEFAULT_ARCH, lineinfo: bool = False,
                  use_cache: bool = True) -> Compiled:
    """Compile ``source`` to a cubin for ``arch`` (e.g. ``sm_90``)."""
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise CompileError(f"bad architecture {arch!r}: expected something like sm_90")
    nvcc = nvcc_path()
    if nvcc is None:
        raise GPUUnavailableError("nvcc is not on PATH (set FUSEC_NVCC to its location)")
    options = _options(arch, lineinfo)
    key = hashlib.sha256("\0".join([__version__, nvcc_version(nvcc), *options, source]).encode()).hexdigest()
    folder = cache_dir("nvcc")
    cubin_path, log_path = folder / f"{key}.cubin", folder / f"{key}.log"
    if use_cache and cubin_path.is_file() and log_path.is_file():
        try:
            log = log_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            log = ""
        resources = parse_resources(log)
        if resources:  # a log that names no kernel is damaged: compile again
            return Compiled(cubin_path.read_bytes(), arch, log, resources, cached=True)
        warnings.warn(FusecWarning(f"ignoring a damaged entry of the nvcc cache ({log_path.name})"))
    with tempfile.TemporaryDirectory(prefix="fusec-nvcc-") as tmp:
        cu, out = Path(tmp) / "program.cu", Path(tmp) / "program.cubin"
        cu.write_text(source, encoding="utf-8")
        proc = subprocess.run([nvcc, *options, "-o", str(out), str(cu)], capture_output=True, text=True)
        log = proc.stdout + proc.stderr
        if proc.returncode != 0:
            raise CompileError(f"nvcc failed on the generated code ({arch}):\n{log.strip()}")
        cubin = out.read_bytes()
    if use_cache:
        atomic_write_bytes(cubin_path, cubin)
        atomic_write_bytes(log_path, log.encode())
    return Compiled(cubin, arch, log, parse_resources(log))


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
