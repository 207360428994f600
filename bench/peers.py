"""fusec against the cuBLAS call sequence, PyTorch (eager and torch.compile) and JAX.

    python -m bench.peers [--scripts bicgk,gemver] [--dtype float32|float64|both]
                          [--size n=16384] [--vector-size 67108864] [--repeat 20]
                          [--peers cublas,torch,torch.compile,jax] [--out bench/results] [--name h100-peers]

For each sequence of Table 1 every contender runs in one process, on one GPU,
on the same inputs: CuPy arrays for fusec and cuBLAS, PyTorch tensors that
alias them (DLPack, no copy), JAX arrays made from the same values. Each
sequence is written once, in SEQUENCES, as a function of an array module
(``torch``, ``jax.numpy``, ``numpy``) and the inputs: what a user of that
framework writes. PyTorch eager runs it as it is, torch.compile compiles it
(default mode, static shapes, ``fullgraph=True`` when that works), JAX jits
it. The cuBLAS side is bench.cublas: the call sequence a BLAS user writes,
copies included where a routine works in place (the paper's "S" tag).

Before anything is timed every peer's results are compared with fusec's
(largest difference relative to the largest magnitude, as bench.fusion does):
a peer that disagrees is reported WRONG, left untimed, and the command exits 1.
A peer whose import fails, or that fails to run (torch.compile without
triton, say), is reported skipped with the reason, not as an error.

Before each sequence the last one's arrays are freed (a garbage collection
first, then CuPy's pool and PyTorch's cache) and the GPU is left alone for
SETTLE_S (0.2 s): fusec, timed first, had paid for the last sequence's frees.

Times (median of --repeat, after 3 warm-ups), two for every contender:

- the GPU's time: a spinning kernel (fusec.runtime.cuda.TIMING_KERNELS) goes
  first on the contender's stream, then CUDA events bracket the work, so the
  start event fires once the work is queued and the host's launching is left
  out. fusec: ``Program.time(host=False)``; cuBLAS: CuPy events on CuPy's
  current stream; PyTorch: ``torch.cuda.Event`` on PyTorch's current stream,
  the spinning kernel launched onto that same stream through CuPy
  (``fusec.runtime.streams.cupy_stream``). PyTorch's and CuPy's default streams are
  both the legacy default stream (handle 0) unless per-thread default streams
  are on (``CUPY_CUDA_PER_THREAD_DEFAULT_STREAM=1``, or a PyTorch built with
  them); the spinner goes onto PyTorch's stream by its handle, so it is right
  either way. A sample whose queuing outlasted the spin (so host time leaked
  in) is taken again, up to fusec.runtime.cuda.RETAKES times (fusec's own
  clock and this bench's alike), and is counted and reported as "late" only if
  it stays late. JAX (marked †) runs on XLA's own
  stream, which it does not expose, and events are not available there: its
  GPU figure is the pipelined time, --depth calls queued back to back
  (JAX dispatches asynchronously) and one wait, divided by --depth; once the
  host runs ahead the GPU never waits, so this is the GPU's time per call
  plus the gaps between calls. The same pipelined figure is measured for
  every contender (``pipelined_us`` in the JSON) as its calibration.
- the time with the host's launching, as a Python caller waits for it:
  events around the whole call (fusec: CuPy's events around ``program(**inputs)``,
  as a CuPy user calls it, binding or finding its prepared call, allocating the
  outputs and launching: a warm call in C where fusec's extension builds, the
  report says which; CuPy; PyTorch), and for JAX
  a host timer around the call and ``block_until_ready`` (which also counts
  the host's wake-up after the GPU finishes, a few µs).

GB/s are on minimum bytes (each input read once, each output written once).
The copy bandwidth is measured in the same run (bench.fusion.copy_bandwidth),
every precision's before any contender runs;
the floor is minimum bytes / copy bandwidth. ATAX and SGEMVT pass over their
matrix twice (the second time from L2 where fusec stripes them) and are judged
against their two-pass floor (one more matrix), at both sizes; GEMVER's three-pass floor is reported
beside its floor
(``three_pass_floor_us``), its verdicts staying on the floor. TF32 is off for every framework
(``jax_default_matmul_precision="highest"``, PyTorch's float32 matmul
precision "highest"), JAX runs with x64 enabled (float64 works; float32
arrays stay float32) and without preallocating GPU memory
(XLA_PYTHON_CLIENT_PREALLOCATE=false, set before JAX is imported).
Sizes: matrices n x n, n = 16384 for float32 and 8192 for float64 unless
--size says; vectors of the vector sequences n*n/4 (float32) or n*n/2
(float64) elements unless --vector-size says: 2^26 and 2^25 at the default n,
the paper's pairing, every array past the 50 MB L2.

Writes <out>/<name>.md (a summary and a detail table per dtype) and .json.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import functools
import gc
import importlib
import importlib.util
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ("atax", "axpydot", "bicgk", "gemver", "gesummv", "madd", "sgemv", "sgemvt", "sscal", "vadd",
           "waxpby")
PEERS = ("cublas", "torch", "torch.compile", "jax")
LABELS = {"fusec": "fusec", "cublas": "cuBLAS", "torch": "PyTorch", "torch.compile": "torch.compile",
          "jax": "JAX"}
DEFAULT_N = {"float32": 16384, "float64": 8192}
MISMATCH = {"float32": 1e-3, "float64": 1e-9}  # largest relative difference a peer may show
SPEEDUP_TARGETS = {"bicgk": 1.8, "gemver": 1.15}  # over the best peer, at the large sizes
SPIN_CYCLES = 1_000_000  # ~0.5 ms: longer than PyTorch eager takes to queue GEMVER's ~10 kernels
DEPTH = 10  # calls queued back to back for the pipelined time
# Seconds to wait after a sequence's arrays are freed, before the next one is timed. Timed
# right after GEMVER's sequence (fp32 n = 16384, every peer), fusec's SGEMV fp64 n = 8192
# took 199 us on the GPU for its first 20 samples and 169 after; 0.2 s of waiting, or a full
# garbage collection, left it at 169 from the first sample (H100, two rounds each). What the
# GPU does meanwhile was not found. fusec is the first contender timed on a sequence, so it
# alone paid.
SETTLE_S = 0.2


# ---------------------------------------------------------------------------
# The sequences, written once for every array module (scripts/*.script)
# ---------------------------------------------------------------------------

def _atax(xp, i):  # y = A^T (A x)
    return (i["A"].T @ (i["A"] @ i["x"]),)


def _axpydot(xp, i):  # z = w - alpha v; r = z . u
    z = i["w"] - i["alpha"] * i["v"]
    return z, xp.dot(z, i["u"])


def _bicgk(xp, i):  # q = A p; s = A^T r
    return i["A"] @ i["p"], i["A"].T @ i["r"]


def _gemver(xp, i):  # B = A + u1 v1^T + u2 v2^T; x = beta B^T y + z; w = alpha B x
    B = i["A"] + xp.outer(i["u1"], i["v1"]) + xp.outer(i["u2"], i["v2"])
    x = i["beta"] * (B.T @ i["y"]) + i["z"]
    return B, x, i["alpha"] * (B @ x)


def _gesummv(xp, i):  # y = alpha A x + beta B x
    return (i["alpha"] * (i["A"] @ i["x"]) + i["beta"] * (i["B"] @ i["x"]),)


def _madd(xp, i):  # C = A + B
    return (i["A"] + i["B"],)


def _sgemv(xp, i):  # z = alpha A x + beta y
    return (i["alpha"] * (i["A"] @ i["x"]) + i["beta"] * i["y"],)


def _sgemvt(xp, i):  # x = beta A^T y + z; w = alpha A x
    x = i["beta"] * (i["A"].T @ i["y"]) + i["z"]
    return x, i["alpha"] * (i["A"] @ x)


def _sscal(xp, i):  # x = alpha x, out of place
    return (i["alpha"] * i["x"],)


def _vadd(xp, i):  # x = w + y + z
    return (i["w"] + i["y"] + i["z"],)


def _waxpby(xp, i):  # w = alpha x + beta y
    return (i["alpha"] * i["x"] + i["beta"] * i["y"],)


# script -> function(array module, inputs by name) -> the script's results in return order
SEQUENCES: dict[str, Callable[[Any, dict], tuple]] = {
    "atax": _atax, "axpydot": _axpydot, "bicgk": _bicgk, "gemver": _gemver, "gesummv": _gesummv,
    "madd": _madd, "sgemv": _sgemv, "sgemvt": _sgemvt, "sscal": _sscal, "vadd": _vadd, "waxpby": _waxpby,
}


# ---------------------------------------------------------------------------
# Timing
# ---------------------------------------------------------------------------

def median_us(times_ms: list[float]) -> float:
    return statistics.median(times_ms) * 1e3


def quartiles_us(times_ms: list[float]) -> list[float]:
    if len(times_ms) < 2:
        return [t * 1e3 for t in times_ms * 2]
    q = statistics.quantiles(times_ms, n=4)
    return [q[0] * 1e3, q[2] * 1e3]


@functools.lru_cache(maxsize=None)
def _spin_function(cupy):
    from fusec.runtime.cuda import TIMING_KERNELS
    return cupy.RawModule(code=TIMING_KERNELS).get_function("fusec_spin")


class Clock:
    """CUDA events on one stream, with the spinning kernel launched onto that
    stream first for the GPU's time (see the module doc)."""

    def __init__(self, cupy, stream_handle: int, new_event, record, elapsed_ms):
        self.cupy = cupy
        self.stream_handle = stream_handle
        self.new_event, self.record, self.elapsed_ms = new_event, record, elapsed_ms
        self._spin_s: float | None = None

    @classmethod
    def for_cupy(cls, cupy) -> "Clock":
        stream = cupy.cuda.get_current_stream()
        return cls(cupy, stream.ptr, cupy.cuda.Event, lambda e: e.record(stream), cupy.cuda.get_elapsed_time)

    @classmethod
    def for_torch(cls, torch, cupy) -> "Clock":
        stream = torch.cuda.current_stream()
        return cls(cupy, stream.cuda_stream, lambda: torch.cuda.Event(enable_timing=True),
                   lambda e: e.record(stream), lambda a, b: a.elapsed_time(b))

    def spin(self) -> None:
        from fusec.runtime.streams import cupy_stream  # CuPy's ExternalStream is deprecated where it has another
        stream = self.cupy.cuda.Stream.null if self.stream_handle == 0 else cupy_stream(self.cupy, self.stream_handle)
        with stream:
            _spin_function(self.cupy)((1,), (32,), (np.int64(SPIN_CYCLES),))

    def spin_seconds(self) -> float:
        """How long the spinning kernel holds the stream (median of 3)."""
        if self._spin_s is None:
            _spin_function(self.cupy)  # compiled before the events, not between them
            start, end = self.new_event(), self.new_event()
            samples = []
            for _ in range(3):
                self.record(start)
                self.spin()
                self.record(end)
                end.synchronize()
                samples.append(self.elapsed_ms(start, end) * 1e-3)
            self._spin_s = statistics.median(samples)
        return self._spin_s

    def times(self, run: Callable[[], Any], repeat: int, *, gpu_only: bool, warmup: int = 3):
        """(milliseconds of each run, how many were late): ``gpu_only`` spins
        first; a sample is late when queuing it took longer than the spin, and
        is taken again up to RETAKES times, as fusec's own clock does, so that
        every contender gets the same second chances; one still late is counted."""
        from fusec.runtime.cuda import RETAKES
        spin_s = self.spin_seconds() if gpu_only else None
        for _ in range(warmup):
            run()
        start, end = self.new_event(), self.new_event()
        out, late = [], 0
        for _ in range(repeat):
            for _ in range(RETAKES + 1 if gpu_only else 1):
                began = time.perf_counter()
                if gpu_only:
                    self.spin()
                self.record(start)
                result = run()
                self.record(end)
                queued = time.perf_counter() - began
                end.synchronize()
                del result
                if not (gpu_only and queued > spin_s):
                    break
            out.append(self.elapsed_ms(start, end))
            late += bool(gpu_only and queued > spin_s)
        return out, late


