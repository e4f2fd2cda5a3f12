"""Builds consumer (b), tests/consumers/cython_consumer.pyx, as a third-party project would: setuptools +
cythonize, include_dirs from the installed wheel's cuda_reclaim.get_include(); the .pxd is found on
sys.path. Run by consumers_test.sh in a venv where the wheel is installed."""

from Cython.Build import cythonize
from setuptools import Extension, setup

import cuda_reclaim

setup(
    name="cython-consumer",
    ext_modules=cythonize(
        [
            Extension(
                "cython_consumer",
                ["cython_consumer.pyx"],
                include_dirs=[cuda_reclaim.get_include()],
                extra_link_args=["-pthread"],
            )
        ]
    ),
)
