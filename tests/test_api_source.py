"""fusec.compile(source=...), the exported Program, and the one size rule of the API and the CLI."""

import re

import pytest

import fusec
from fusec.api import default_sizes, resolve_library
from fusec.errors import ArgumentError, UndefinedNameError
from fusec.frontend import load_script

pytestmark = pytest.mark.unit

BICGK = open("scripts/bicgk.script").read()


def test_source_compiles_like_the_file():
    from_text = fusec.compile(source=BICGK, name="bicgk", gpu="h100", tuned=False)
    from_file = fusec.compile("scripts/bicgk.script", gpu="h100", tuned=False)
    assert isinstance(from_text, fusec.Program)
    # the same program; only the name the comments give the script differs
    def unnamed(source):
        return re.sub(r"(scripts/)?bicgk(\.script)?:", "SCRIPT:", source.replace("scripts/bicgk.script (", "bicgk ("))
    assert unnamed(from_text.source) == unnamed(from_file.source)


def test_source_errors_name_the_given_name():
    with pytest.raises(UndefinedNameError) as caught:
        fusec.compile(source="matrix A[m, n];\nq = sgemv(A, p);\n", name="mine", gpu="h100")
    assert str(caught.value).startswith("mine:2:")
    with pytest.raises(UndefinedNameError, match=r"^<string>:2:"):
        fusec.compile(source="matrix A[m, n];\nq = sgemv(A, p);\n", gpu="h100")


@pytest.mark.parametrize("kwargs, argument", [({}, "script"),
                                              ({"script": "scripts/bicgk.script", "source": BICGK}, "script"),
                                              ({"source": b"bytes"}, "source"),
                                              ({"source": BICGK, "name": ""}, "name"),
                                              ({"script": 42}, "script")])
def test_bad_script_arguments(kwargs, argument):
    with pytest.raises(ArgumentError) as caught:
        fusec.compile(gpu="h100", **kwargs)
    assert caught.value.argument == argument


def test_n_sets_every_size_as_on_the_command_line():
    dag = load_script("scripts/bicgk.script", resolve_library(None))
    assert default_sizes(dag, {"n": 16384}) == {"m": 16384, "n": 16384}
    assert default_sizes(dag, {"n": 16384, "m": 100}) == {"m": 100, "n": 16384}
    assert default_sizes(dag, {"m": 100}) == {"m": 100, "n": 8192}
    with pytest.raises(ArgumentError, match="no size k"):
        default_sizes(dag, {"k": 3})
