"""Stand-in for numba.cuda.testing: what test_streams.py imports from it."""

import unittest

CUDATestCase = unittest.TestCase


def skip_on_cudasim(reason):
    return lambda cls: cls
