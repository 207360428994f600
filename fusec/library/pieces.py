"""The library's content as named pieces, each with its digest, and the pieces a tuned
plan or a timed routine is built from.

A tuned plan (or a routine's timing) goes stale when the code it was measured with
changes, not when a file it shares with other code does: a new implementation of sgemv
(its metadata, routines and mapping) leaves the plans that use sgemv's other
implementations, and the timings of sgemv's other routines, as they were. So the library
is split into pieces, each digested on its own:

- ``sgemv.cu: declaration``: a function's metadata less its implementation blocks (and
  which inputs only its finish reads, which every implementation's loads decide);
- ``sgemv.cu: implementation band``: one implementation block (its routines and options);
- ``band.cuh: band_load()``: a CUDA routine, every ``__device__`` definition of that name
  in the file (found as :func:`fusec.library.checks.routine_homes` finds routine homes);
  ``tile.cuh: macro ROWS_PER_THREAD``: a ``#define``, with its continuation lines;
- ``band.cuh: rest``: whatever of a CUDA file is neither (helpers that are no routine,
  structs, includes): conservative, a change there stales everything that uses the file;
- ``library.fusec: mapping band``: a thread mapping's name, storage and size (its comment
  reaches no code); ``symv.fusec: composite symv``: a composite's signature and calls;
- ``prelude.cuh``: a prelude file, whole (every kernel includes it).

Metadata pieces are digested from the loader's records (coordinates and comments left
out), CUDA pieces from their text less comments and blank lines (C reads a comment as one
space), so an edited comment stales nothing. What a plan uses (:func:`plan_pieces`): for each call,
the function's declaration, the implementation the plan chose, the mappings and routines
that implementation names, and in turn every routine and macro their code (comments left
out) names, with the rest of each file they come from and of the function's own file; the
prelude; and the composites its calls were expanded from. The order of the routine files,
and routines defined but not named, reach the compiled code of no kernel.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from types import MappingProxyType
from typing import Iterable, Mapping, Sequence

from ..cache import Recent
from .checks import ROUTINE_DEFINITION
from .model import Function, Library

REST = "rest"  # the piece of a CUDA file that is no routine or macro
_DEFINE = re.compile(r"^[ \t]*#[ \t]*define[ \t]+(\w+)", re.M)
# a comment or a string or character literal: skipped when matching braces, and comments
# left out of the text scanned for names
_SKIP = re.compile(r"//[^\n]*|/\*.*?(?:\*/|\Z)|\"(?:\\.|[^\"\\\n])*\"|'(?:\\.|[^'\\\n])*'", re.S)
_WORD = re.compile(r"\b\w+\b")


@dataclasses.dataclass(frozen=True)
class Pieces:
    """A library's pieces: each one's digest, and where each routine and macro name is defined."""

    digests: Mapping[str, str]  # piece name -> 16 hex digits
    code: Mapping[str, str] = dataclasses.field(repr=False)  # CUDA piece -> its text, comments left out
    defining: Mapping[str, tuple[str, ...]] = dataclasses.field(repr=False)  # name -> pieces defining it
    rests: Mapping[str, str] = dataclasses.field(repr=False)  # CUDA piece -> its file's rest piece


class Gone(LookupError):
    """A plan's function or implementation is no longer in the library."""


def digest_text(text: str) -> str:
    """16 hex digits of the text's sha256, as the loader digests files."""
    return hashlib.sha256(text.encode()).hexdigest()[:16]




# the pieces of libraries loaded (the loader gives the same object for the same bytes; the
# entry holds it, so its id is not another's)
_PIECES = Recent(16)


def library_pieces(library: Library) -> Pieces:
    """Every piece of ``library``, computed once per library."""
    kept = _PIECES.get(id(library))
    if kept is not None:
        return kept[1]
    digests: dict[str, str] = {}
    code: dict[str, str] = {}
    defining: dict[str, list[str]] = {}
    rests: dict[str, str] = {}

    def cuda(file: str, text: str) -> None:
        rest = f"{file}: {REST}"
        for piece, (names, body) in _split(text).items():
            full = f"{file}: {piece}"
            code[full] = _code(body)
            digests[full] = digest_text(code[full])
            rests[full] = rest
            for defined in names:
                defining.setdefault(defined, []).append(full)

    for source in library.prelude:  # whole: every kernel includes it
        file = library.file_name(source.path)
        code[file] = _code(source.text)
        digests[file] = digest_text(code[file])
        for defined in _defined(source.text):
            defining.setdefault(defined, []).append(file)
    for source in library.routine_files:
        cuda(library.file_name(source.path), source.text)
    for function in library.functions.values():
        file = library.file_name(function.file)
        cuda(file, function.source)
        digests[f"{file}: declaration"] = digest_text(_declaration(function))
        for impl in function.implementations:
            digests[f"{file}: implementation {impl.name}"] = digest_text(_canonical(impl))
    for mapping in library.mappings.values():
        digests[_mapping_piece(library, mapping.name)] = digest_text(
            f"{mapping.name} {mapping.storage} {mapping.size}")
    for composite in library.composites.values():
        digests[_composite_piece(library, composite.name)] = digest_text(_canonical(composite))
    pieces = Pieces(MappingProxyType(dict(sorted(digests.items()))), MappingProxyType(code),
                    MappingProxyType({k: tuple(v) for k, v in defining.items()}), MappingProxyType(rests))
    _PIECES.keep(id(library), (library, pieces))
    return pieces


