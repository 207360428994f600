"""Mutants of what fusec reads: scripts, libraries, performance databases, tuning entries,
command lines and API arguments. Each generator takes a ``random.Random`` and yields
``(name, run)`` pairs; ``run(workdir)`` feeds one mutant to fusec the way a user would and
returns normally when fusec accepted it (having checked that what it made is right).
The harness (:mod:`fuzz`) decides whether what ``run`` raised is a proper ending."""

from __future__ import annotations

import copy
import functools
import json
import math
import os
import random
import shutil
from pathlib import Path
from typing import Callable, Iterator

from fusec import data

ROOT = Path(__file__).resolve().parent.parent.parent
LIBRARY = data.LIBRARY
SCRIPTS = sorted((ROOT / "scripts").glob("*.script"))
SMALL = ROOT / "scripts" / "sscal.script"
DATABASE = data.PERFDB / "h100-80gb-hbm3.json"

Mutant = tuple[str, Callable[[Path], None]]

HOSTILE_NUMBERS = ["0", "00", "010", "09", "1e999", "-0", "1e-400", ".", "1.", ".5", "1e", "0x10", "1_0",
                   "99999999999999999999", "3.4e39", "-1e308", "nan", "inf"]
HOSTILE_VALUES = [None, "", "x", [], {}, [1], {"1": 1}, -1, 0, 1, 1.5, 1e308, -1e308, float("nan"),
                  float("inf"), -float("inf"), True, 2 ** 70, "1e-6", [[[[]]]]]
PIECES = [";", ",", "(", ")", "[", "]", "=", "-", "#", "//", "\n", " ", "$", "é", "\t", "\x00", "input", "return",
          "matrix", "vector", "scalar", "A", "x", "n", "m", "sgemv", "nosuch", "1.0", "010", "1e999"]


@functools.lru_cache(maxsize=None)
def library():
    from fusec.library.loader import load_library
    return load_library(LIBRARY)


@functools.lru_cache(maxsize=None)
def h100():
    from fusec.cost.perfdb import predictor_for
    return predictor_for(library(), "h100")


def check_numbers(program) -> None:
    """Every literal of the script is in the generated code as its value."""
    from fusec.ir.dag import Constant
    for call in program.dag.calls:
        for arg in call.args:
            if isinstance(arg, Constant):
                literal = f"real({repr(float(arg.value))})"
                assert literal in program.source, f"{arg.text} is not emitted as {literal}"


# -- scripts ------------------------------------------------------------------------

def _mutate_text(rng: random.Random, text: str) -> str:
    kind = rng.randrange(7)
    at = rng.randrange(len(text) + 1)
    if kind == 0:  # delete a stretch
        return text[:at] + text[at + rng.randint(1, 8):]
    if kind == 1:  # insert a piece
        return text[:at] + rng.choice(PIECES) + text[at:]
    if kind == 2:  # a number replaced, or put where a scalar was
        import re
        spots = [m for m in re.finditer(r"\b(alpha|beta|\d+(\.\d*)?)\b", text)]
        if spots:
            m = rng.choice(spots)
            return text[:m.start()] + rng.choice(HOSTILE_NUMBERS + ["2.5", "-3", "1e-7", "1e30"]) + text[m.end():]
        return text
    lines = text.split("\n")
    if kind == 3:  # a line duplicated
        i = rng.randrange(len(lines))
        lines.insert(i, lines[i])
    elif kind == 4:  # two lines swapped
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
    elif kind == 5:  # a line dropped
        lines.pop(rng.randrange(len(lines)))
    else:  # many unused names
        lines.insert(1, "vector " + ", ".join(f"u{k}" for k in range(rng.choice([3, 50, 400]))) + ";")
    return "\n".join(lines)


