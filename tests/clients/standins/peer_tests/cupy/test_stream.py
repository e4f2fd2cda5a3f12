"""Stand-in for CuPy's test_stream.py: the four callback tests run_clients.py picks, against the stand-in."""

from cupy import cuda

import fake_driver


class TestStream:
    def test_get_and_add_callback(self):
        stream = cuda.Stream()
        out = []
        for i in range(20):
            stream.add_callback(lambda s, status, t: out.append((t, s.ptr, status)), i)
        stream.synchronize()
        assert out == [(i, stream.ptr, 0) for i in range(20)]

    def test_launch_host_func(self):
        stream = cuda.Stream()
        out = []
        for i in range(20):
            stream.launch_host_func(out.append, i)
        stream.synchronize()
        assert out == list(range(20))


class TestExternalStream:
    def setup_method(self):
        self.stream = cuda.ExternalStream(fake_driver.new_stream())

    def test_get_and_add_callback(self):
        out = []
        for i in range(20):
            self.stream.add_callback(lambda _, __, t: out.append(t), i)
        self.stream.synchronize()
        assert out == list(range(20))

    def test_launch_host_func(self):
        out = []
        for i in range(20):
            self.stream.launch_host_func(out.append, i)
        self.stream.synchronize()
        assert out == list(range(20))
