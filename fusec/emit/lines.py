"""``#line`` directives: nvcc's errors (and compute-sanitizer's lines) in a library
routine name the library file and its line, and those in fusec's own code the
generated file's line.

A library text is emitted after ``#line N "its file"`` and followed by a marker (a
comment, so that a kernel's source stays a piece of its program's).
:func:`resolve`, as the source is handed to nvcc, turns each marker into
``#line M "the file"`` with M the number of the line that follows: one line for one,
so nvcc's line numbers are those of the source as generated (``fusec compile -o``).
"""

from __future__ import annotations

RESUME = "// @fusec: the generated file goes on"


def library_text(path: str, text: str) -> list[str]:
    """The lines that emit ``text``, the whole of library file ``path`` (or a function
    file with its metadata blanked: its lines keep their numbers)."""
    body = text.strip("\n")
    first = len(text) - len(text.lstrip("\n")) + 1
    return [f"// ---- {path}", f'#line {first} "{_quoted(path)}"', *body.split("\n"), RESUME]


def resolve(source: str, name: str) -> str:
    """``source`` with every marker replaced by ``#line`` back into ``name``."""
    lines = source.split("\n")
    for index, line in enumerate(lines):
        if line.strip() == RESUME:
            indent = line[:len(line) - len(line.lstrip())]
            lines[index] = f'{indent}#line {index + 2} "{_quoted(name)}"'
    return "\n".join(lines)


def _quoted(path: str) -> str:
    return str(path).replace("\\", "\\\\").replace('"', '\\"')
