"""Stand-in for CuPy's test_graph.py: TestGraph::test_capture_launch_host_func, against the stand-in."""

import pytest

from cupy import cuda


class TestGraph:
    @pytest.mark.parametrize("upload", (True, False))
    def test_capture_launch_host_func(self, upload):
        stream = cuda.Stream(non_blocking=True)
        counter = {"count": 0}

        def callback(x):
            counter["count"] += x["delta"]

        stream.begin_capture()
        stream.launch_host_func(callback, {"delta": 1})
        graph = stream.end_capture()
        if upload:
            graph.upload()
        graph.launch()
        stream.synchronize()
        assert counter["count"] == 1
        graph.launch()
        stream.synchronize()
        assert counter["count"] == 2
