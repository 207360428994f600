"""Reads a library directory into frozen :mod:`fusec.library.model` records.

The format is documented for users in ``docs/library-format.md``. A library is a
directory with ``library.fusec`` (its name, shared CUDA files and the
thread-to-data mappings) and one ``.cu`` file per function whose leading
``/*@fusec ... @*/`` comment holds the function's metadata. Metadata is
line-oriented: a keyword, then fields; ``#`` starts a comment. Every problem
is reported as a :class:`LibraryError` at its file, line and column; what a parsed
function must satisfy is checked in :mod:`fusec.library.checks`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import os
import re
from pathlib import Path
from types import MappingProxyType

from ..cache import Recent
from ..errors import Coord, LibraryFormatError, LibraryValidationError, coord_at, source_line
from ..ir import expr
from ..ir import geometry as geo
from ..validate import printable, shown
from .checks import check_function, forbid_syncthreads, routine_homes
from .composite import check_composites
from .model import (
    IDENT,
    TRIANGLES,
    Access,
    Composite,
    CompositeCall,
    Finish,
    Function,
    Geometry,
    Hof,
    Implementation,
    Kind,
    Library,
    Param,
    Routine,
    RoutineKind,
    SourceFile,
    Storage,
    ThreadMapping,
)

LIBRARY_FILE = "library.fusec"
PART_SUFFIX = ".fusec"  # other files of the folder ending so are parts: mappings and routine files
PART_KEYWORDS = ("mapping", "routines", "composite", "square", "call")
COMPOSITE_KEYWORDS = ("square", "call")  # lines that belong to the composite above them
META_OPEN = "/*@fusec"
META_CLOSE = "@*/"


@dataclasses.dataclass(frozen=True)
class Line:
    """One metadata line: its keyword and the rest, with positions."""

    file: str
    number: int
    text: str  # the full source line, for error carets
    keyword: str
    keyword_column: int  # 1-based
    rest: str
    rest_column: int  # 1-based column where ``rest`` starts

    def coord(self, offset_in_rest: int = 0) -> Coord:
        return Coord(self.file, self.number, self.rest_column + offset_in_rest)

    @property
    def keyword_coord(self) -> Coord:
        return Coord(self.file, self.number, self.keyword_column)

    def error(self, message: str, offset: int = 0, kind=LibraryFormatError):
        return kind(message, self.coord(offset), self.text)


def _strip_comment(text: str) -> str:
    return text.split("#", 1)[0].rstrip()


def _lines(file: str, text: str, first_line: int = 1, first_column: int = 1,
           full_first_line: str | None = None) -> list[Line]:
    """Metadata lines of ``text``; its first line starts at ``first_column`` of the file."""
    out = []
    for number, raw in enumerate(text.split("\n"), start=first_line):
        shift = first_column - 1 if number == first_line else 0
        source = full_first_line if number == first_line and full_first_line is not None else raw
        match = re.match(r"(\s*)(\S+)(\s*)(.*)$", _strip_comment(raw))
        if not match:
            continue
        lead, keyword, gap, rest = match.groups()
        keyword_column = shift + len(lead) + 1
        out.append(Line(file, number, source, keyword, keyword_column, rest,
                        keyword_column + len(keyword) + len(gap)))
    return out


def _words(line: Line) -> list[tuple[str, int]]:
    """Whitespace-separated words of the rest of a line, with their offsets."""
    return [(m.group(), m.start()) for m in re.finditer(r"\S+", line.rest)]


# --------------------------------------------------------------------------- library.fusec

def _read(path: Path) -> str:
    return _decode(path, _read_bytes(path))


def _read_bytes(path: Path) -> bytes:
    try:
        if path.exists() and not path.is_file():  # a FIFO would block for ever, a device never end
            raise LibraryFormatError(f"{path} is not a regular file")
        return path.read_bytes()
    except OSError as exc:
        raise LibraryFormatError(f"cannot read {path}: {exc.strerror}") from exc


BOM = b"\xef\xbb\xbf"


def _decode(path: Path, data: bytes) -> str:
    """The text of a library file: UTF-8, a byte-order mark some editors write first left out
    (as scripts' is: no keyword or column sees it)."""
    if data.startswith(BOM):
        data = data[len(BOM):]
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:  # located like any other error, not a traceback
        before = data[:exc.start].decode("utf-8")
        line = before.count("\n") + 1
        column = len(before) - (before.rfind("\n") + 1) + 1
        source = data.split(b"\n")[line - 1].decode("utf-8", errors="replace")
        raise LibraryFormatError("library files must be UTF-8: this byte is not",
                                 Coord(str(path), line, column), source) from None


# Libraries loaded, by folder and the sha256 of every file read: a Library is frozen, so the
# same bytes give the same one, and parsing and validating them again (most of a load) is
# skipped; a file changed in any byte is a new key. The few folders loaded last are kept.
_LOADED = Recent(32)


def load_library(directory: str | os.PathLike) -> Library:
    """Load and validate the library in ``directory``."""
    root = Path(directory)
    index = root / LIBRARY_FILE
    if not printable(str(root)):
        raise LibraryFormatError(f"library directory {shown(str(root))}: its path is not UTF-8 printable text"
                                 " (the generated code names it): rename it")
    if not root.is_dir():
        raise LibraryFormatError(f"library directory {str(root)!r} "
                                 + ("is a file, not a folder" if root.exists() else "does not exist"))
    if not index.is_file():
        raise LibraryFormatError(f"{str(root)!r} is not a fusec library: it has no {LIBRARY_FILE}")
    index_data = _read_bytes(index)
    header = _parse_index(str(index), _decode(index, index_data), root)
    data = {index: index_data}
    part_paths = sorted(p for p in root.glob("*" + PART_SUFFIX) if p.name != LIBRARY_FILE)
    for part in part_paths:  # in sorted order, each adding to what the index and earlier parts declared
        data[part] = _read_bytes(part)
        _parse_part(str(part), _decode(part, data[part]), root, header)
    function_paths = sorted(p for p in root.glob("*.cu"))
    for path in (*header["routines"], *header["prelude"], *function_paths):
        data[path] = data.get(path) or _read_bytes(path)

    digest = hashlib.sha256()
    files: dict[str, str] = {}
    for path in sorted([index, *part_paths, *header["routines"], *header["prelude"], *function_paths]):
        relative = str(path.relative_to(root))
        digest.update(relative.encode() + b"\0" + data[path] + b"\0")
        files[relative] = hashlib.sha256(data[path]).hexdigest()[:16]
    key = (str(root), digest.hexdigest())
    library = _LOADED.get(key)
    if library is None:
        library = _parse_library(root, header, data, function_paths, key[1][:16], files)
        _LOADED.keep(key, library)
    return library


def _parse_library(root: Path, header: dict, data: dict[Path, bytes], function_paths: list[Path],
                   content_hash: str, files: dict[str, str]) -> Library:
    """Parse and validate the library's files (``data``: each one's bytes)."""
    def text(path: Path) -> str:
        return _decode(path, data[path])

    routine_files = tuple(SourceFile(str(p), text(p)) for p in header["routines"])
    prelude = tuple(SourceFile(str(p), text(p)) for p in header["prelude"])
    mappings = header["mappings"]

    functions: dict[str, Function] = {}
    where: dict[str, dict[str, Coord]] = {}
    for path in function_paths:
        parsed = _parse_function(str(path), text(path))
        if parsed is None:
            continue
        function, where[str(path)] = parsed
        if function.name in functions:
            raise LibraryValidationError(
                f"function {function.name!r} is defined twice (also in {functions[function.name].file})",
                function.coord, source_line(function.file, function.coord.line))
        functions[function.name] = function

    homes = routine_homes(prelude + routine_files, list(functions.values()))
    for source in prelude + routine_files:
        forbid_syncthreads(source.path, source.text)
    shared = {source.path for source in prelude + routine_files}
    for function in functions.values():
        forbid_syncthreads(function.file, function.source)
        check_function(function, mappings, homes, shared, where[function.file])

    composites = _composites(header["composites"])
    check_composites(composites, functions)

    return Library(
        name=header["name"], path=str(root), summary=header["summary"],
        prelude=prelude, routine_files=routine_files,
        mappings=MappingProxyType(mappings),
        functions=MappingProxyType(dict(sorted(functions.items()))),
        content_hash=content_hash,
        routine_homes=MappingProxyType(homes),
        files=MappingProxyType(files),
        composites=MappingProxyType(dict(sorted(composites.items()))))


def _composites(read: list[dict]) -> dict[str, Composite]:
    """The composites of the parts (in the order read), each name once."""
    out: dict[str, Composite] = {}
    for head in read:
        line = head["line"]
        if head["name"] in out:
            first = out[head["name"]].coord
            raise line.error(f"composite {head['name']!r} is defined twice (first at {first.file}:{first.line})",
                             0, LibraryValidationError)
        out[head["name"]] = Composite(
            name=head["name"], params=head["params"], result=head["result"], calls=tuple(head["calls"]),
            summary=head["summary"], file=line.file, coord=line.coord(),
            square=head["square"][0] if head["square"] else ())
    return out


def _parse_part(file: str, text: str, root: Path, header: dict) -> None:
    """A part file (any ``*.fusec`` of the folder but ``library.fusec``): more ``mapping``
    lines and ``routines`` files, added to ``header`` (the index's, and earlier parts'), and
    composites, each a ``composite`` line and the ``square`` and ``call`` lines right after it."""
    composite: dict | None = None  # the one being read: its square and call lines follow it
    for line in _lines(file, text):
        if line.keyword not in PART_KEYWORDS:
            where = (f"is for {LIBRARY_FILE} only" if line.keyword in ("library", "summary", "prelude")
                     else "is unknown")
            raise LibraryFormatError(
                f"{line.keyword!r} {where}: a part file ({Path(file).name}) declares only mapping,"
                " routines and composite (with its square and call) lines", line.keyword_coord, line.text)
        if line.keyword == "composite":
            composite = _composite_head(line)
            header["composites"].append(composite)
        elif line.keyword in COMPOSITE_KEYWORDS:
            if composite is None:
                raise LibraryFormatError(f"a {line.keyword!r} line belongs to a composite: it follows a"
                                         " 'composite NAME(...) -> ...' line", line.keyword_coord, line.text)
            _composite_line(composite, line)
        else:
            composite = None
            _index_line(line, root, header)


def _composite_head(line: Line) -> dict:
    """``composite NAME(PARAM: KIND[DIMS], ...) -> RESULT: KIND[DIMS]  # summary``."""
    if not re.match(rf"\s*{IDENT}\s*\(", line.rest):
        raise line.error("expected 'composite NAME(PARAM: KIND[DIMS], ...) -> RESULT: KIND[DIMS]'")
    name, params, result = _parse_signature(line)
    summary = line.text.split("#", 1)[1].strip() if "#" in line.text else ""
    return dict(line=line, name=name, params=params, result=result, summary=summary, square=None, calls=[])


_CALL = re.compile(rf"\s*({IDENT})\s*=\s*({IDENT})\s*\(([^()]*)\)\s*")
_NUMBER = re.compile(r"-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")  # a script's numbers (ASCII)


def _composite_line(composite: dict, line: Line) -> None:
    """A ``square`` or ``call`` line of the composite read last."""
    if line.keyword == "square":
        if composite["square"] is not None:
            raise line.error(f"'square' is given twice for composite {composite['name']!r} (first on line"
                             f" {composite['square'][1].number})", 0, LibraryValidationError)
        composite["square"] = (_parse_square(line, composite["params"]), line)
        return
    match = _CALL.fullmatch(line.rest)
    if not match:
        raise line.error("expected 'call TARGET = FUNCTION(ARG, ...)' (each ARG a name or a number)")
    arguments = _arguments(match.group(3), match.start(3))
    for arg, offset in arguments:
        if not (re.fullmatch(IDENT, arg) or _NUMBER.fullmatch(arg)):
            raise line.error(f"bad argument {arg!r}: a name or a number", offset)
        digits = arg.lstrip("-")
        if _NUMBER.fullmatch(arg) and len(digits) > 1 and digits[0] == "0" and digits[1].isdigit():
            raise line.error(f"number {arg} has a leading zero: write it without (a number is decimal)", offset)
        if _NUMBER.fullmatch(arg) and not math.isfinite(float(arg)):
            raise line.error(f"number {arg} is out of range", offset)
    composite["calls"].append(CompositeCall(
        target=match.group(1), function=match.group(2), args=tuple(arg for arg, _ in arguments),
        coord=line.coord(match.start(2)), arg_coords=tuple(line.coord(offset) for _, offset in arguments),
        target_coord=line.coord(match.start(1))))


def _parse_index(file: str, text: str, root: Path) -> dict:
    header: dict = dict(name=None, summary=None, prelude=[], routines=[], mappings={}, composites=[])
    seen: dict[str, Line] = {}
    for line in _lines(file, text):
        if line.keyword in ("library", "summary"):
            if line.keyword in seen:
                raise line.error(f"'{line.keyword}' is given twice (first on line"
                                 f" {seen[line.keyword].number})", 0, LibraryValidationError)
            seen[line.keyword] = line
        if line.keyword not in ("library", "summary", "prelude", "routines", "mapping"):
            raise LibraryFormatError(
                f"unknown keyword {line.keyword!r} (expected library, summary, prelude, routines or mapping)",
                line.keyword_coord, line.text)
        _index_line(line, root, header)
    if header["name"] is None:
        raise LibraryFormatError("the library has no 'library NAME' line", Coord(file, 1, 1),
                                 text.split("\n", 1)[0])
    header["summary"] = header["summary"] or ""
    return header


def _index_line(line: Line, root: Path, header: dict) -> None:
    """One line of library.fusec or of a part, added to ``header``."""
    words = _words(line)
    prelude, routines, mappings = header["prelude"], header["routines"], header["mappings"]
    if line.keyword == "library":
        if len(words) != 1 or not re.fullmatch(IDENT, words[0][0]):
            raise line.error("expected 'library NAME'")
        header["name"] = words[0][0]
    elif line.keyword == "summary":
        header["summary"] = line.rest
    elif line.keyword in ("prelude", "routines"):
        if not words:
            raise line.error(f"expected file names after '{line.keyword}'")
        for word, offset in words:
            if Path(word).is_absolute() or ".." in Path(word).parts:  # the hash covers the directory only
                raise line.error(f"{word!r} is outside the library's directory: list files in it",
                                 offset, LibraryValidationError)
            path = root / word
            if not path.is_file():
                raise line.error(f"no file {word!r} in the library", offset, LibraryValidationError)
            if path in prelude or path in routines:  # it would be emitted twice
                raise line.error(f"{word!r} is listed twice in prelude and routines", offset,
                                 LibraryValidationError)
            (prelude if line.keyword == "prelude" else routines).append(path)
    else:  # mapping
        mapping = _parse_mapping(line)
        if mapping.name in mappings:
            first = mappings[mapping.name].coord
            raise line.error(f"mapping {mapping.name!r} is declared twice (first at {first.file}:{first.line})",
                             0, LibraryValidationError)
        mappings[mapping.name] = mapping


def _parse_mapping(line: Line) -> ThreadMapping:
    words = _words(line)
    if len(words) != 3:
        raise line.error("expected 'mapping NAME registers|shared SIZE' (SIZE without spaces)")
    (name, _), (storage, s_off), (size, z_off) = words
    if not re.fullmatch(IDENT, name):
        raise line.error(f"bad mapping name {name!r}")
    if name in _OPTION_WORDS:  # 'load x f as sync' would read as the option
        raise line.error(f"{name!r} cannot name a mapping: it is a routine option", 0,
                         LibraryValidationError)
    if storage not in ("registers", "shared"):
        raise line.error(f"storage must be 'registers' or 'shared', not {storage!r}", s_off)
    _check_expression(line, size, z_off, None)
    doc = line.text.split("#", 1)[1].strip() if "#" in line.text else ""
    return ThreadMapping(name, Storage(storage), size, doc, line.coord())


MAX_SIZE_OPERATORS = 100  # in one size expression: Python's parser fails on ~1000 nested ones
_SIZE_TOKEN = re.compile(r"[0-9][A-Za-z0-9_]*|[A-Za-z_][A-Za-z0-9_]*|[-+*/%()]|.", re.DOTALL)


def _check_expression(line: Line, expression: str, offset: int, geometry: Geometry | None) -> None:
    """Check a size expression parses (and, given a geometry, that its macros exist).

    The text is emitted into C as written and evaluated here by Python's parser, so it is
    first checked to be C both read alike: decimal or hex constants, macros, operators and
    parentheses only (Python takes ``True``, ``1_0``, ``0o7`` and a fullwidth letter too)."""
    if geometry is None:
        macros = {**geo.sample_macros(Geometry.VECTOR), **geo.sample_macros(Geometry.TILE),
                  **geo.sample_macros(Geometry.BAND)}
    else:
        macros = geo.sample_macros(geometry)
    operators = 0
    for token in _SIZE_TOKEN.findall(expression):
        if token[0] in "0123456789" and not re.fullmatch(r"[0-9]+|0[xX][0-9a-fA-F]+", token):
            raise line.error(f"{token!r} is not a C integer constant (write it in decimal) in {expression!r}",
                             offset, LibraryValidationError)
        if re.fullmatch(IDENT, token) and token not in macros:
            raise line.error(f"unknown macro {token!r} in {expression!r} (known here: {', '.join(sorted(macros))})",
                             offset, LibraryValidationError)
        if len(token) == 1 and not re.fullmatch(r"[0-9A-Za-z_()]|[-+*/%]", token):
            raise line.error(f"not an integer expression: {expression!r}", offset, LibraryValidationError)
        operators += token in "+-*/%"
    if operators > MAX_SIZE_OPERATORS:
        raise line.error(f"a size expression of more than {MAX_SIZE_OPERATORS} operators ({operators}):"
                         " write it shorter", offset, LibraryValidationError)
    try:
        value = geo.evaluate(expression, macros)
    except geo.ExpressionError as exc:
        raise line.error(str(exc), offset, LibraryValidationError) from None
    if value <= 0:
        raise line.error(f"{expression!r} is not positive", offset, LibraryValidationError)


# --------------------------------------------------------------------------- function files

_FUNCTION_KEYS = ("function", "summary", "hof", "element", "threads", "reference", "finish",
                  "square", "stored", "implementation", "load", "compute", "store")


def _split_metadata(file: str, text: str) -> tuple[list[Line], str] | None:
    """The metadata lines of a function file and its CUDA text (metadata blanked)."""
    start = text.find(META_OPEN)
    if start < 0:
        return None
    opening = coord_at(file, text, start)
    if text[:start].strip():
        raise LibraryFormatError(f"the {META_OPEN} block must open the file", opening,
                                 text.split("\n")[opening.line - 1])
    end = text.find(META_CLOSE, start)
    if end < 0:
        raise LibraryFormatError(f"{META_OPEN} block is never closed with {META_CLOSE}",
                                 opening, text.split("\n")[opening.line - 1])
    again = text.find(META_OPEN, end)
    if again >= 0:  # one function per file: a second block would be compiled as CUDA, or ignored
        where = coord_at(file, text, again)
        raise LibraryFormatError(f"a second {META_OPEN} block: a file holds one function, its block at the top",
                                 where, text.split("\n")[where.line - 1])
    first_line = text.count("\n", 0, start) + 1
    body = text[start + len(META_OPEN):end]
    line_start = text.rfind("\n", 0, start) + 1
    lines = _lines(file, body, first_line, start + len(META_OPEN) - line_start + 1,
                   text.split("\n")[first_line - 1])
    # Keep line numbers of the CUDA text intact: blank the metadata, keep newlines.
    blanked = text[:start] + "\n" * text.count("\n", start, end + len(META_CLOSE)) + text[end + len(META_CLOSE):]
    return lines, blanked


def _parse_function(file: str, text: str) -> tuple[Function, dict[str, Coord]] | None:
    """The function of a ``.cu`` file (None without a metadata block), and where its
    metadata lines are: ``hof``, ``axis``, ``threads``, ``reference``, ``element PARAM``
    and ``finish ARG``, so validation can point at the line at fault."""
    split = _split_metadata(file, text)
    if split is None:
        return None
    lines, cuda = split
    fields: dict[str, Line] = {}
    elements: dict[str, tuple[str, Line, int]] = {}
    stored: dict[str, tuple[str, Line]] = {}  # matrix -> its triangle and the line naming it
    impls: list[dict] = []
    current: dict | None = None

    def implementation(name: str, line: Line, geometry: Geometry | None = None) -> dict:
        for impl in impls:
            if impl["name"] == name:
                raise line.error(f"implementation {name!r} is declared twice", 0, LibraryValidationError)
        impl = dict(name=name, line=line, loads=[], compute=None, store=None, geometry=geometry)
        impls.append(impl)
        return impl

    for line in lines:
        key = line.keyword
        if key not in _FUNCTION_KEYS:
            raise LibraryFormatError(f"unknown keyword {key!r} (expected one of {', '.join(_FUNCTION_KEYS)})",
                                     line.keyword_coord, line.text)
        if key == "element":
            words = _words(line)
            if len(words) < 2:
                raise line.error("expected 'element PARAM SHAPE'")
            param, _ = words[0]
            shape_offset = words[1][1]
            if param in elements:
                raise line.error(f"element of {param!r} is declared twice", 0, LibraryValidationError)
            elements[param] = (re.sub(r"\s+", "", line.rest[shape_offset:]), line, shape_offset)
        elif key == "stored":
            name, triangle = _parse_stored(line)
            if name in stored:
                raise line.error(f"'stored' names {name!r} twice (first on line {stored[name][1].number}):"
                                 " a matrix is stored as one triangle", 0, LibraryValidationError)
            stored[name] = (triangle, line)
        elif key == "implementation":
            words = _words(line)
            if len(words) not in (1, 2) or not re.fullmatch(IDENT, words[0][0]):
                raise line.error("expected 'implementation NAME' or 'implementation NAME band'")
            if len(words) == 2 and words[1][0] != Geometry.BAND.value:
                raise line.error(f"unknown geometry {words[1][0]!r} (an implementation may say 'band')",
                                 words[1][1])
            current = implementation(words[0][0], line, Geometry.BAND if len(words) == 2 else None)
        elif key in ("load", "compute", "store"):
            if current is None:
                current = implementation("default", line)
            routine = _parse_routine(line)
            if key == "load":
                current["loads"].append(routine)
            elif current[key] is not None:
                raise line.error(f"implementation {current['name']!r} has two {key} routines", 0,
                                 LibraryValidationError)
            else:
                current[key] = routine
        else:
            if key in fields:
                raise line.error(f"'{key}' is given twice (first on line {fields[key].number})", 0,
                                 LibraryValidationError)
            fields[key] = line

    anchor = Coord(file, lines[0].number if lines else 1, 1)
    for required in ("function", "hof", "reference"):
        if required not in fields:
            raise LibraryValidationError(f"function metadata has no '{required}' line", anchor,
                                         text.split("\n")[anchor.line - 1])
    name, params, result = _parse_signature(fields["function"])
    reserved = expr.reserved_as(name)  # a script would read the call as something else
    if reserved is not None:
        raise fields["function"].error(f"function {name!r}: {reserved}, so no script could call it: name it otherwise",
                                       fields["function"].rest.index(name), LibraryValidationError)
    params = tuple(_with_element(p, elements) for p in params)
    result = _with_element(result, elements)
    for param, (_, line, offset) in elements.items():
        if param not in [p.name for p in params] + [result.name]:
            raise line.error(f"'element' names {param!r}, which is not a parameter", 0, LibraryValidationError)
    hof = _parse_hof(fields["hof"])
    threads = _parse_threads(fields["threads"]) if "threads" in fields else ()
    finish = _parse_finish(fields["finish"]) if "finish" in fields else None
    where = {key: fields[key].coord() for key in ("hof", "threads", "reference") if key in fields}
    if hof.axis:
        where["axis"] = fields["hof"].coord(fields["hof"].rest.rindex(hof.axis))
    for param, (_, line, offset) in elements.items():
        where[f"element {param}"] = line.coord(offset)
    for param, (_, line) in stored.items():
        where[f"stored {param}"] = line.coord()
    if finish is not None:
        rest = fields["finish"].rest
        for arg, offset in _arguments(rest[rest.index("(") + 1:rest.rindex(")")], rest.index("(") + 1):
            where.setdefault(f"finish {arg}", fields["finish"].coord(offset))
    if not impls:
        raise LibraryValidationError(f"function {name!r} has no load, compute or store routines",
                                     fields["function"].coord(), fields["function"].text)
    implementations = []
    for impl in impls:
        for part in ("compute", "store"):
            if impl[part] is None:
                raise impl["line"].error(
                    f"implementation {impl['name']!r} of {name!r} has no {part} routine", 0,
                    LibraryValidationError)
        implementations.append(Implementation(impl["name"], tuple(impl["loads"]), impl["compute"],
                                              impl["store"], impl["line"].coord(), impl["geometry"]))
    summary = fields["summary"].rest if "summary" in fields else ""
    square = _parse_square(fields["square"], params) if "square" in fields else ()
    return Function(name=name, params=params, result=result, hof=hof, threads=threads,
                    reference=fields["reference"].rest.strip(), implementations=tuple(implementations),
                    finish=finish, summary=summary, file=file, source=cuda,
                    coord=fields["function"].coord(), square=square,
                    stored=tuple((name, triangle) for name, (triangle, _) in stored.items())), where


def _parse_stored(line: Line) -> tuple[str, str]:
    """``stored MATRIX triu`` (``tril``): the matrix (a parameter or the result) of which only
    the upper (lower) triangle is stored; the name, checked against the signature once it is
    parsed, and the triangle."""
    words = _words(line)
    if len(words) != 2:
        raise line.error("expected 'stored MATRIX triu' or 'stored MATRIX tril' (a matrix of which only"
                         " the upper or the lower triangle is stored)")
    (name, _), (triangle, offset) = words
    if not re.fullmatch(IDENT, name):
        raise line.error(f"expected a matrix's name, not {name!r}")
    if triangle not in TRIANGLES:
        raise line.error(f"unknown triangle {triangle!r}: a function stores the upper triangle, 'triu'"
                         " (on and above the diagonal), or the lower one, 'tril' (on and below it)",
                         offset, LibraryValidationError)
    return name, triangle


def _parse_square(line: Line, params: tuple[Param, ...]) -> tuple[str, ...]:
    """``square A [B ...]``: matrix parameters whose two dimensions are one size."""
    words = _words(line)
    if not words:
        raise line.error("expected 'square MATRIX ...' (matrix parameters whose rows and columns are one size)")
    kinds = {p.name: p for p in params}
    out: list[str] = []
    for word, offset in words:
        param = kinds.get(word)
        if param is None or param.kind is not Kind.MATRIX:
            what = "not a parameter" if param is None else f"a {param.kind}"
            raise line.error(f"'square' names {word!r}, which is {what}: it takes matrix parameters",
                             offset, LibraryValidationError)
        if word in out:
            raise line.error(f"'square' names {word!r} twice", offset, LibraryValidationError)
        out.append(word)
    return tuple(out)


_PARAM = re.compile(rf"\s*({IDENT})\s*:\s*({IDENT})\s*(?:\[([^\]]*)\])?\s*")


def _parse_param(line: Line, text: str, offset: int) -> Param:
    match = _PARAM.fullmatch(text)
    if not match:
        raise line.error(f"expected 'NAME: KIND[DIMS]', got {text.strip()!r}",
                         offset + len(text) - len(text.lstrip()))
    name, kind, dims = match.groups()
    try:
        kind = Kind(kind)
    except ValueError:
        raise line.error(f"kind must be matrix, vector or scalar, not {kind!r}",
                         offset + match.start(2)) from None
    dims_t = tuple(d.strip() for d in dims.split(",")) if dims and dims.strip() else ()
    expected = {Kind.MATRIX: 2, Kind.VECTOR: 1, Kind.SCALAR: 0}[kind]
    if len(dims_t) != expected or not all(re.fullmatch(IDENT, d) for d in dims_t):
        raise line.error(f"a {kind} takes {expected} dimension name(s), got [{dims or ''}]",
                         offset + match.start(2), LibraryValidationError)
    return Param(name, kind, dims_t, line.coord(offset + match.start(1)))


def _parse_signature(line: Line) -> tuple[str, tuple[Param, ...], Param]:
    match = re.fullmatch(rf"\s*({IDENT})\s*\((.*)\)\s*->\s*(.+)", line.rest)
    if not match:
        raise line.error("expected 'function NAME(PARAM: KIND[DIMS], ...) -> RESULT: KIND[DIMS]'")
    name = match.group(1)
    params = []
    args_text, args_offset = match.group(2), match.start(2)
    position = 0
    for piece in _split_top(args_text):
        if piece.strip():
            params.append(_parse_param(line, piece, args_offset + position))
        position += len(piece) + 1
    result = _parse_param(line, match.group(3), match.start(3))
    seen: dict[str, Param] = {}
    for p in params + [result]:
        if p.name in seen:
            raise LibraryValidationError(f"parameter {p.name!r} appears twice", p.coord, line.text)
        seen[p.name] = p
    if not params:
        raise line.error(f"function {name!r} takes no parameters", 0, LibraryValidationError)
    return name, tuple(params), result


def _arguments(text: str, offset: int) -> list[tuple[str, int]]:
    """Non-empty comma-separated arguments of ``text`` (found at ``offset`` in the line),
    stripped, each with its own offset."""
    out, start = [], 0
    for piece in text.split(","):
        if piece.strip():
            out.append((piece.strip(), offset + start + len(piece) - len(piece.lstrip())))
        start += len(piece) + 1
    return out


def _split_top(text: str) -> list[str]:
    """Split on commas that are not inside brackets."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += ch in "[("
        depth -= ch in "])"
        if ch == "," and depth == 0:
            out.append(text[start:i])
            start = i + 1
    out.append(text[start:])
    return out


def _with_element(param: Param, elements: dict) -> Param:
    if param.name in elements:
        return dataclasses.replace(param, element=elements[param.name][0])
    return param


def _parse_hof(line: Line) -> Hof:
    match = re.fullmatch(rf"(nested\s+)?(map|reduce\((\S+)\))(?:\s+(over)\s+({IDENT}))?\s*", line.rest)
    if not match:
        raise line.error("expected 'map', 'reduce(+)', 'nested map' or 'nested reduce(+) over DIM'")
    nested, what, op, _, axis = match.groups()
    reduce = what.startswith("reduce")
    if reduce and op != "+":
        raise line.error(f"only the '+' reduction is supported, not {op!r}", match.start(3),
                         LibraryValidationError)
    if axis and not (nested and reduce):
        raise line.error("'over DIM' only makes sense for a nested reduce", match.start(4),
                         LibraryValidationError)
    if nested and reduce and not axis:
        raise line.error("a nested reduce needs 'over DIM' (the dimension it sums along)", 0,
                         LibraryValidationError)
    return Hof(nested=bool(nested), reduce=reduce, axis=axis, operator=op or "+")


def _parse_threads(line: Line) -> tuple[str, ...]:
    parts = [p for p in re.split(r"\s+x\s+", line.rest.strip()) if p]
    if not 1 <= len(parts) <= 2 or any(re.search(r"\s", p) for p in parts):
        raise line.error("expected 'threads N' or 'threads X x Y' (expressions without spaces)")
    return tuple(parts)


def _parse_finish(line: Line) -> Finish:
    match = re.fullmatch(rf"\s*({IDENT})\s*\(([^)]*)\)\s*", line.rest)
    if not match:
        raise line.error("expected 'finish ROUTINE(acc, ARG, ...)'")
    args = tuple(a.strip() for a in match.group(2).split(",") if a.strip())
    for a, offset in _arguments(match.group(2), match.start(2)):
        if not re.fullmatch(IDENT, a):
            raise line.error(f"bad finish argument {a!r}", offset)
    if "acc" not in args:
        raise line.error("a finish routine takes 'acc', the reduced value", match.start(2),
                         LibraryValidationError)
    return Finish(match.group(1), args, line.coord())


_OPTION_WORDS = ("threads", "scratch", "sync")
_OPTION = re.compile(r"(?<!\S)(threads|scratch|sync)(?!\S)")


def _parse_routine(line: Line) -> Routine:
    kind = RoutineKind(line.keyword)
    text = line.rest
    options_at = _OPTION.search(text)
    head = text if options_at is None else text[:options_at.start()]
    threads = scratch = None
    sync = False
    words = [(m.group(), m.start()) for m in re.finditer(r"\S+", text)
             if options_at is not None and m.start() >= options_at.start()]
    seen: set[str] = set()
    while words:
        (word, offset), words = words[0], words[1:]
        if word not in _OPTION_WORDS:
            raise line.error(f"unknown routine option {word!r} (expected threads, scratch or sync)", offset)
        if word in seen:
            raise line.error(f"routine option {word!r} is given twice", offset)
        seen.add(word)
        if word == "sync":
            sync = True
            continue
        if not words or words[0][0] in _OPTION_WORDS:
            raise line.error(f"expected '{word} {'X [x Y]' if word == 'threads' else 'EXPR'}'"
                             " (expressions without spaces)", offset)
        if word == "scratch":
            (scratch, s_off), words = words[0], words[1:]
            _check_expression(line, scratch, s_off, None)
            continue
        values = [words[0]]
        if len(words) >= 2 and words[1][0] == "x":
            if len(words) < 3 or words[2][0] in _OPTION_WORDS:
                raise line.error("expected 'threads X x Y' (expressions without spaces)", words[1][1])
            values.append(words[2])
        words = words[2 * len(values) - 1:]
        for value, v_off in values:  # macros of either geometry here; the function's own later
            _check_expression(line, value, v_off, None)
        threads = tuple(value for value, _ in values)
    if kind is RoutineKind.COMPUTE:
        match = re.fullmatch(rf"\s*({IDENT})\s*\(([^)]*)\)\s*->\s*({IDENT})\s*:\s*({IDENT})\s*", head)
        if not match:
            raise line.error("expected 'compute ROUTINE(ARG:MAPPING, SCALAR, ...) -> RESULT:MAPPING'")
        reads: list[Access | str] = []
        for arg, a_off in _arguments(match.group(2), match.start(2)):
            am = re.fullmatch(rf"({IDENT})\s*(?::\s*({IDENT}))?", arg)
            if not am:
                raise line.error(f"bad compute argument {arg!r}", a_off)
            reads.append(Access(am.group(1), am.group(2)) if am.group(2) else am.group(1))
        return Routine(kind, match.group(1), None, tuple(reads), Access(match.group(3), match.group(4)),
                       threads, scratch, sync, line.coord(match.start(1)))
    match = re.fullmatch(rf"\s*({IDENT})\s+({IDENT})\s+as\s+({IDENT})\s*", head)
    if not match:
        raise line.error(f"expected '{kind} PARAM ROUTINE as MAPPING'")
    param, name, mapping = match.groups()
    access = Access(param, mapping)
    if kind is RoutineKind.LOAD:
        return Routine(kind, name, param, (), access, threads, scratch, sync, line.coord(match.start(2)))
    return Routine(kind, name, param, (access,), None, threads, scratch, sync, line.coord(match.start(2)))


# --------------------------------------------------------------------------- validation