def scripts(rng: random.Random) -> Iterator[Mutant]:
    while True:
        source = rng.choice(SCRIPTS)
        text = source.read_text()
        for _ in range(rng.randint(1, 3)):
            text = _mutate_text(rng, text)

        def run(workdir: Path, text=text, name=source.name, dtype=rng.choice(["float32", "float64"])) -> None:
            import fusec
            from fusec.frontend import load_script
            from fusec.space import unfused_plan
            path = workdir / name
            path.write_text(text, encoding="utf-8")
            dag = load_script(path, library())
            program = fusec.compile(path, library(), dtype, plan=unfused_plan(dag, library()))
            check_numbers(program)

        yield f"script {source.name}: {text[:60]!r}...", run


# -- libraries ------------------------------------------------------------------------

LIBRARY_EDITS = [
    ("library.fusec", r"registers  VEC  ",
     ["registers  1  ", "registers  0  ", "registers  -VEC ", "registers  VEC/0"]),
    ("library.fusec", "TILE_ROWS/BLOCK_Y*VEC", ["1", "TILE_ROWS", "BLOCK_Y", "VEC*VEC*VEC*VEC*VEC*VEC"]),
    ("library.fusec", "shared     TILE_COLS  ",
     ["shared     1          ", "shared     TILE_COLS/2", "registers  TILE_COLS  "]),
    ("library.fusec", "mapping   vec ", ["mapping   vec2", "mapping   threads", "mapping   "]),
    ("sdot.cu", "element    x subvector(ELEMENT)",
     ["element    x subvector(TILE_ROWS)", "element    x tile(TILE_ROWS,TILE_COLS)", ""]),
    ("sdot.cu", "// r_partial += x . y", ["/*@fusec\nfunction f(x: vector[n]) -> y: vector[n]\n@*/", "/*@fusec"]),
    ("sdot.cu", "hof        reduce(+)",
     ["hof        map", "hof        reduce(*)", "hof        nested reduce(+) over n", ""]),
    ("sdot.cu", "threads    32", ["threads    64", "threads    BLOCK_X x BLOCK_Y", "threads    0", ""]),
    ("sgemv.cu", "load", ["store", "compute", "lod", ""]),
    ("sscal.cu", "as vec", ["as tile", "as partial", "as nosuch", "as"]),
    ("saxpy.cu", "(alpha, x:vec, y:vec)", ["(alpha, x:vec)", "(alpha, alpha, x:vec, y:vec)", "(x:vec, y:vec)"]),
]


def libraries(rng: random.Random) -> Iterator[Mutant]:
    while True:
        file, old, news = rng.choice(LIBRARY_EDITS)
        new = rng.choice(news)

        def run(workdir: Path, file=file, old=old, new=new) -> None:
            import fusec
            from fusec.frontend import load_script
            from fusec.library.loader import load_library
            from fusec.space import unfused_plan
            copy_ = workdir / "lib"
            shutil.copytree(LIBRARY, copy_, ignore=shutil.ignore_patterns("tunings"))
            text = (copy_ / file).read_text()
            assert old in text, (file, old)
            (copy_ / file).write_text(text.replace(old, new, rng.choice([1, -1])))
            lib = load_library(copy_)
            for script in ("sscal", "axpydot", "sgemv"):
                path = ROOT / "scripts" / f"{script}.script"
                dag = load_script(path, lib)
                fusec.compile(path, lib, "float32", plan=unfused_plan(dag, lib))

        yield f"library {file}: {old!r} -> {new!r}", run


# -- performance databases ---------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _database_text() -> str:
    return DATABASE.read_text()


def _database() -> dict:
    """A fresh copy of the bundled database to damage (parsing the text again is
    several times faster than copy.deepcopy of the parsed one)."""
    return json.loads(_database_text())