def plan_pieces(library: Library, uses: Sequence[tuple[str, str]], composites: Iterable[str] = ()) -> dict[str, str]:
    """The pieces (with their digests, sorted by name) that kernels running ``uses`` (each
    call's function and the implementation its plan chose) are built from, and the pieces
    defining ``composites``. :class:`Gone` where a function, an implementation or a
    composite is not in ``library``."""
    pieces = library_pieces(library)
    found = {library.file_name(source.path) for source in library.prelude}
    roots: set[str] = set()
    words: set[str] = set()
    for function_name, implementation in uses:
        function = library.functions.get(function_name)
        if function is None:
            raise Gone(f"function {function_name} is gone")
        try:
            impl = function.implementation(implementation)
        except KeyError:
            raise Gone(f"implementation {implementation} of {function_name} is gone") from None
        file = library.file_name(function.file)
        found |= {f"{file}: declaration", f"{file}: implementation {implementation}"}
        roots.add(f"{file}: {REST}")
        words |= {function.finish.routine} if function.finish else set()
        mappings = set()
        for routine in (*impl.loads, impl.compute, impl.store):
            words |= {routine.name, *(routine.threads or ()), *_WORD.findall(routine.scratch or "")}
            mappings |= {access.mapping for access in routine.accesses}
        for mapping in mappings:
            if mapping in library.mappings:
                found.add(_mapping_piece(library, mapping))
                words |= set(_WORD.findall(library.mappings[mapping].size))
    for composite in composites:
        if composite not in library.composites:
            raise Gone(f"composite {composite} is gone")
        found.add(_composite_piece(library, composite))
    found |= _closure(pieces, words, roots | {p for p in found if p in pieces.code})
    return {piece: pieces.digests.get(piece, "absent") for piece in sorted(found)}


def routine_pieces(library: Library, routine: str) -> dict[str, str] | None:
    """The pieces a timing of ``routine`` measured: its definition and what its code names,
    with the rest of their files, and the prelude; how implementations call it (each
    distinct metadata line naming it: options and mappings) with those mappings' pieces;
    and the declaration of a function whose file defines it (as the file's own routines
    were judged before pieces). None where no piece defines it."""
    pieces = library_pieces(library)
    defined = set(pieces.defining.get(routine, ()))
    if not defined:
        return None
    found = {library.file_name(source.path) for source in library.prelude}
    found |= _closure(pieces, {routine}, defined)
    out = {}
    homes = {pieces.rests[p] for p in defined if p in pieces.rests}
    for function in library.functions.values():
        file = library.file_name(function.file)
        if f"{file}: {REST}" in homes:
            found.add(f"{file}: declaration")
        for impl in function.implementations:
            for line in (*impl.loads, impl.compute, impl.store):
                if line.name == routine:  # a line alike in two functions is one way to call it
                    used = digest_text(_canonical(line))
                    out[f"{line.kind} {routine} as {used}"] = used
                    found |= {_mapping_piece(library, access.mapping) for access in line.accesses
                              if access.mapping in library.mappings}
    out.update({piece: pieces.digests.get(piece, "absent") for piece in found})
    return dict(sorted(out.items()))


def routine_digest(library: Library, routine: str) -> str | None:
    """:func:`routine_pieces` digested: what a performance database records a routine's
    timings were measured with."""
    found = routine_pieces(library, routine)
    return None if found is None else digest_text("".join(f"{k}\0{v}\0" for k, v in found.items()))


def changes(recorded: Mapping[str, str], now: Mapping[str, str], library: Library) -> list[str]:
    """What differs between the pieces recorded and those used now, one phrase each."""
    known = library_pieces(library).digests
    out = []
    for piece in sorted(recorded.keys() | now.keys()):
        if piece not in now:
            out.append(f"{piece} is no longer used" if piece in known else f"{piece} is gone")
        elif piece not in recorded:
            out.append(f"{piece} is new")
        elif recorded[piece] != now[piece]:
            out.append(f"{piece} changed")
    return out


def _closure(pieces: Pieces, words: set[str], found: set[str]) -> set[str]:
    """``found`` and the pieces defining ``words`` or a name that any of their code names,
    with the rest of each of their files, until none is new."""
    found = set(found)
    texts = [pieces.code.get(p, "") for p in found]
    while True:
        for text in texts:
            words |= set(_WORD.findall(text))
        new = {p for word in words for p in pieces.defining.get(word, ())}
        new |= {pieces.rests[p] for p in new | found if p in pieces.rests}
        new -= found
        if not new:
            return found
        found |= new
        texts = [pieces.code.get(p, "") for p in new]


