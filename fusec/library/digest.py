"""The library files a script's kernels are built from, and their digest.

The generated program's header names the digest of the files its kernels include
(:func:`library_digest`): the index (``library.fusec``), the prelude, the files of the
functions the script calls, the routine files defining what those functions name
(their routines, finish routines and macros, and in turn what those files name, as
:func:`fusec.emit.kernel.library_sources` includes them), the files declaring the
thread mappings their implementations use, and the parts defining the composites the
script's calls were expanded from. A library that only gains files the script does
not read generates the same source. Tuning entries of format 1 were keyed on this
digest; a plan is now judged by the finer pieces of :mod:`fusec.library.pieces`,
which leave out the code of a file that the plan's kernels do not run. The files'
digests are the loader's (:attr:`~fusec.library.model.Library.files`); nothing is read
again.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Iterable, Mapping

from ..cache import Recent
from .loader import LIBRARY_FILE
from .model import Function, Library

# Files read, by library object (the loader gives the same one for the same bytes; the entry
# holds it, so its id is not another's) and the functions called: every tuning lookup keys
# on them, and finding them scans the routine files.
_READ = Recent(64)


def files_read(library: Library, functions: Iterable[str], composites: Iterable[str] = ()) -> dict[str, str]:
    """The files (named relative to the library's folder, as ``Library.files`` names them)
    that kernels of ``functions`` (names of the library's functions) are built from, and
    the files defining ``composites`` (names of its composites), each with its digest,
    sorted by name."""
    names = tuple(sorted(set(functions)))
    defined = tuple(sorted(set(composites)))
    key = (id(library), names, defined)
    kept = _READ.get(key)
    if kept is not None:
        found = kept[1]
    else:
        called = [library.functions[name] for name in names]
        paths = {str(Path(library.path) / LIBRARY_FILE), *(source.path for source in library.prelude),
                 *(function.file for function in called), *(library.composites[name].file for name in defined)}
        paths |= {library.mappings[name].coord.file for name in _mappings(called) if name in library.mappings}
        paths |= _routine_files(library, called)
        found = tuple((name, file_digest(library, name)) for name in sorted(library.file_name(p) for p in paths))
        _READ.keep(key, (library, found))
    return dict(found)


def file_digest(library: Library, name: str) -> str:
    """The digest of one of ``library``'s files. A file the loader read but did not hash
    (none is) stands for the whole library: any change to it then stales the plans
    reading it, never the other way round."""
    return library.files.get(name) or f"library {library.content_hash}"


def digest(files: Mapping[str, str]) -> str:
    """The digest of files and their digests (:func:`files_read`): 16 hex digits, like
    the library's content hash."""
    text = "".join(f"{name}\0{files[name]}\0" for name in sorted(files))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def dag_files(library: Library, dag) -> dict[str, str]:
    """:func:`files_read` of the functions ``dag`` (a checked script) calls and the
    composites its calls were expanded from."""
    return files_read(library, (call.function for call in dag.calls),
                      (name for call in dag.calls for name in call.via))


def library_digest(library: Library, dag) -> str:
    """The digest of the library files the kernels of ``dag`` (a checked script) are built from."""
    return digest(dag_files(library, dag))




def _mappings(functions: list[Function]) -> set[str]:
    return {access.mapping for function in functions for impl in function.implementations
            for routine in (*impl.loads, impl.compute, impl.store) for access in routine.accesses}


def _routine_files(library: Library, functions: list[Function]) -> set[str]:
    """The routine files defining a routine or macro that the functions name (in their
    metadata or their CUDA), and those that the files found so far name, until none is new."""
    defines = {name: source.path for source in library.routine_files
               for name in re.findall(r"^\s*#\s*define\s+(\w+)", source.text, re.M)}
    homes = {**library.routine_homes, **defines}
    routines = {source.path: source.text for source in library.routine_files}
    words = set()
    for function in functions:
        words |= {function.finish.routine} if function.finish else set()
        for impl in function.implementations:
            for routine in (*impl.loads, impl.compute, impl.store):
                words |= {routine.name, *(routine.threads or ()), *re.findall(r"\w+", routine.scratch or "")}
    for name in _mappings(functions):
        if name in library.mappings:
            words |= set(re.findall(r"\w+", library.mappings[name].size))
    texts = [function.source for function in functions]
    found: set[str] = set()
    while True:
        for text in texts:
            words |= set(re.findall(r"\b\w+\b", text))
        new = {homes[word] for word in words if word in homes and homes[word] in routines} - found
        if not new:
            return found
        found |= new
        texts = [routines[path] for path in new]
