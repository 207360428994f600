"""Checking run-time arguments (fusec/runtime/arrays.py) without a GPU.

Every mistake raises ArgumentError naming the argument. Device arrays are
faked: any object with ``__cuda_array_interface__`` is one, and nothing here
dereferences its pointer.
"""

from __future__ import annotations

import numpy as np
import pytest

from fusec.errors import ArgumentError
from fusec.runtime.arrays import DEVICE, NUMPY, bind
from tests.helpers import program

F32, F64 = np.float32, np.float64
POINTER = 0x7F00_0000_1000


def bicgk(dtype="float32"):
    return program("bicgk", dtype)


def bicgk_args(m=3, n=5, dtype=F32, **override):
    args = {"A": np.ones((m, n), dtype), "p": np.ones(n, dtype), "r": np.ones(m, dtype)}
    args.update(override)
    return args


def sgemv_args(m=3, n=5, dtype=F32, **override):
    args = {"A": np.ones((m, n), dtype), "x": np.ones(n, dtype), "y": np.ones(m, dtype),
            "alpha": 0.5, "beta": -1.0}
    args.update(override)
    return args


def error(prog, args) -> ArgumentError:
    with pytest.raises(ArgumentError) as info:
        prog.bind(args)
    return info.value


def device_class(module: str = "fake_device", name: str = "ndarray", **extra):
    """A class standing for some framework's device array type."""
    def interface(self):
        return self._cai
    return type(name, (), {"__module__": module, "__cuda_array_interface__": property(interface),
                           **extra})


def device(shape, typestr="<f4", strides=None, pointer=POINTER, module="fake_device", **extra):
    obj = device_class(module, **extra)()
    obj._cai = {"shape": tuple(shape), "typestr": typestr, "data": (pointer, False),
                "strides": strides, "version": 3}
    obj.shape = tuple(shape)
    return obj


# -- what binds -------------------------------------------------------------------


def test_numpy_arguments_bind_and_give_the_sizes():
    args = bicgk_args(m=3, n=5)
    binding = bicgk().bind(args)
    assert binding.sizes == {"m": 3, "n": 5}
    assert binding.scalars == {}
    assert {a.name for a in binding.arrays.values()} == {"A", "p", "r"}
    for array in binding.arrays.values():
        assert (array.where, array.family, array.pointer) == (NUMPY, "numpy", None)
        assert array.obj is args[array.name]
        assert array.shape == args[array.name].shape
    assert binding.family == "numpy"


def test_an_array_still_being_written_is_waited_for_before_its_address_is_taken():
    """JAX's interface (version 2, no stream) comes before its array is written: an array
    offering block_until_ready is waited for by the host; one naming a stream is not."""
    waits = []
    unordered = {"block_until_ready": lambda self: waits.append(self)}
    A, p = device((3, 5), **unordered), device((5,), **unordered)
    A._cai["version"] = p._cai["version"] = 2
    bicgk().bind(bicgk_args(A=A, p=p, r=device((3,))))
    assert waits == [A, p]
    ordered = device((3, 5), **unordered)
    ordered._cai["stream"] = 7  # its producer's stream: the GPU waits for it, not the host
    bound = bicgk().bind(bicgk_args(A=ordered)).arrays.values()
    assert next(a.stream for a in bound if a.name == "A") == 7 and waits == [A, p]


@pytest.mark.parametrize("m,n", [(1, 1), (1, 7), (7, 1), (33, 1000), (1000, 33)])
def test_rectangular_sizes_are_inferred(m, n):
    assert bicgk().bind(bicgk_args(m=m, n=n)).sizes == {"m": m, "n": n}
    assert program("sgemv", "float32").bind(sgemv_args(m=m, n=n)).sizes == {"m": m, "n": n}


def test_bind_function_matches_program_bind():
    prog = bicgk()
    args = bicgk_args()
    direct = bind(prog.dag, prog.dtype, args)
    assert direct.sizes == prog.bind(args).sizes
    assert direct.arrays.keys() == prog.bind(args).arrays.keys()


@pytest.mark.parametrize("value", [0.5, 2, np.float32(1.5), np.float64(-1), np.int64(3),
                                   np.array(0.25), float("inf")],
                         ids=["float", "int", "np.float32", "np.float64", "np.int64", "0-d", "inf"])
def test_scalars_are_host_numbers(value, monkeypatch):
    monkeypatch.setenv("FUSEC_NONFINITE_SCALARS", "1")  # inf passes
    prog = program("sgemv", "float64")
    binding = prog.bind(sgemv_args(dtype=F64, alpha=value))
    (alpha,) = [v for v in prog.dag.inputs if prog.dag.value(v).name == "alpha"]
    assert binding.scalars[alpha] == float(value)
    assert type(binding.scalars[alpha]) is float


