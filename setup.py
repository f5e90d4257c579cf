"""Build the native commitlog scanner (C, CPython API) from source."""
from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "store_reader._native",
            sources=["store_reader/_native/scanner.c"],
            libraries=["z"],
            extra_compile_args=["-O3", "-std=c11", "-Wall", "-Wextra", "-Wno-unused-parameter"],
        )
    ]
)