def host_timer_ms(call: Callable[[], Any], wait: Callable[[Any], Any], repeat: int, warmup: int = 3) -> list[float]:
    """Milliseconds from the call to the end of waiting for its result, on the host's clock."""
    for _ in range(warmup):
        wait(call())
    out = []
    for _ in range(repeat):
        began = time.perf_counter()
        wait(call())
        out.append((time.perf_counter() - began) * 1e3)
    return out


def pipelined_ms(call: Callable[[], Any], wait: Callable[[Any], Any], repeat: int, depth: int = DEPTH,
                 warmup: int = 2) -> list[float]:
    """Milliseconds per call of ``depth`` calls queued back to back and one wait
    for the last (work on one stream finishes in order), ``repeat`` samples."""
    for _ in range(warmup):
        wait(call())
    out = []
    for _ in range(repeat):
        began = time.perf_counter()
        result = None
        for _ in range(depth):
            result = call()
        wait(result)
        out.append((time.perf_counter() - began) * 1e3 / depth)
        del result
    return out


# ---------------------------------------------------------------------------
# Contenders
# ---------------------------------------------------------------------------

class Skip(Exception):
    """A peer that cannot run here (or on this sequence): reported, never an error."""


def _reason(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}" if text else type(exc).__name__


@dataclasses.dataclass
class Prepared:
    """One contender ready on one sequence: its results (for the check) and how to time it."""

    outputs: tuple
    gpu: Callable[[int], tuple[list[float], int]]  # repeat -> (ms, late samples)
    host: Callable[[int], list[float]]
    pipelined: Callable[[int], list[float]]
    gpu_method: str = "spin + events"
    compile_s: float | None = None
    note: str = ""