def _spots(data) -> list[tuple]:
    """Paths into the database worth damaging: the header, the device, a few routines."""
    spots = [(k,) for k in data] + [("device", k) for k in data["device"]] + [("library", "hash")]
    for index in (0, 1, len(data["routines"]) // 2, len(data["routines"]) - 1):
        spots += [("routines", index, k) for k in data["routines"][index]]
        spots += [("routines", index, "seconds", k) for k in data["routines"][index]["seconds"]]
    return spots


def databases(rng: random.Random) -> Iterator[Mutant]:
    spots = _spots(_database())
    while True:
        data = _database()
        touched = []
        for _ in range(rng.randint(1, 2)):
            spot = rng.choice(spots)
            holder = data
            try:
                for step in spot[:-1]:
                    holder = holder[step]
                if isinstance(holder, list):
                    holder[spot[-1]]  # noqa: B018 (still there?)
            except (LookupError, TypeError):  # an earlier damage took it away
                continue
            if not isinstance(holder, (dict, list)):
                continue
            if isinstance(holder, dict) and rng.random() < 0.2:
                holder.pop(spot[-1], None)
                touched.append(f"{spot} deleted")
            else:
                value = copy.deepcopy(rng.choice(HOSTILE_VALUES))
                holder[spot[-1]] = value
                touched.append(f"{spot} = {value!r}")
        if rng.random() < 0.1 and isinstance(data.get("routines"), list) and data["routines"] \
                and isinstance(data["routines"][0], dict):
            data["routines"][0]["seconds"] = {str(rng.randint(-2, 2000)): rng.choice([1e-7, 0.0, 5.0])}
            touched.append("seconds at an odd level")

        def run(workdir: Path, data=data) -> None:
            import warnings

            from fusec.cost.perfdb import store
            from fusec.cost.perfdb.model import PerfdbPredictor
            from fusec.frontend import load_script
            from fusec.space.combinations import build_space
            path = workdir / DATABASE.name
            path.write_text(json.dumps(data))
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                database = store.load(path, library())
            for warning in caught:
                warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
            if database is None:  # refused: with a warning naming the file
                assert any(isinstance(w.message, store.PerfdbWarning) and str(path) in str(w.message)
                           for w in caught), "a database refused without a warning"
                return
            predictor = PerfdbPredictor(database, library())
            for script in ("sscal", "axpydot"):
                dag = load_script(ROOT / "scripts" / f"{script}.script", library())
                best = build_space(dag, library(), "float32", {s: 100_000 for s in dag.sizes}, predictor).best_where(
                    lambda p: True)
                assert math.isfinite(best.predicted) and best.predicted > 0, f"predicted {best.predicted}"

        yield "database " + "; ".join(touched), run


# -- tuning entries -------------------------------------------------------------------

@functools.lru_cache(maxsize=None)
def _entry_text() -> tuple[str, str]:
    """The JSON of an entry holding the second-best plan of sscal at n = 5000, and its file name."""
    from fusec.frontend import load_script
    from fusec.space.combinations import build_space
    from fusec.tune import store as tuning
    dag = load_script(SMALL, library())
    ranked = build_space(dag, library(), "float32", {"n": 5000}, h100()).ranked()
    next(ranked)
    entry = tuning.TuningEntry(tuning.key(dag, library(), "float32", {"n": 5000}, "h100-80gb-hbm3"),
                               next(ranked).plan, 12.5, 10.0, 2, 10, "NVIDIA H100 80GB HBM3",
                               "2026-11-22T12:00:00+00:00", "sscal")
    return entry.to_json(), entry.key.digest


def _leaves(data, path=()):
    if isinstance(data, dict):
        for k, v in data.items():
            yield from _leaves(v, path + (k,))
    elif isinstance(data, list):
        for i, v in enumerate(data):
            yield from _leaves(v, path + (i,))
    yield path


def entries(rng: random.Random) -> Iterator[Mutant]:
    while True:
        text, digest = _entry_text()
        data = json.loads(text)
        leaves = [p for p in _leaves(data) if p]
        how = rng.randrange(4)
        if how == 0:
            mutated = text[: rng.randrange(len(text))]
            what = "truncated"
        elif how == 1:
            mutated = "[" * 50000 + "]" * 50000
            what = "nested 50,000 deep"
        else:
            for _ in range(rng.randint(1, 2)):
                spot = rng.choice(leaves)
                holder = data
                for step in spot[:-1]:
                    holder = holder[step]
                if isinstance(holder, list) and rng.random() < 0.3:
                    del holder[spot[-1]]
                else:
                    holder[spot[-1]] = copy.deepcopy(rng.choice(HOSTILE_VALUES + ["x", "load", "compute", 2, 64]))
                leaves = [p for p in _leaves(data) if p]
            mutated = json.dumps(data)
            what = mutated[:0] + "fields changed"

        def run(workdir: Path, mutated=mutated, digest=digest) -> None:
            from fusec.api import build_program
            from fusec.frontend import load_script
            from fusec.space.combinations import build_space
            from fusec.tune import store as tuning
            folder = Path(os.environ["FUSEC_CACHE_DIR"]) / "tuning" / "h100-80gb-hbm3"
            folder.mkdir(parents=True, exist_ok=True)
            for old in folder.glob("*.json"):
                old.unlink()
            (folder / f"{digest}.json").write_text(mutated)
            dag = load_script(SMALL, library())
            for n in (5000, 6000):  # the entry's own size, and one that would borrow it
                program, entry = build_program(dag, library(), "float32", sizes={"n": n}, gpu="h100",
                                               predictor=h100(), spill_arch=None)
                if entry is not None:  # used: it must be a plan the space offers as it is
                    space = build_space(dag, library(), "float32", {"n": n}, h100())
                    offered = {p for options in space.options.values() for p, _, _ in options}
                    assert all(k in offered for k in program.generated.plan.kernels), "an unoffered plan was used"
            tuning.filed(library(), "h100")

        yield f"tuning entry {what}", run


# -- command lines ---------------------------------------------------------------------

FLAG_VALUES = {
    "--size": ["n=64", "n=0", "n=-1", "n=99999999999", "n=2147483647", "n=1e3", "n=", "=5", "n", "m=4", "n=0x10",
               "n=" + "9" * 40],
    "--top": ["1", "0", "-3", "2.5", "x", "100000"],
    "--layouts": ["1", "0", "-1", "x"],
    "--gpu": ["h100", "nosuchgpu", "", "../../etc", "H100 80GB", "a" * 300],
    "--dtype": ["float32", "float64", "float16", "int8", ""],
    "--arch": ["sm_90", "sm_", "compute_90", "sm_90;true"],
}


def command_lines(rng: random.Random) -> Iterator[Mutant]:
    while True:
        command = rng.choice(["compile", "space", "tunings", "perfdb show"])
        argv = command.split()
        if command in ("compile", "space"):
            argv.append(rng.choice([str(SMALL), str(ROOT / "scripts" / "vadd.script"), "/no/such.script",
                                    str(ROOT / "scripts"), "/dev/null", str(ROOT / "README.md")]))
            flags = ["--size", "--top", "--gpu", "--dtype", "--layouts"] + (["--arch"] if command == "compile" else [])
            for flag in rng.sample(flags, rng.randint(0, 3)):
                if flag in ("--top", "--layouts") and command != "space":
                    continue
                argv += [flag, rng.choice(FLAG_VALUES[flag])]
            if rng.random() < 0.3:
                argv.append("--analytic")
            if command == "compile":
                argv.append("--no-nvcc")
        elif command == "tunings":
            argv += rng.choice([[], ["--prune"], ["--gpu", rng.choice(FLAG_VALUES["--gpu"])]])
        else:
            argv += ["--gpu", rng.choice(FLAG_VALUES["--gpu"])]

        def run(workdir: Path, argv=argv) -> None:
            import contextlib
            import io

            from fusec.cli import main
            full = argv + (["-o", str(workdir / "out")] if argv[0] == "compile" else [])
            if "--prune" in argv:  # on a copy: --prune deletes the bundled library's stale shipped plans
                import shutil

                from fusec import data
                full += ["--library", str(shutil.copytree(data.LIBRARY, workdir / "blas", dirs_exist_ok=True))]
            err = io.StringIO()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                try:
                    code = main(full)
                except SystemExit as exc:  # argparse's usage errors
                    code = exc.code
            assert code in (0, 1, 2), f"exit {code}"
            assert "Traceback" not in err.getvalue(), err.getvalue()
            if code == 1:
                assert "fusec: error:" in err.getvalue(), err.getvalue()

        yield "fusec " + " ".join(argv), run


# -- API arguments ------------------------------------------------------------------------

class _FakeArray:
    def __init__(self, interface):
        self.__cuda_array_interface__ = interface


API_VALUES = {
    "dtype": ["float32", "float64", None, "float16", "f4", 3, object()],
    "sizes": [{"n": 64}, {"n": 0}, {"n": -1}, {"n": 2 ** 31}, {"n": 1.5}, {"n": "8"}, {"n": None}, {"n": True},
              {"q": 4}, [("n", 4)], "n=4", {"n": 2 ** 64}],
    "library": [42, b"fusec/data/blas", ["library"], 3.5],
    "plan": ["fused", 1, object()],
    "predictor": [object(), 3, "perfdb"],
    "gpu": [100, ["h100"], b"h100"],
}
ARRAYS = [
    {"shape": (64,), "typestr": "<f4", "data": (4096, False)},
    {"typestr": "<f4", "data": (4096, False)}, {"shape": (64,), "typestr": "<f4"},
    {"shape": (64,), "data": (4096, False)}, {"shape": (-64,), "typestr": "<f4", "data": (4096, False)},
    {"shape": (64,), "typestr": "<f4", "data": (0, False)}, {"shape": (64,), "typestr": "<f4", "data": None},
    {"shape": "64", "typestr": "<f4", "data": (4096, False)}, {"shape": (64,), "typestr": 5, "data": (4096, False)},
    {"shape": (64,), "typestr": "<f4", "data": (4096, False), "strides": (4, 4)}, [], None,
    {"shape": (64,), "typestr": "<f8", "data": (4096, False)},
    {"shape": (8, 8), "typestr": "<f4", "data": (4096, False)},
]
SCALARS = [2.0, 0, -1, 10 ** 400, float("nan"), float("inf"), 1e300, "2", None, [1.0], True, 1e-45]


def api_arguments(rng: random.Random) -> Iterator[Mutant]:
    while True:
        if rng.random() < 0.5:
            name = rng.choice(sorted(API_VALUES))
            value = rng.choice(API_VALUES[name])

            def run(workdir: Path, name=name, value=value) -> None:
                from fusec.api import build_program, resolve_library
                from fusec.frontend import load_script
                if name == "library":
                    resolve_library(value)
                    return
                dag = load_script(SMALL, library())
                build_program(dag, library(), **{"dtype": "float32", "predictor": h100(), name: value},
                              spill_arch=None)

            yield f"compile({name}={value!r})", run
        else:
            array, alpha = rng.choice(ARRAYS), rng.choice(SCALARS)

            def run(workdir: Path, array=array, alpha=alpha) -> None:
                program = _sscal_program()
                obj = _FakeArray(array) if array is not None else None
                binding = program.bind({"x": obj, "alpha": alpha})
                assert all(math.isfinite(v) for v in binding.scalars.values())

            yield f"program(x={array!r}, alpha={alpha!r})", run


@functools.lru_cache(maxsize=None)
def _sscal_program():
    import fusec
    from fusec.frontend import load_script
    from fusec.space import unfused_plan
    dag = load_script(SMALL, library())
    return fusec.compile(SMALL, library(), "float32", plan=unfused_plan(dag, library()))


GENERATORS: dict[str, Callable[[random.Random], Iterator[Mutant]]] = {
    "script": scripts, "library": libraries, "database": databases, "entry": entries,
    "cli": command_lines, "api": api_arguments,
}
