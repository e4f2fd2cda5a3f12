"""The fixtures that cuda.core's test_host_callback_contracts.py takes, for running it outside cuda-python's tree
(run_clients.py copies this file beside it as conftest.py): ``init_cuda``, the current device 0 for the
test; ``device_x2``, two devices, or the test is skipped on a machine with fewer."""

import pytest


@pytest.fixture
def init_cuda():
    from cuda.core import Device

    device = Device(0)
    device.set_current()
    yield device
    device.sync()


@pytest.fixture
def device_x2():
    from cuda.bindings import driver
    from cuda.core import Device

    Device(0).set_current()  # initializes the driver
    status, count = driver.cuDeviceGetCount()
    assert status == driver.CUresult.CUDA_SUCCESS, status
    if count < 2:
        pytest.skip(f"needs two GPUs; this machine has {count}")
    devices = [Device(i) for i in range(2)]
    yield devices
    for device in devices:
        device.set_current()
        device.sync()
    devices[0].set_current()