class Peer:
    """A framework compared with fusec. ``reason`` is None when it can run."""

    name = ""

    def __init__(self):
        self.reason: str | None = None
        self.version = ""
        try:
            self.setup()
        except Skip as exc:
            self.reason = str(exc)
        except Exception as exc:  # ImportError and whatever a broken install raises
            self.reason = _reason(exc)

    def setup(self) -> None:
        raise NotImplementedError

    def prepare(self, script: str, inputs: dict, dtype: str) -> Prepared:
        raise NotImplementedError


def _cupy_wait(cupy):
    return lambda _result=None: cupy.cuda.runtime.deviceSynchronize()


class CublasPeer(Peer):
    name = "cublas"

    def setup(self):
        import cupy
        importlib.import_module("cupy_backends.cuda.libs.cublas")  # the bindings bench.cublas calls
        self.cupy = cupy
        self.version = f"CuPy {cupy.__version__}, cuBLAS {_cublas_version(cupy)}"

    def prepare(self, script, inputs, dtype):
        from bench.cublas import Blas, sequence
        run, outputs = sequence(script, Blas(dtype), inputs)
        run()
        self.cupy.cuda.runtime.deviceSynchronize()
        clock = Clock.for_cupy(self.cupy)
        return Prepared(outputs, gpu=lambda r: clock.times(run, r, gpu_only=True),
                        host=lambda r: clock.times(run, r, gpu_only=False)[0],
                        pipelined=lambda r: pipelined_ms(run, _cupy_wait(self.cupy), r))


def _cublas_version(cupy) -> str:
    try:
        from cupy_backends.cuda.libs import cublas
        return str(cublas.getVersion(cupy.cuda.device.get_cublas_handle()))
    except Exception:
        return "?"


