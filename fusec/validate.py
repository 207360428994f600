"""Checks of what fusec reads back and what a caller hands it.

Files fusec wrote itself (performance databases, tuning entries, caches) may
have been damaged or edited since: each field read is checked against its
type and range here, and a file with one field wrong is not used
(:class:`Invalid`, a ``ValueError``, which the readers turn into a warning
naming the file). Arguments of the command line and of the Python API are
checked with the same functions and raise :class:`~fusec.errors.ArgumentError`
naming the argument.
"""

from __future__ import annotations

import difflib
import math
import numbers
import os
import stat
from pathlib import Path
from typing import Any, Mapping

from .errors import ArgumentError, FusecError

# A grid's x dimension holds at most 2**31 - 1 blocks, and the kernels index
# elements with 32-bit ints: no size may pass that, nor may a matrix's elements.
MAX_EXTENT = 2 ** 31 - 1
MAX_ELEMENTS = 2 ** 40  # elements of the largest array of a script (8 TB in float64)


class Invalid(ValueError):
    """A field of a file read back is missing, of the wrong type or out of range."""


def number(value: Any, field: str, *, low: float | None = None, high: float | None = None,
           integer: bool = False, above: bool = False) -> float | int:
    """``value`` if it is a finite real (a whole number with ``integer``) in
    [``low``, ``high``] (``low`` excluded with ``above``); else :class:`Invalid`."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise Invalid(f"{field} is {brief(value)}, not a number")
    if integer and not isinstance(value, int):
        raise Invalid(f"{field} is {brief(value)}, not a whole number")
    if not integer and not math.isfinite(value):
        raise Invalid(f"{field} is {value}, not a finite number")
    if low is not None and (value <= low if above else value < low):
        raise Invalid(f"{field} is {brief(value)}, not {'above' if above else 'at least'} {low}")
    if high is not None and value > high:
        raise Invalid(f"{field} is {brief(value)}, more than {high}")
    return value


def text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise Invalid(f"{field} is {brief(value)}, not a string")
    return value


def mapping(value: Any, field: str) -> dict:
    if not isinstance(value, dict):
        raise Invalid(f"{field} is {brief(value)}, not a JSON object")
    return value


def finite_real(value: Any) -> float | None:
    """``float(value)`` of a real number (not a bool) that is finite as a float; None for
    anything else (a string, NaN, infinity, an int of 400 digits, which no float holds)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def brief(value: Any) -> str:
    """``repr(value)``, cut to 40 characters, for a message that refuses it."""
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."


# -- arguments -------------------------------------------------------------------

def size(name: str, value: Any, argument: str = "sizes") -> int:
    """A problem size: a whole number from 1 to MAX_EXTENT."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(argument, f"size {name} is {brief(value)}, not a whole number")
    value = int(value)
    if not 1 <= value <= MAX_EXTENT:
        raise ArgumentError(argument, f"size {name} = {value} is out of range: sizes are 1 to 2**31 - 1")
    return value


def script_sizes(names: tuple[str, ...], sizes: Any, argument: str = "sizes") -> dict[str, int]:
    """``sizes``, a mapping giving each of a script's sizes (``names``) and no other,
    checked with :func:`size`."""
    if not isinstance(sizes, Mapping):
        raise ArgumentError(argument, f"is a {type(sizes).__name__}: pass a mapping of size names to"
                                      " whole numbers, e.g. {'n': 8192}")
    unknown = sorted(map(str, set(sizes) - set(names)))
    if unknown:
        raise ArgumentError(argument, f"the script has no size {', '.join(unknown)} (its sizes: {', '.join(names)})")
    missing = [s for s in names if s not in sizes]
    if missing:
        raise ArgumentError(argument, f"gives no value for {', '.join(missing)}"
                                      f" (the script's sizes: {', '.join(names)})")
    return {s: size(s, sizes[s], argument) for s in names}


def sizes_fit(shapes: dict[str, tuple[str, ...]], sizes: dict[str, int], argument: str = "sizes") -> None:
    """No array of the script (``shapes``: name -> size names) has more than MAX_ELEMENTS."""
    for array, dims in shapes.items():
        count = math.prod(sizes[d] for d in dims)
        if count > MAX_ELEMENTS:
            given = " x ".join(f"{d}={sizes[d]}" for d in dims)
            raise ArgumentError(argument, f"{array} would hold {count:.3g} elements ({given}),"
                                          f" more than 2**40: no GPU holds it")


def count(argument: str, value: Any, low: int) -> int:
    """A number of runs, iterations...: a whole number of at least ``low``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ArgumentError(argument, f"is {brief(value)}: pass a whole number")
    if value < low:
        raise ArgumentError(argument, f"is {value}: it must be at least {low}")
    return int(value)


