"""Child of test_hand_back.py: one scenario per run, named by the first argument, against the fake libcuda
(tests/graph/fake_libcuda.cc) that CUDA_RECLAIM_LIBCUDA names."""

import ctypes

from cuda_reclaim import _reclaim
from fake_driver_child import cuda_reclaim

import scenario


def the_c_api_wait_after_close_is_zero_with_nothing_held():
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype = ctypes.c_void_p
    get.argtypes = [ctypes.py_object, ctypes.c_char_p]
    table = get(_reclaim._C_API, b"cuda_reclaim._reclaim._C_API")
    pointers = (ctypes.c_void_p * 12).from_address(table + 8)
    wait = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_double)(pointers[11])
    assert _reclaim._hand_back_stats()["held"] == 0
    assert wait(0.0) == 1 and cuda_reclaim.wait_handed_back(0) is True, "open, nothing held"
    cuda_reclaim.close()
    assert _reclaim._hand_back_stats()["held"] == 0
    assert cuda_reclaim.wait_handed_back(0) is False
    assert wait(0.0) == 0, "closed: 0, though nothing is held"
    assert wait(-1.0) == 0, "closed, no limit: 0 at once"
    print("ok")


if __name__ == "__main__":
    scenario.run(
        the_c_api_wait_after_close_is_zero_with_nothing_held,
    )