class TorchPeer(Peer):
    """PyTorch eager, or with ``compiled`` torch.compile of the same function."""

    def __init__(self, compiled: bool = False):
        self.compiled = compiled
        self.name = "torch.compile" if compiled else "torch"
        super().__init__()

    def setup(self):
        import cupy
        import torch
        if not torch.cuda.is_available():
            raise Skip(f"PyTorch {torch.__version__} sees no CUDA device")
        if self.compiled and importlib.util.find_spec("triton") is None:
            raise Skip("triton is not installed (torch.compile's GPU backend, inductor, needs it)")
        torch.set_float32_matmul_precision("highest")
        torch.backends.cuda.matmul.allow_tf32 = False
        self.torch, self.cupy = torch, cupy
        self.version = f"PyTorch {torch.__version__}"
        if self.compiled:
            import triton
            self.version += f", triton {triton.__version__}"

    def prepare(self, script, inputs, dtype):
        torch = self.torch
        tensors = {k: torch.from_dlpack(v) if hasattr(v, "__dlpack__") else v for k, v in inputs.items()}
        sequence = SEQUENCES[script]

        def function(arrays):  # a plain function for torch.compile to trace
            return sequence(torch, arrays)
        note, compile_s = "", None
        if self.compiled:
            function, compile_s, note = self._compile(function, tensors)
        run = lambda: function(tensors)  # noqa: E731
        outputs = run()
        torch.cuda.synchronize()
        clock = Clock.for_torch(torch, self.cupy)
        return Prepared(outputs, gpu=lambda r: clock.times(run, r, gpu_only=True),
                        host=lambda r: clock.times(run, r, gpu_only=False)[0],
                        pipelined=lambda r: pipelined_ms(run, lambda _=None: torch.cuda.synchronize(), r),
                        compile_s=compile_s, note=note)

    def _compile(self, function, tensors):
        """torch.compile, whole graph if it can; the first call (tracing,
        inductor, triton) is the compile time."""
        torch = self.torch
        note = ""
        for fullgraph in (True, False):
            torch._dynamo.reset()  # fresh guards: no recompile limit across sequences and sizes
            compiled = torch.compile(function, fullgraph=fullgraph, dynamic=False)
            began = time.perf_counter()
            try:
                compiled(tensors)
                torch.cuda.synchronize()
            except Exception as exc:
                if fullgraph:
                    note = f"fullgraph=True failed ({_reason(exc)}); graph breaks allowed"
                    continue
                raise Skip(f"torch.compile failed: {_reason(exc)}") from exc
            return compiled, time.perf_counter() - began, note
        raise AssertionError("unreachable")


class JaxPeer(Peer):
    name = "jax"

    def setup(self):
        jax, jnp = import_jax()
        gpus = [d for d in jax.devices() if d.platform == "gpu"]
        if not gpus:
            raise Skip(f"JAX {jax.__version__} has no GPU backend (jax[cuda] not installed?)")
        import cupy
        self.jax, self.jnp, self.cupy, self.device = jax, jnp, cupy, gpus[0]
        self.version = f"JAX {jax.__version__}"

    def prepare(self, script, inputs, dtype):
        jax = self.jax
        arrays = {k: jax.device_put(self.cupy.asnumpy(v), self.device) if hasattr(v, "shape") else v
                  for k, v in inputs.items()}
        began = time.perf_counter()
        compiled = jax.jit(functools.partial(SEQUENCES[script], self.jnp)).lower(arrays).compile()
        compile_s = time.perf_counter() - began
        call = lambda: compiled(arrays)  # noqa: E731
        outputs = jax.block_until_ready(call())

        def pipelined(repeat):
            return pipelined_ms(call, jax.block_until_ready, repeat)
        return Prepared(outputs, gpu=lambda r: (pipelined(r), None),
                        host=lambda r: host_timer_ms(call, jax.block_until_ready, r),
                        pipelined=pipelined, gpu_method="pipelined", compile_s=compile_s)


def import_jax():
    """jax and jax.numpy, configured as the module doc says (x64 on, TF32 off,
    no preallocation of GPU memory)."""
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")
    import jax
    import jax.numpy as jnp
    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_default_matmul_precision", "highest")
    return jax, jnp


PEER_CLASSES = {"cublas": CublasPeer, "torch": TorchPeer, "torch.compile": functools.partial(TorchPeer, True),
                "jax": JaxPeer}


def make_peers(names) -> list[Peer]:
    """The peers asked for, each ready or carrying the reason it is skipped."""
    unknown = [n for n in names if n not in PEER_CLASSES]
    if unknown:
        raise ValueError(f"unknown peer {unknown[0]!r} (known: {', '.join(PEERS)})")
    return [PEER_CLASSES[n]() for n in names]


# ---------------------------------------------------------------------------
# One sequence
# ---------------------------------------------------------------------------

def script_sizes(dag, n: int, vector: int) -> dict[str, int]:
    """Matrices n x n; the vector sequences' vectors ``vector`` long."""
    has_matrix = any(dag.value(v).kind.value == "matrix" for v in dag.inputs)
    return {s: n if has_matrix else vector for s in dag.sizes}


def default_vector_size(n: int, dtype: str) -> int:
    """n*n/4 (float32) or n*n/2 (float64): 2^26 at n = 16384, 2^25 at n = 8192."""
    return n * n // (4 if dtype == "float32" else 2)


def _as_cupy(cupy, x):
    if isinstance(x, cupy.ndarray):
        return x
    try:
        return cupy.from_dlpack(x)
    except Exception:  # a framework or version without a usable DLPack export
        return cupy.asarray(np.asarray(x))


def compare(cupy, theirs, ours, dtype: str) -> tuple[float, str]:
    """(largest relative difference, what is wrong or ""): shapes and dtypes
    must match, and the difference stay under MISMATCH[dtype]."""
    from bench.fusion import relative_difference
    if len(theirs) != len(ours):
        return float("inf"), f"{len(theirs)} results, expected {len(ours)}"
    worst = 0.0
    for a, b in zip(theirs, ours):
        a, b = _as_cupy(cupy, a), _as_cupy(cupy, b)
        if a.shape != b.shape or a.dtype != b.dtype:
            return float("inf"), f"result of shape {a.shape} {a.dtype}, expected {b.shape} {b.dtype}"
        difference = relative_difference(cupy, a, b)
        if difference != difference or difference > worst:  # NaN sticks (max() would drop it)
            worst = difference
    if not worst <= MISMATCH[dtype]:  # NaN too
        return worst, f"differs from fusec by {worst:.2e} (limit {MISMATCH[dtype]:.0e})"
    return worst, ""