def test_float64_program_takes_float64():
    binding = program("sgemv", "float64").bind(sgemv_args(m=4, n=2, dtype=F64))
    assert binding.sizes == {"m": 4, "n": 2}


# -- names --------------------------------------------------------------------------


def test_unknown_name():
    e = error(bicgk(), bicgk_args(x=np.ones(5, F32)))
    assert e.argument == "x"
    assert "not an input" in str(e) and "A, p, r" in str(e)


def test_missing_name():
    args = bicgk_args()
    del args["r"]
    e = error(bicgk(), args)
    assert e.argument == "r" and "missing" in str(e)


def test_output_name_is_not_an_argument():
    e = error(bicgk(), bicgk_args(q=np.ones(3, F32)))
    assert e.argument == "q"


# -- shapes -------------------------------------------------------------------------


def test_matrix_given_as_1d():
    e = error(bicgk(), bicgk_args(A=np.ones(15, F32)))
    assert e.argument == "A" and "matrix" in str(e) and "(15,)" in str(e)


def test_matrix_given_as_3d():
    e = error(bicgk(), bicgk_args(A=np.ones((3, 5, 1), F32)))
    assert e.argument == "A" and "matrix" in str(e)


def test_vector_given_as_2d():
    e = error(bicgk(), bicgk_args(p=np.ones((5, 1), F32)))
    assert e.argument == "p" and "vector" in str(e) and "(5, 1)" in str(e)


def test_vector_given_as_0d():
    e = error(bicgk(), bicgk_args(p=np.array(1.0, F32)))
    assert e.argument == "p" and "vector" in str(e)


def test_sizes_that_disagree_name_both_arguments():
    e = error(bicgk(), bicgk_args(m=3, n=5, r=np.ones(4, F32)))
    assert e.argument == "r"
    assert "'A'" in str(e) and "m = 3" in str(e) and "4" in str(e)
    e = error(bicgk(), bicgk_args(m=3, n=5, p=np.ones(6, F32)))
    assert e.argument == "p" and "'A'" in str(e) and "n = 5" in str(e)


def test_square_matrix_given_a_rectangle():
    prog = program("gesummv", "float32")
    args = {"A": np.ones((3, 4), F32), "B": np.ones((3, 3), F32), "x": np.ones(3, F32),
            "alpha": 1.0, "beta": 1.0}
    e = error(prog, args)
    assert e.argument == "A" and "axis 1" in str(e) and "axis 0" in str(e)


@pytest.mark.parametrize("name,shape", [("A", (0, 5)), ("A", (3, 0)), ("p", (0,))])
def test_empty_array(name, shape):
    args = bicgk_args(m=3, n=5)
    args[name] = np.ones(shape, F32)
    e = error(bicgk(), args)
    assert e.argument == name and "empty" in str(e)


# -- element types --------------------------------------------------------------------


def test_float64_to_a_float32_program():
    e = error(bicgk("float32"), bicgk_args(p=np.ones(5, F64)))
    assert e.argument == "p" and "float64" in str(e) and "float32" in str(e)


def test_float32_to_a_float64_program():
    e = error(bicgk("float64"), bicgk_args(dtype=F64, A=np.ones((3, 5), F32)))
    assert e.argument == "A" and "float64" in str(e) and "float32" in str(e)


@pytest.mark.parametrize("dtype", [np.int32, np.float16, np.complex64, np.bool_])
def test_other_element_types(dtype):
    e = error(bicgk(), bicgk_args(r=np.ones(3, dtype)))
    assert e.argument == "r" and np.dtype(dtype).name in str(e)


def test_wrong_dtype_message_suggests_only_supported_dtypes():
    e = error(bicgk(), bicgk_args(r=np.ones(3, np.int32)))
    assert "dtype='int32'" not in str(e)


# -- layout ---------------------------------------------------------------------------


def test_fortran_order_matrix():
    e = error(bicgk(), bicgk_args(A=np.asfortranarray(np.ones((3, 5), F32))))
    assert e.argument == "A" and "C-contiguous" in str(e)


def test_strided_vector_slice():
    e = error(bicgk(), bicgk_args(p=np.ones(10, F32)[::2]))
    assert e.argument == "p" and "C-contiguous" in str(e)


def test_column_block_of_a_matrix():
    e = error(bicgk(), bicgk_args(A=np.ones((3, 8), F32)[:, :5]))
    assert e.argument == "A" and "C-contiguous" in str(e)


