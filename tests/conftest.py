"""Hardware tiers: `gpu` tests need PyCUDA and a GPU, `nvcc` tests need nvcc.

Both skip cleanly (with the reason) where the hardware or tool is missing.
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


def pytest_configure(config):
    """Tests never see the user's caches, nor the tuned plans a library ships:
    a tuned plan or a cubin from another version would make them depend on
    what ran before. $FUSEC_TEST_CACHE_DIR
    lets several pytest runs of one session share compiled cubins."""
    os.environ["FUSEC_CACHE_DIR"] = (os.environ.get("FUSEC_TEST_CACHE_DIR")
                                     or tempfile.mkdtemp(prefix="fusec-test-cache-"))
    os.environ["FUSEC_SHIPPED_TUNINGS"] = "0"  # nor the plans library/blas ships (tests of them set it)


def pytest_collection_modifyitems(config, items):
    gpu_reason = None
    nvcc_missing = shutil.which("nvcc") is None
    for item in items:
        if "gpu" in item.keywords:
            gpu_reason = gpu_reason or _gpu() or ""
            if gpu_reason:
                item.add_marker(pytest.mark.skip(reason=f"needs a GPU: {gpu_reason}"))
        if "nvcc" in item.keywords and nvcc_missing:
            item.add_marker(pytest.mark.skip(reason="needs nvcc on PATH"))