def environment_number(name: str, default: float | int, *, integer: bool = False, low: float | None = None,
                       above: bool = False) -> float | int:
    """The number the environment variable ``name`` holds, ``default`` where it is unset or
    empty; an :class:`ArgumentError` naming ``$name`` where it holds anything else (never
    Python's ValueError, and never quietly the default)."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    what = "a whole number" if integer else "a number"
    if low is not None:
        what += f" {'above' if above else 'of at least'} {low}"
    try:
        value = int(raw) if integer else float(raw)
        return number(value, name, low=low, above=above, integer=integer)
    except ValueError:  # int()'s and float()'s, and number()'s Invalid
        raise ArgumentError(f"${name}", f"is {raw!r}: set it to {what}, or unset it for {default}") from None


def environment_flag(name: str, default: bool) -> bool:
    """The yes-or-no environment variable ``name``: 1 or 0, ``default`` where unset or empty;
    an :class:`ArgumentError` naming ``$name`` for anything else."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if raw not in ("0", "1"):
        raise ArgumentError(f"${name}", f"is {raw!r}: set it to 1 or 0, or unset it for {int(default)}")
    return raw == "1"


def flag(argument: str, value: Any) -> bool:
    """A yes-or-no argument: True or False (NumPy's too), never a truthy string or None."""
    import numpy as np
    if not isinstance(value, (bool, np.bool_)):
        raise ArgumentError(argument, f"is {brief(value)}: pass True or False")
    return bool(value)


def dtype(value: Any) -> str:
    """'float32' or 'float64' from a name or a NumPy dtype; None or anything else is an error."""
    import numpy as np
    if value is None:
        raise ArgumentError("dtype", "is None: pass 'float32' or 'float64'")
    try:
        name = np.dtype(value).name
    except (TypeError, ValueError):
        name = None
    if name not in ("float32", "float64"):
        raise ArgumentError("dtype", f"is {brief(value)}: fusec compiles 'float32' or 'float64' only")
    return name


def scalar(name: str, value: float, dtype_name: str) -> float:
    """A scalar argument: finite and within the range of the program's precision."""
    import numpy as np
    if not math.isfinite(value):
        raise ArgumentError(name, f"is {value}: scalars must be finite")
    largest = float(np.finfo(dtype_name).max)
    if abs(value) > largest:
        raise ArgumentError(name, f"is {value:g}, outside the range of {dtype_name} (|x| <= {largest:g})")
    return value


def did_you_mean(word: str, choices) -> str:
    """``; did you mean 'x'?`` for the choice closest to ``word``, or "" where none is close."""
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f"; did you mean '{close[0]}'?" if close else ""


def printable(text: str) -> bool:
    """Whether ``text`` (a path, a name) can be written into generated code and messages:
    UTF-8 (no byte os.fsdecode could only keep as a surrogate), no control character."""
    return text.isprintable() and text == text.encode("utf-8", "replace").decode("utf-8")


def shown(text: str) -> str:
    """``text`` with what :func:`printable` refuses escaped, for the message that refuses it."""
    return repr(text.encode("utf-8", "backslashreplace").decode("utf-8"))


def regular_file(path: str, what: str = "script") -> None:
    """Refuse a FIFO, a device or a directory before opening it (reading a FIFO blocks
    for ever); a missing file is left to open() to report."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        kind = ("a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode)
                else "not a regular file")
        from .errors import ScriptError
        error = ScriptError if what == "script" else FusecError
        raise error(f"{path}: the {what} is {kind}, not a regular file")


def file_in_the_way(path: Path) -> Path | None:
    """The file standing where ``path`` needs a folder (``path`` itself, or the nearest
    of its parents that exists), or None where that is a folder."""
    for place in (path, *path.parents):
        if place.exists():
            return None if place.is_dir() else place
    return None


DEFAULT_SIZE = 8192


def default_sizes(dag, sizes: Mapping[str, int] | None) -> dict[str, int]:
    """The sizes to compile for: those given; a size not given takes the value
    given for ``n`` (``{"n": 4096}`` sets every size of a script whose sizes
    are m and n), else DEFAULT_SIZE. ``fusec compile --size`` follows the
    same rule."""
    if sizes is not None and not isinstance(sizes, Mapping):
        raise ArgumentError("sizes", f"is a {type(sizes).__name__}: pass a mapping of size names to"
                                     " whole numbers, e.g. {'n': 8192}")
    sizes = dict(sizes or {})
    unknown = set(sizes) - set(dag.sizes) - {"n"}
    if unknown:
        raise ArgumentError("sizes", f"{dag.file} has no size {', '.join(sorted(map(str, unknown)))}"
                                     f" (its sizes: {', '.join(dag.sizes)})")
    fill = sizes.get("n", DEFAULT_SIZE)
    chosen = {s: size(s, sizes.get(s, fill)) for s in dag.sizes}
    sizes_fit({v.name: v.dims for v in dag.values if v.dims}, chosen)
    return chosen