def test_contiguous_views_bind():
    rows = np.ones((6, 5), F32)[1:4]  # whole rows: contiguous
    assert bicgk().bind(bicgk_args(A=rows)).sizes == {"m": 3, "n": 5}


# -- scalars ----------------------------------------------------------------------------


@pytest.mark.parametrize("value,what", [(np.ones(3), "ndarray"), (np.ones(1), "ndarray"), ([1.0], "list"),
                                        (True, "bool"), (np.bool_(False), "bool"), ("1.0", "str"),
                                        (None, "NoneType"), (1 + 2j, "complex")],
                         ids=["array", "1-element", "list", "bool", "np.bool_", "str", "None", "complex"])
def test_scalar_given_something_else(value, what):
    e = error(program("sgemv", "float32"), sgemv_args(alpha=value))
    assert e.argument == "alpha" and "scalar" in str(e) and what in str(e)


def test_scalar_given_a_device_array():
    e = error(program("sgemv", "float32"), sgemv_args(beta=device((1,))))
    assert e.argument == "beta" and "device array" in str(e)


@pytest.mark.parametrize("value", [1.5, 3, [1.0, 2.0, 3.0], "A", None],
                         ids=["float", "int", "list", "str", "None"])
def test_array_given_a_non_array(value):
    e = error(bicgk(), bicgk_args(A=value))
    assert e.argument == "A" and "__cuda_array_interface__" in str(e)


def test_numpy_scalar_given_for_a_vector():
    e = error(bicgk(), bicgk_args(p=np.float32(1.0)))
    assert e.argument == "p"


# -- device arrays ------------------------------------------------------------------------


def test_device_array_binds_in_place():
    args = bicgk_args(m=3, n=5, A=device((3, 5), pointer=POINTER), p=device((5,), pointer=POINTER + 4096))
    binding = bicgk().bind(args)
    assert binding.sizes == {"m": 3, "n": 5}
    a, p, r = (next(x for x in binding.arrays.values() if x.name == name) for name in "Apr")
    assert (a.where, a.pointer, a.shape, a.family) == (DEVICE, POINTER, (3, 5), "cuda")
    assert (p.where, p.pointer) == (DEVICE, POINTER + 4096)
    assert (r.where, r.pointer) == (NUMPY, None)
    assert a.obj is args["A"]
    assert binding.family == "cuda"


def test_device_array_with_explicit_c_strides_binds():
    binding = bicgk().bind(bicgk_args(A=device((3, 5), strides=(20, 4))))
    assert binding.sizes == {"m": 3, "n": 5}


def test_device_array_of_float64_binds_to_a_float64_program():
    binding = bicgk("float64").bind(bicgk_args(dtype=F64, A=device((3, 5), "<f8", strides=(40, 8))))
    assert binding.sizes == {"m": 3, "n": 5}


def test_device_array_sizes_are_checked_against_numpy_ones():
    e = error(bicgk(), bicgk_args(m=3, n=5, p=device((6,))))
    assert e.argument == "p" and "'A'" in str(e)


@pytest.mark.parametrize("typestr,program_dtype", [("<f8", "float32"), ("<f4", "float64"), ("<i4", "float32"),
                                                   ("<f2", "float32")])
def test_device_array_of_the_wrong_type(typestr, program_dtype):
    dtype = F32 if program_dtype == "float32" else F64
    e = error(bicgk(program_dtype), bicgk_args(dtype=dtype, p=device((5,), typestr)))
    assert e.argument == "p" and "dtype" in str(e) and program_dtype in str(e)


def test_device_array_with_a_nonsense_type():
    e = error(bicgk(), bicgk_args(p=device((5,), "not a type")))
    assert e.argument == "p" and "not a type" in str(e)


@pytest.mark.parametrize("name,shape,strides", [
    ("A", (3, 5), (4, 12)),  # Fortran order
    ("A", (3, 5), (32, 4)),  # rows with gaps
    ("p", (5,), (8,)),  # every other value
    ("p", (5,), (0,)),  # broadcast
], ids=["fortran", "row-gaps", "stride-2", "broadcast"])
def test_device_array_that_is_not_contiguous(name, shape, strides):
    e = error(bicgk(), bicgk_args(m=3, n=5, **{name: device(shape, strides=strides)}))
    assert e.argument == name and "C-contiguous" in str(e)