def _timed(prepared: Prepared, repeat: int, nbytes: int, bandwidth: float) -> dict:
    gpu, late = prepared.gpu(repeat)
    host = prepared.host(repeat)
    pipelined = gpu if prepared.gpu_method == "pipelined" else prepared.pipelined(repeat)
    out = {"status": "ok", "gpu_us": median_us(gpu), "gpu_quartiles_us": quartiles_us(gpu),
           "gpu_method": prepared.gpu_method, "late": late, "host_us": median_us(host),
           "host_quartiles_us": quartiles_us(host), "pipelined_us": median_us(pipelined),
           "compile_s": prepared.compile_s, "note": prepared.note}
    out["gbs"] = nbytes / (out["gpu_us"] * 1e-6) / 1e9
    out["of_copy"] = out["gbs"] * 1e9 / bandwidth
    return out


def fusec_gpu_times(program, inputs, repeat: int) -> tuple[list[float], int]:
    """fusec's GPU times (``Program.time(host=False)``, which takes a late sample
    again) and how many samples were still late when kept."""
    from fusec.runtime import cuda
    before = cuda.late_samples()
    times = program.time(inputs, repeat=repeat, host=False)
    return times, cuda.late_samples() - before


def measure(script: str, dtype: str, n: int, vector: int, peers: list[Peer], repeat: int, cupy,
            bandwidth: float, log=print) -> dict:
    """fusec and every peer on one sequence: a row of the report."""
    import fusec
    from bench.fusion import device_inputs
    from fusec.frontend import load_script
    path = ROOT / "scripts" / f"{script}.script"
    _free(cupy, peers)  # the last sequence's arrays (or the copy bandwidth's), and then a pause
    time.sleep(SETTLE_S)
    library = _library()
    dag = load_script(path, library)
    sizes = script_sizes(dag, n, vector)
    inputs = device_inputs(cupy, dag, sizes, dtype, seed=7)
    began = time.perf_counter()
    program = fusec.compile(path, library, dtype, sizes=sizes)  # the tuned plan, if any
    ours = program(**inputs)
    ours = ours if isinstance(ours, tuple) else (ours,)
    cupy.cuda.runtime.deviceSynchronize()
    fusec_compile_s = time.perf_counter() - began
    nbytes = program.minimum_bytes(sizes)
    row = {"script": script, "dtype": dtype, "n": n, "sizes": sizes, "minimum_bytes": nbytes,
           "floor_us": nbytes / bandwidth * 1e6, "copy_gbs": bandwidth / 1e9}
    whole_call = lambda: program(**inputs)  # noqa: E731  as a CuPy user calls it (no context current)
    clock = Clock.for_cupy(cupy)
    fusec_row = _timed(Prepared(ours, gpu=lambda r: fusec_gpu_times(program, inputs, r),
                                host=lambda r: clock.times(whole_call, r, gpu_only=False)[0],
                                pipelined=lambda r: pipelined_ms(whole_call, _cupy_wait(cupy), r),
                                compile_s=fusec_compile_s), repeat, nbytes, bandwidth)
    fusec_row.update(tuned=program.tuned, nearby=program.nearby, plan=program.generated.plan.summary(dag),
                     kernels=[[dag.call(c).function for c in k.plan.calls] for k in program.kernels])
    row["fusec"] = fusec_row
    log(f"{script:8s} {dtype}  fusec {fusec_row['gpu_us']:9.1f} us  (with host {fusec_row['host_us']:.1f})"
        + ("  tuned" if program.tuned else "  tuned nearby" if program.nearby else ""))
    row["peers"] = {}
    for peer in peers:
        row["peers"][peer.name] = result = _run_peer(peer, script, inputs, dtype, ours, repeat, nbytes,
                                                     bandwidth, cupy)
        if result["status"] == "ok":
            log(f"{'':8s} {dtype}  {peer.name:13s} {result['gpu_us']:9.1f} us  (with host {result['host_us']:.1f})"
                + (f"  compiled in {result['compile_s']:.1f} s" if result["compile_s"] is not None else ""))
        else:
            log(f"{'':8s} {dtype}  {peer.name:13s} {result['status'].upper()}: {result['reason']}")
    del ours
    program.release()
    _free(cupy, peers)
    return summarize(row)


@functools.lru_cache(maxsize=None)
def _library():
    from fusec import data
    from fusec.library.loader import load_library
    return load_library(data.LIBRARY)


def _run_peer(peer: Peer, script, inputs, dtype, ours, repeat, nbytes, bandwidth, cupy) -> dict:
    if peer.reason is not None:
        return {"status": "skipped", "reason": peer.reason}
    try:
        prepared = peer.prepare(script, inputs, dtype)
    except Skip as exc:
        return {"status": "skipped", "reason": str(exc)}
    except Exception as exc:  # a peer that cannot run this sequence here is reported, not fatal
        return {"status": "skipped", "reason": f"failed to run: {_reason(exc)}"}
    try:
        difference, wrong = compare(cupy, prepared.outputs, ours, dtype)
        if wrong:
            return {"status": "wrong", "reason": wrong, "difference": difference,
                    "compile_s": prepared.compile_s}
        result = _timed(prepared, repeat, nbytes, bandwidth)
        result["difference"] = difference
        return result
    except Exception as exc:  # out of memory while timed, say: the run goes on without it
        return {"status": "skipped", "reason": f"failed while checked or timed: {_reason(exc)}"}
    finally:
        del prepared


def _free(cupy, peers) -> None:
    gc.collect()  # arrays a framework keeps in reference cycles go now, not during the next timing
    cupy.cuda.runtime.deviceSynchronize()
    cupy.get_default_memory_pool().free_all_blocks()
    for peer in peers:
        if getattr(peer, "torch", None) is not None:
            peer.torch.cuda.empty_cache()