def _mapping_piece(library: Library, mapping: str) -> str:
    return f"{library.file_name(library.mappings[mapping].coord.file)}: mapping {mapping}"


def _composite_piece(library: Library, composite: str) -> str:
    return f"{library.file_name(library.composites[composite].file)}: composite {composite}"


def _declaration(function: Function) -> str:
    """A function's metadata less its implementations, and what they decide of it."""
    fields = {f.name: getattr(function, f.name) for f in dataclasses.fields(function)
              if f.compare and f.name not in ("implementations", "source", "file")}
    return _canonical(fields) + f" finish_only={function.finish_only!r}"


def _canonical(value) -> str:
    """A record as text, coordinates (fields that take no part in equality) left out."""
    if dataclasses.is_dataclass(value):
        return type(value).__name__ + _canonical({f.name: getattr(value, f.name)
                                                  for f in dataclasses.fields(value) if f.compare})
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_canonical(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (tuple, list)):
        return "(" + ",".join(_canonical(v) for v in value) + ")"
    return repr(str(value)) if hasattr(value, "value") else repr(value)


def _code(text: str) -> str:
    """What of CUDA text reaches the compiler: each comment one space (as C reads it), lines
    without trailing blanks, blank lines left out (but where a line continues a macro)."""
    text = _SKIP.sub(lambda m: " " if m.group().startswith("/") else m.group(), text)
    lines: list[str] = []
    for line in text.split("\n"):
        line = line.rstrip()
        if line or (lines and lines[-1].endswith("\\")):
            lines.append(line)
    return "\n".join(lines)


def _defined(text: str) -> set[str]:
    return {m.group(1) for m in ROUTINE_DEFINITION.finditer(text)} | set(_DEFINE.findall(text))


def _split(text: str) -> dict[str, tuple[set[str], str]]:
    """A CUDA file's pieces: ``NAME()`` for each routine (every definition of that name),
    ``macro NAME`` for each ``#define``, and ``rest``; each with the names it defines and
    its text."""
    mask = bytearray(len(text))
    for m in _SKIP.finditer(text):
        mask[m.start():m.end()] = b"\1" * (m.end() - m.start())

    def in_skipped(at: int) -> bool:
        return bool(mask[at])

    spans: list[tuple[int, int, str, str]] = []  # start, end, piece, the name defined
    last = 0  # where the routine before ends: a routine's piece begins after it
    for match in ROUTINE_DEFINITION.finditer(text):
        if in_skipped(match.start()):
            continue
        start = max(last, _leading(text, text.rfind("\n", 0, match.start()) + 1))
        last = max(last, _body_end(text, match.end(), in_skipped))
        spans.append((start, last, f"{match.group(1)}()", match.group(1)))
    for match in _DEFINE.finditer(text):
        if in_skipped(match.start()):
            continue
        end = match.end()
        while True:  # continuation lines
            newline = text.find("\n", end)
            if newline < 0:
                end = len(text)
                break
            end = newline + 1
            if not text[:newline].rstrip().endswith("\\"):
                break
        spans.append((text.rfind("\n", 0, match.start()) + 1, end, f"macro {match.group(1)}", match.group(1)))
    out: dict[str, tuple[set[str], str]] = {}
    taken = bytearray(len(text))
    for start, end, piece, defined in spans:
        names, body = out.get(piece, (set(), ""))
        out[piece] = (names | {defined}, body + ("\n" if body else "") + text[start:end])
        taken[start:end] = b"\1" * (end - start)
    out[REST] = (set(), "".join(c for c, t in zip(text, taken) if not t))
    return out


def _leading(text: str, start: int) -> int:
    """``start`` (a line's) moved up over the comment and ``template`` lines right above it."""
    while start > 0:
        above = text.rfind("\n", 0, start - 1) + 1
        line = text[above:start].strip()
        if not (line.startswith("//") or line.startswith("template")):
            return start
        start = above
    return start


def _body_end(text: str, at: int, in_skipped) -> int:
    """Where the definition whose parameter list opens before ``at`` ends: after its body's
    closing brace (or the ``;`` of a declaration) and the rest of that line when blank; the
    end of the text where the braces never close (conservative: the rest is its)."""
    depth, i, opened = 1, at, False
    while i < len(text):
        if in_skipped(i):
            i += 1
            continue
        c = text[i]
        if not opened:
            depth += c == "("
            depth -= c == ")"
            if depth == 0:
                opened = True
                depth = 0
        else:
            if c == ";" and depth == 0:
                break
            if c == "{":
                depth += 1
            elif c == "}":
                depth -= 1
                if depth == 0:
                    break
        i += 1
    else:
        return len(text)
    newline = text.find("\n", i)
    if newline < 0:
        return len(text)
    return newline + 1 if not text[i + 1:newline].strip() else i + 1
