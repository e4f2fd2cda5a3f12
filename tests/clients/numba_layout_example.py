# Input of run_clients_test.py, read as text and never run: the layout of numba-cuda's test_streams.py around
# TestCudaStream (the skip decorator that run_clients.unskipped_numba_tests removes, the decorators it keeps).
import unittest


@unittest.skip("Disabled temporarily")
@skip_on_cudasim("CUDA Driver API unsupported in the simulator")
class TestCudaStream(CUDATestCase):
    @unittest.skip("kept: a method's own decorator")
    def test_add_callback(self):
        pass


@unittest.skip("kept: another class")
class TestOther(CUDATestCase):
    pass