def test_device_row_of_a_larger_matrix_binds_like_numpy():
    host = np.ones((4, 5), F32)[1:2]  # one row: C-contiguous to NumPy, strides (20, 4)
    assert host.flags.c_contiguous
    assert bicgk().bind(bicgk_args(m=1, n=5, A=host)).sizes == {"m": 1, "n": 5}
    row = device((1, 5), strides=(64, 4))  # the same row of a 16-column matrix
    assert bicgk().bind(bicgk_args(m=1, n=5, A=row)).sizes == {"m": 1, "n": 5}


@pytest.mark.parametrize("name,shape", [("A", (15,)), ("A", (3, 5, 1)), ("p", (5, 1)), ("p", ())])
def test_device_array_of_the_wrong_rank(name, shape):
    e = error(bicgk(), bicgk_args(m=3, n=5, **{name: device(shape)}))
    assert e.argument == name and "dimension" in str(e)


def test_empty_device_array():
    e = error(bicgk(), bicgk_args(p=device((0,), strides=(4,))))
    assert e.argument == "p" and "empty" in str(e)


def test_size_past_int32_is_refused():
    e = error(program("sscal", "float32"), {"x": device((2 ** 31,)), "alpha": 1.0})
    assert e.argument == "x" and "too large" in str(e)


# -- which framework the results go to ----------------------------------------------------


@pytest.mark.parametrize("module,family", [("cupy", "cupy"), ("cupy._core.core", "cupy"), ("torch", "torch"),
                                           ("pycuda.gpuarray", "pycuda"), ("numba.cuda", "cuda"),
                                           ("fake_device", "cuda")])
def test_family_of_a_device_array(module, family):
    binding = bicgk().bind(bicgk_args(p=device((5,), module=module)))
    (p,) = [a for a in binding.arrays.values() if a.name == "p"]
    assert p.family == family
    assert binding.family == family


def test_an_object_with_gpudata_is_pycuda():
    binding = bicgk().bind(bicgk_args(p=device((5,), gpudata=POINTER)))
    assert binding.family == "pycuda"


def test_device_family_wins_over_numpy_and_torch_over_cupy():
    args = bicgk_args(A=device((3, 5), module="cupy"), p=device((5,), module="torch"))
    assert bicgk().bind(args).family == "torch"
    args = bicgk_args(A=device((3, 5), module="fake_device"), p=device((5,), module="cupy"))
    assert bicgk().bind(args).family == "cupy"


@pytest.mark.parametrize("method", ["describe", "minimum_bytes"])
def test_sizes_that_leave_one_out_name_the_argument(method):
    prog = bicgk()
    with pytest.raises(ArgumentError) as info:
        getattr(prog, method)({"n": 5})  # bicgk's sizes are m and n
    assert info.value.argument == "sizes" and "gives no value for m" in str(info.value)
    with pytest.raises(ArgumentError) as info:
        getattr(prog, method)(5)
    assert info.value.argument == "sizes" and "is a int" in str(info.value)
    assert prog.minimum_bytes({"m": 3, "n": 5}) == (3 * 5 + 5 + 3 + 3 + 5) * 4  # A, p, r in; q, s out


def test_fusec_nonfinite_scalars_and_fusec_lineinfo_are_1_or_0(monkeypatch):
    """Each switch takes 1 or 0: 0 is off (FUSEC_LINEINFO=0 once turned -lineinfo on), and
    anything else is an ArgumentError naming the variable, never a quiet guess."""
    from fusec import nvcc
    from fusec.errors import ArgumentError
    prog = program("sgemv", "float64")
    for raw, passes in (("0", False), ("", False), ("1", True)):
        monkeypatch.setenv("FUSEC_NONFINITE_SCALARS", raw)
        if passes:
            prog.bind(sgemv_args(dtype=F64, alpha=float("inf")))
        else:
            with pytest.raises(ArgumentError, match="a scalar must be finite"):
                prog.bind(sgemv_args(dtype=F64, alpha=float("inf")))
    monkeypatch.setenv("FUSEC_NONFINITE_SCALARS", "yes")
    with pytest.raises(ArgumentError, match=r"\$FUSEC_NONFINITE_SCALARS"):
        prog.bind(sgemv_args(dtype=F64, alpha=float("inf")))
    for raw, wanted in (("0", False), ("1", True), ("", False)):
        monkeypatch.setenv("FUSEC_LINEINFO", raw)
        assert ("-lineinfo" in nvcc.nvcc_options("sm_90", False)) is wanted
    monkeypatch.setenv("FUSEC_LINEINFO", "on")
    with pytest.raises(ArgumentError, match=r"\$FUSEC_LINEINFO"):
        nvcc.nvcc_options("sm_90", False)