# ---------------------------------------------------------------------------
# Ratios, targets
# ---------------------------------------------------------------------------

# Sequences that pass over their matrix twice (the second pass needs a reduction's result
# over all of it; a striped plan reads it from L2): the targets hold them to their two-pass
# floor, at both sizes.
TWO_PASS = ("atax", "sgemvt")
# GEMVER needs a third matrix pass for the same reason (w = alpha B x needs all of
# x = beta B^T y + z): reported beside its floor, but its verdicts stay on the floor.
THREE_PASS = ("gemver",)


def two_pass_floor_us(row: dict) -> float:
    """The floor with the matrix read once more: minimum bytes plus one more
    matrix (ATAX's and SGEMVT's second pass, GEMVER's third)."""
    matrix = row["n"] ** 2  # this bench's matrices are n x n
    itemsize = 4 if row["dtype"] == "float32" else 8
    return (row["minimum_bytes"] + matrix * itemsize) / (row["copy_gbs"] * 1e9) * 1e6


def summarize(row: dict) -> dict:
    """Add fusec's ratio to its floor and to every peer, and the best peer (by
    the GPU's time and by the time with host launching)."""
    ours = row["fusec"]
    row["of_floor"] = ours["gpu_us"] / row["floor_us"]
    row["of_floor_host"] = ours["host_us"] / row["floor_us"]
    row["of_floor_pipelined"] = ours["pipelined_us"] / row["floor_us"]
    if row["script"] in TWO_PASS:
        row["two_pass_floor_us"] = two_pass_floor_us(row)
        row["of_two_pass_floor"] = ours["gpu_us"] / row["two_pass_floor_us"]
        row["of_two_pass_floor_host"] = ours["host_us"] / row["two_pass_floor_us"]
    if row["script"] in THREE_PASS:
        row["three_pass_floor_us"] = two_pass_floor_us(row)
        row["of_three_pass_floor"] = ours["gpu_us"] / row["three_pass_floor_us"]
        row["of_three_pass_floor_host"] = ours["host_us"] / row["three_pass_floor_us"]
    ok = {name: p for name, p in row["peers"].items() if p["status"] == "ok"}
    row["speedup"] = {name: p["gpu_us"] / ours["gpu_us"] for name, p in ok.items()}
    row["speedup_host"] = {name: p["host_us"] / ours["host_us"] for name, p in ok.items()}
    for key, field in (("best_peer", "gpu_us"), ("best_peer_host", "host_us")):
        row[key] = min(ok, key=lambda name: ok[name][field]) if ok else None
    row["speedup_best"] = row["speedup"][row["best_peer"]] if ok else None
    row["speedup_best_host"] = row["speedup_host"][row["best_peer_host"]] if ok else None
    row["targets"] = targets(row)
    return row


def targets(row: dict) -> list[list]:
    """[what, met] of the performance targets that apply at this size (none elsewhere)."""
    script, dtype, n = row["script"], row["dtype"], row["n"]
    out = []
    if DEFAULT_N.get(dtype) == n:
        if script in TWO_PASS:
            out.append([f"≤ 1.05× two-pass floor ({row['of_two_pass_floor']:.2f}×)", row["of_two_pass_floor"] <= 1.05])
        else:
            out.append(["≤ 1.08× floor", row["of_floor"] <= 1.08])
        if row["best_peer"] is not None:
            out.append(["≥ best peer", row["speedup_best"] >= 1.0])
            if script in SPEEDUP_TARGETS:
                goal = SPEEDUP_TARGETS[script]
                out.append([f"≥ {goal}× best peer", row["speedup_best"] >= goal])
    elif dtype == "float32" and n == 4096:
        # "timed around the whole call": one call waited for (its latency), and
        # calls back to back (the pipelined time per call, its throughput)
        floor, which = ((row["two_pass_floor_us"], " two-pass") if script in TWO_PASS else (row["floor_us"], ""))
        for label, key in (("with host", "host_us"), ("pipelined", "pipelined_us")):
            ratio = row["fusec"][key] / floor
            out.append([f"{label} ≤ 1.5×{which} floor ({ratio:.2f}×)", ratio <= 1.5])
    return out


# ---------------------------------------------------------------------------
# The report
# ---------------------------------------------------------------------------

def _size(row: dict) -> str:
    return "x".join(str(v) for v in dict.fromkeys(row["sizes"].values()))


def _verdicts(row: dict) -> str:
    out = "; ".join(f"{what} {'met' if met else 'MISSED'}" for what, met in row.get("targets", []))
    if "of_three_pass_floor" in row:  # information, not a target
        out += (f" (three-pass floor: {row['of_three_pass_floor']:.2f}×,"
                f" with host {row['of_three_pass_floor_host']:.2f}×)")
    return out


def _peer_cell(result: dict, key: str, speedup: float | None) -> str:
    if result["status"] == "skipped":
        return "skipped"
    if result["status"] == "wrong":
        return "WRONG"
    mark = "†" if key == "gpu_us" and result.get("gpu_method") == "pipelined" else ""
    return f"{result[key]:.1f}{mark} ({speedup:.2f}×)"


def _origin(fusec_row: dict) -> str:
    """How fusec's plan was chosen, after the sequence's name: tuned at this size, tuned
    at a nearby one (fusec.tune.store.nearby), or predicted (nothing)."""
    if fusec_row.get("tuned"):
        return " (tuned)"
    return " (tuned nearby)" if fusec_row.get("nearby") else ""


