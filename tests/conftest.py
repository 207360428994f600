"""Test tiers: `unit` (no nvcc, no GPU, fast), `slow` (CPU only, minutes),
`nvcc` (needs nvcc on PATH), `gpu` (needs PyCUDA and a GPU).

Every test that is not marked `slow`, `nvcc` or `gpu` is marked `unit` here,
so `pytest -m unit` is the quick loop. `nvcc` and `gpu` tests skip cleanly
(with the reason) where the tool or the hardware is missing. A unit test finds
no nvcc even where one is installed (:func:`unit_tests_find_no_nvcc`), so it
runs the same, and as fast, on every machine.
"""

import functools
import os
import shutil
import tempfile

import pytest


@functools.lru_cache(maxsize=None)
def _gpu() -> str | None:
    """None when a GPU is usable, else why not."""
    try:
        from fusec.runtime import cuda
        cuda.driver()
        if cuda.driver().Device.count() == 0:
            return "no CUDA device"
    except Exception as exc:  # GPUUnavailableError and anything the driver raises
        return str(exc).splitlines()[0]
    return None


@functools.lru_cache(maxsize=None)
def _gpus_visible() -> tuple[str, ...]:
    """The GPUs this session may use, as $CUDA_VISIBLE_DEVICES names them (else 0, 1, ...);
    none without a usable GPU."""
    if _gpu() is not None:
        return ()
    from fusec.runtime import cuda
    count = cuda.driver().Device.count()
    given = [name.strip() for name in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if name.strip()]
    return tuple(given[:count]) if given else tuple(str(i) for i in range(count))


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config):
    """`-n auto`: a worker per core, but at most four a GPU where GPUs are usable: every
    worker holds its own context and programs on its GPU (with sixteen on one, a test of
    tests/gpu/test_space.py ran out of GPU memory on an H200)."""
    cores = os.cpu_count() or 1
    return cores if _gpu() is not None else min(cores, GPU_WORKERS * max(len(_spread_over()), 1))


GPU_WORKERS = 4


def gpu_for_worker(worker: str, visible: tuple[str, ...]) -> str:
    """The GPU of pytest-xdist worker ``worker`` (``gw0``, ``gw1``, ...) among ``visible``: in turn."""
    return visible[int(worker.removeprefix("gw")) % len(visible)]


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node):
    """xdist, on the controller: where several GPUs are usable each worker is given one, in
    turn (`-n 8` on two GPUs: four on each), as its $CUDA_VISIBLE_DEVICES; the tests that
    start processes over several GPUs find them all in $FUSEC_TEST_ALL_GPUS.
    $FUSEC_TEST_SPREAD_GPUS=0 (or $FUSEC_DEVICE) leaves every worker every GPU."""
    visible = _spread_over()
    if visible:
        node.workerinput["fusec_gpu"] = gpu_for_worker(node.gateway.id, visible)
        node.workerinput["fusec_all_gpus"] = ",".join(visible)


def _spread_over() -> tuple[str, ...]:
    """The GPUs the workers take in turn: none where there is one or none, where
    $FUSEC_TEST_SPREAD_GPUS=0, or where $FUSEC_DEVICE picks one (its index would name no GPU
    in a worker that sees one)."""
    if os.environ.get("FUSEC_TEST_SPREAD_GPUS", "1") == "0" or os.environ.get("FUSEC_DEVICE"):
        return ()
    visible = _gpus_visible()
    return visible if len(visible) > 1 else ()
_OWN_CACHE: str | None = None  # the cache folder this session made, removed at its end


def pytest_configure(config):
    """Tests never see the user's caches, nor the tuned plans a library ships, nor
    the fitted correction of a performance database: a tuned plan or a cubin from
    another version would make them depend on what ran before, and a correction
    refitted would move the first choices the regression tests pin. $FUSEC_TEST_CACHE_DIR
    lets several pytest runs of one session share compiled cubins (and is kept)."""
    global _OWN_CACHE
    spread = getattr(config, "workerinput", {}).get("fusec_gpu")
    if spread is not None:  # before any test makes a CUDA context in this worker
        os.environ["FUSEC_TEST_ALL_GPUS"] = config.workerinput["fusec_all_gpus"]
        os.environ["CUDA_VISIBLE_DEVICES"] = spread
    given = os.environ.get("FUSEC_TEST_CACHE_DIR")
    if not given:
        _OWN_CACHE = tempfile.mkdtemp(prefix="fusec-test-cache-")
    os.environ["FUSEC_CACHE_DIR"] = given or _OWN_CACHE
    os.environ["FUSEC_SHIPPED_TUNINGS"] = "0"  # nor the plans fusec/data/blas ships (tests of them set it)
    os.environ["FUSEC_CORRECTION"] = "0"  # nor a fitted correction of the database (tests of it set it)
    os.environ.pop("FUSEC_MEASURE", None)  # compile predicts, as CI's does (tests of measuring set it)
    # JAX takes 75 % of the GPU's memory at its first array unless told not to: the worker
    # that ran a JAX test held 110 of an H200's 140 GB, and the others' next tests failed
    os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")


def pytest_unconfigure(config):
    """The temporary cache goes with the session; a given $FUSEC_TEST_CACHE_DIR stays."""
    global _OWN_CACHE
    if _OWN_CACHE:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)
        _OWN_CACHE = None


_TIERS = ("slow", "nvcc", "gpu")


@pytest.fixture(autouse=True)
def unit_tests_find_no_nvcc(request, monkeypatch):
    """A unit test runs no nvcc (what fusec.compile's spill check compiles is the nvcc
    tier's to test, and seconds a program): nvcc on PATH is hidden; one the test names
    itself with $FUSEC_NVCC (a fake or a broken one) is found as usual."""
    if request.node.get_closest_marker("unit") is None:
        return
    from fusec import nvcc
    monkeypatch.delenv("FUSEC_NVCC", raising=False)
    found = nvcc.nvcc_path
    monkeypatch.setattr(nvcc, "nvcc_path", lambda: found() if os.environ.get("FUSEC_NVCC") else None)


def pytest_collection_modifyitems(config, items):
    gpu_reason = None
    nvcc_missing = shutil.which("nvcc") is None
    for item in items:
        if not any(item.get_closest_marker(tier) for tier in _TIERS):
            item.add_marker(pytest.mark.unit)
        if "gpu" in item.keywords:
            gpu_reason = gpu_reason or _gpu() or ""
            if gpu_reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {gpu_reason}"))
        if "nvcc" in item.keywords and nvcc_missing:
            item.add_marker(pytest.mark.skip(reason="needs nvcc on PATH"))
