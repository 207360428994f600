"""out=, stream= and DLPack arguments, checked before anything runs (no GPU needed)."""

import numpy as np
import pytest

from fusec import oracle
from fusec.errors import ArgumentError
from fusec.runtime import streams
from tests.helpers import program

pytestmark = pytest.mark.unit


def _bicgk(m=5, n=7):
    prog = program("bicgk", "float32")
    inputs = oracle.random_inputs(prog.dag, {"m": m, "n": n}, "float32", np.random.default_rng(3))
    return prog, inputs


def test_out_arrays_of_the_right_shape_are_taken():
    prog, inputs = _bicgk()
    q, s = np.empty(5, np.float32), np.empty(7, np.float32)
    chosen = prog.check_out(prog.bind(inputs), {"q": q, "s": s})
    assert {a.name for a in chosen.values()} == {"out['q']", "out['s']"}
    assert prog.check_out(prog.bind(inputs), None) == {}


@pytest.mark.parametrize("out, argument, message", [
    ({"x": np.empty(5, np.float32)}, "out", "not a result"),
    ({"q": np.empty(6, np.float32)}, "out['q']", r"shape \(6,\)"),
    ({"q": np.empty(5, np.float64)}, "out['q']", "dtype float64"),
    ({"q": np.empty((5, 1), np.float32)}, "out['q']", "vector"),
    ({"q": np.empty(10, np.float32)[::2]}, "out['q']", "C-contiguous"),
    ([np.empty(5, np.float32)], "out", "mapping"),
])
def test_bad_out_arrays_name_themselves(out, argument, message):
    prog, inputs = _bicgk()
    with pytest.raises(ArgumentError, match=message) as caught:
        prog.check_out(prog.bind(inputs), out)
    assert caught.value.argument == argument


def test_results_may_not_share_memory():
    prog, inputs = _bicgk(m=7, n=7)
    both = np.empty(7, np.float32)
    with pytest.raises(ArgumentError, match="two results cannot share memory"):
        prog.check_out(prog.bind(inputs), {"q": both, "s": both})


def test_an_out_array_over_an_input_read_while_it_is_written_is_refused():
    """BiCGK's one kernel reads r while it writes q: q may not overwrite r."""
    prog, inputs = _bicgk(m=7, n=7)
    with pytest.raises(ArgumentError, match="overlaps the input 'r'") as caught:
        prog.check_out(prog.bind(inputs), {"q": inputs["r"]})
    assert caught.value.argument == "out['q']"


@pytest.mark.parametrize("bad", ["s1", 1.5, True, -3, object()])
def test_a_stream_that_is_no_stream_is_named(bad):
    with pytest.raises(ArgumentError) as caught:
        streams.given(bad)
    assert caught.value.argument == "stream"


def test_streams_of_every_framework_give_their_handle():
    class CupyLike:
        ptr = 0x11

    class TorchLike:
        cuda_stream = 0x22

    class PycudaLike:
        handle = 0x33

    assert [streams.given(s) for s in (CupyLike(), TorchLike(), PycudaLike(), 0x44, 0)] == [0x11, 0x22, 0x33, 0x44, 0]


def test_a_bad_stream_is_refused_before_anything_runs():
    prog, inputs = _bicgk()
    with pytest.raises(ArgumentError) as caught:
        prog(**inputs, stream="default")
    assert caught.value.argument == "stream"


@pytest.mark.parametrize("cai, expected", [({"stream": None}, None), ({}, None), ({"stream": 1}, 0),
                                           ({"stream": 2}, 2), ({"stream": 0x7000}, 0x7000)])
def test_the_interface_stream_to_wait_for(cai, expected):
    assert streams.interface_stream(cai) == expected


class _HostDlpack:
    """A DLPack array on the host (a CPU tensor, say), not NumPy."""

    def __dlpack__(self, stream=None):
        raise AssertionError("not to be read")

    def __dlpack_device__(self):
        return (1, 0)


def test_a_dlpack_array_on_the_host_is_refused_by_name():
    prog, inputs = _bicgk()
    with pytest.raises(ArgumentError, match="not on a CUDA GPU") as caught:
        prog.bind(dict(inputs, p=_HostDlpack()))
    assert caught.value.argument == "p"
