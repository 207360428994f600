"""The package's one compiled part: fusec.runtime._fastcall, fusec's launch binding
(fusec/runtime/fastcall.c). It needs a C compiler and Python's headers, not CUDA:
it opens the driver with dlopen when a program first runs."""

from setuptools import Extension, setup

setup(ext_modules=[Extension("fusec.runtime._fastcall", ["fusec/runtime/fastcall.c"],
                             extra_compile_args=["-std=c11", "-O2"], libraries=["dl"])])