def summary_table(rows: list[dict], peers: list[str]) -> str:
    """One line a sequence: fusec against its floor and every peer (GPU's time,
    then with host launching); a peer's cell is its µs (fusec's speed-up over it)."""
    labels = [LABELS.get(p, p) for p in peers]
    head = (["sequence", "size", "fusec µs", "GB/s", "% of copy", "× floor"] + [f"{x} µs" for x in labels]
            + ["best peer", "speed-up", "with host: fusec µs", "× floor", "best peer", "speed-up", "targets"])
    lines = ["| " + " | ".join(head) + " |",
             "|" + "|".join(["---", "---"] + ["---:"] * (4 + len(peers)) + ["---", "---:", "---:", "---:", "---",
                                                                          "---:", "---"]) + "|"]
    for r in rows:
        f = r["fusec"]
        cells = [r["script"] + _origin(f), _size(r), f"{f['gpu_us']:.1f}",
                 f"{f['gbs']:.0f}", f"{100 * f['of_copy']:.0f}%", f"{r['of_floor']:.2f}"]
        for p in peers:
            result = r["peers"].get(p, {"status": "skipped"})
            cells.append(_peer_cell(result, "gpu_us", r["speedup"].get(p)))
        best, best_host = r["best_peer"], r["best_peer_host"]
        cells += [LABELS.get(best, best) if best else "—", f"{r['speedup_best']:.2f}×" if best else "—",
                  f"{f['host_us']:.1f}", f"{r['of_floor_host']:.2f}",
                  LABELS.get(best_host, best_host) if best_host else "—",
                  f"{r['speedup_best_host']:.2f}×" if best_host else "—", _verdicts(r)]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def detail_table(rows: list[dict], peers: list[str]) -> str:
    """One line a sequence and contender: every number measured."""
    lines = ["| sequence | contender | GPU µs | quartiles | GB/s | % of copy | × floor | fusec speed-up"
             " | with host µs | fusec speed-up | pipelined µs | compile s | check | note |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for r in rows:
        contenders = [("fusec", r["fusec"])] + [(p, r["peers"].get(p, {"status": "skipped", "reason": "not run"}))
                                                for p in peers]
        for name, c in contenders:
            label = LABELS.get(name, name)
            if c["status"] != "ok":
                lines.append(f"| {r['script']} | {label} | {c['status']} |  |  |  |  |  |  |  |  |"
                             f" {_seconds(c.get('compile_s'))} | {c['status']} | {c['reason']} |")
                continue
            mark = "†" if c.get("gpu_method") == "pipelined" else ""
            q = c["gpu_quartiles_us"]
            speedup = "" if name == "fusec" else f"{r['speedup'][name]:.2f}×"
            speedup_host = "" if name == "fusec" else f"{r['speedup_host'][name]:.2f}×"
            check = "reference" if name == "fusec" else f"ok ({c['difference']:.0e})"
            note = "; ".join(x for x in (c.get("note", ""), f"{c['late']} late" if c.get("late") else "") if x)
            lines.append(f"| {r['script']} | {label} | {c['gpu_us']:.1f}{mark} | {q[0]:.1f}–{q[1]:.1f} |"
                         f" {c['gbs']:.0f} | {100 * c['of_copy']:.0f}% | {c['gpu_us'] / r['floor_us']:.2f} |"
                         f" {speedup} | {c['host_us']:.1f} | {speedup_host} | {c['pipelined_us']:.1f} |"
                         f" {_seconds(c.get('compile_s'))} | {check} | {note} |")
    return "\n".join(lines)


def _seconds(value) -> str:
    return "" if value is None else f"{value:.1f}"


def skipped_lines(peers: list[dict]) -> list[str]:
    out = []
    for p in peers:
        state = f"skipped: {p['reason']}" if p["reason"] else p["version"] or "available"
        out.append(f"- {LABELS.get(p['name'], p['name'])}: {state}")
    return out


METHOD = (
    "GPU µs: the GPU's time (a spinning kernel goes first on the contender's stream, then CUDA events:"
    " the host's launching is left out); † JAX: the pipelined time instead (calls queued back to back, one"
    " wait, divided by their number), XLA's stream being out of reach of events. With host µs: events"
    " only around one whole call, as a Python caller waits (fusec: CuPy's events around"
    " `program(**inputs)`; JAX: a host timer around the call and block_until_ready)."
    " Pipelined µs: that pipelined time for every contender. A peer's cell is its µs and fusec's speed-up"
    " over it (its µs / fusec's). GB/s on minimum bytes; floor = minimum bytes / the copy bandwidth"
    " measured in the same run. 'late': samples whose queuing outlasted the spin. Every peer's results"
    " were checked against fusec's before timing (largest difference relative to the largest magnitude).")


def warm_call_path() -> str:
    """Which way fusec's repeated calls on the same device arrays went (its C extension or Python)."""
    from fusec.runtime import native
    reason = native.unavailable()
    return "in C (fusec/runtime/fastcall.c)" if reason is None else f"in Python ({reason})"


def markdown(report: dict) -> str:
    peers = [p["name"] for p in report["peers"]]
    lines = [f"# fusec against cuBLAS, PyTorch, torch.compile and JAX on {report['device']}", "",
             f"{report['when']}; `{report['command']}`; median of {report['repeat']} runs after 3 warm-ups.",
             "", METHOD, "", "Peers:", *skipped_lines(report["peers"]), ""]
    if "fusec_warm_calls" in report:
        lines += [f"fusec's warm calls: {report['fusec_warm_calls']}.", ""]
    for dtype in report["dtypes"]:
        rows = [r for r in report["rows"] if r["dtype"] == dtype]
        if not rows:
            continue
        bw = report["copy_bandwidth"][dtype]
        lines += [f"## {dtype}", "", f"Copy bandwidth measured in this run: {bw / 1e9:.0f} GB/s.", "",
                  summary_table(rows, peers), "", "### Every contender", "", detail_table(rows, peers), ""]
    problems = [f"- {r['script']} {r['dtype']}: {LABELS.get(name, name)} {p['status']}: {p['reason']}"
                for r in report["rows"] for name, p in r["peers"].items() if p["status"] == "wrong"]
    if problems:
        lines += ["## Wrong results", "", *problems, ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# Command line
# ---------------------------------------------------------------------------

def parse_size(items: list[str]) -> int | None:
    """--size n=VALUE (the matrices' n)."""
    n = None
    for item in items:
        name, sep, value = item.partition("=")
        if name.strip() != "n" or not sep or not value.strip().isdigit() or int(value) < 1:
            raise argparse.ArgumentTypeError(f"--size {item!r}: expected n=VALUE, e.g. n=16384")
        n = int(value)
    return n


def add_common(parser: argparse.ArgumentParser, scripts: str, name: str) -> None:
    parser.add_argument("--scripts", default=scripts, help="comma-separated (default: %(default)s)")
    parser.add_argument("--dtype", default="both", choices=("float32", "float64", "both"),
                        help="precision (default: %(default)s)")
    parser.add_argument("--repeat", type=int, default=20, help="timed runs a median is taken over (≥ 20)")
    parser.add_argument("--peers", default=",".join(PEERS), help="comma-separated subset of %(default)s")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results"), help="folder of the table and JSON")
    parser.add_argument("--name", default=None, help=f"file name without extension (default: <gpu>-{name})")


def dtypes_of(text: str) -> list[str]:
    return ["float32", "float64"] if text == "both" else [text]


def check_args(parser, args) -> tuple[list[str], list[str]]:
    scripts = [s for s in args.scripts.split(",") if s]
    unknown = [s for s in scripts if s not in SEQUENCES]
    if unknown:
        parser.error(f"--scripts: no sequence {unknown[0]!r} (known: {', '.join(SCRIPTS)})")
    peers = [p for p in args.peers.split(",") if p]
    unknown = [p for p in peers if p not in PEER_CLASSES]
    if unknown:
        parser.error(f"--peers: unknown peer {unknown[0]!r} (known: {', '.join(PEERS)})")
    if args.repeat < 1:
        parser.error("--repeat must be at least 1")
    return scripts, peers


def command_line(module: str, argv) -> str:
    """The command as run, less --out (where the files went is not how they were measured)."""
    shown = list(argv if argv is not None else sys.argv[1:])
    if "--out" in shown:
        del shown[shown.index("--out"):shown.index("--out") + 2]
    return " ".join([f"python -m {module}"] + shown)


def device_name(cupy) -> str:
    return cupy.cuda.runtime.getDeviceProperties(cupy.cuda.Device().id)["name"].decode()


def default_name(device: str, what: str) -> str:
    from fusec.target import slug
    return f"{slug(device).split('-')[0]}-{what}"


def start(cupy, peer_names: list[str]) -> list[Peer]:
    """The peers, each said ready or skipped on stderr; a warning where CuPy's
    stream is not the legacy default stream that fusec (PyCUDA) launches on."""
    if cupy.cuda.get_current_stream().ptr != 0:
        print("warning: CuPy's current stream is not the legacy default stream (per-thread default streams"
              " on?): fusec launches on the legacy one, so its events and CuPy's are on different streams",
              file=sys.stderr)
    peers = make_peers(peer_names)
    for p in peers:
        print(f"{p.name}: " + (f"skipped: {p.reason}" if p.reason else p.version), file=sys.stderr)
    return peers


def peer_info(peers: list[Peer]) -> list[dict]:
    return [{"name": p.name, "reason": p.reason, "version": p.version} for p in peers]


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common(parser, ",".join(SCRIPTS), "peers")
    parser.add_argument("--size", action="append", default=[], metavar="n=VALUE",
                        help="matrices n x n (default: 16384 for float32, 8192 for float64)")
    parser.add_argument("--vector-size", type=int, default=None,
                        help="length of the vector sequences' vectors (default: n*n/4 float32, n*n/2 float64)")
    args = parser.parse_args(argv)
    scripts, peer_names = check_args(parser, args)
    try:
        n_given = parse_size(args.size)
    except argparse.ArgumentTypeError as exc:
        parser.error(str(exc))

    import cupy

    from bench.fusion import copy_bandwidth
    peers = start(cupy, peer_names)
    device = device_name(cupy)
    rows, bandwidth = [], {}
    dtypes = dtypes_of(args.dtype)
    for dtype in dtypes:  # before any contender's arrays fill the GPU's memory (see bench.sweeps)
        bandwidth[dtype] = copy_bandwidth(cupy)
    for dtype in dtypes:
        n = n_given or DEFAULT_N[dtype]
        vector = args.vector_size or default_vector_size(n, dtype)
        for script in scripts:
            rows.append(measure(script, dtype, n, vector, peers, args.repeat, cupy, bandwidth[dtype],
                                log=functools.partial(print, file=sys.stderr, flush=True)))
    report = {"device": device, "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
              "command": command_line("bench.peers", argv), "repeat": args.repeat, "dtypes": dtypes,
              "copy_bandwidth": bandwidth, "peers": peer_info(peers), "rows": rows,
              "fusec_warm_calls": warm_call_path()}
    name = args.name or default_name(device, "peers")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text = markdown(report)
    (out / f"{name}.md").write_text(text, encoding="utf-8")
    (out / f"{name}.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    print(text)
    print(f"wrote {out / name}.md and .json", file=sys.stderr)
    wrong = [r for r in rows for p in r["peers"].values() if p["status"] == "wrong"]
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
