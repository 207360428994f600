"""fusec: fuses sequences of BLAS-1/BLAS-2 calls into a few CUDA kernels."""

__version__ = "0.1.0"
