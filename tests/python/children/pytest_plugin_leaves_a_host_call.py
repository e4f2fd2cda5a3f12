"""A pytester test module of test_pytest_plugin.py: one test that leaves a host call on a stream."""

import cuda_reclaim


def test_leaves_a_call():
    cuda_reclaim.launch_host_func(0x7300, print)  # no CUDA thread runs the fake's streams here
