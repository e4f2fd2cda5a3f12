"""Child of test_info.py, run against the fake driver (fake_cuda.run_script): one scenario per run, named by the
first argument. The fake's devices and failures are set by the test through FAKE_CUDA_* variables."""

from cuda_reclaim import _reclaim
from fake_driver_child import cuda_reclaim  # noqa: F401 - the package, set up against the fake

import scenario


def driver_devices_lists_the_fakes_three_devices():
    devices = _reclaim._driver_devices()
    assert [d["name"] for d in devices] == ["Fake CUDA Device 0", "Fake CUDA Device 1", "Fake CUDA Device 2"]
    assert [d["ordinal"] for d in devices] == [0, 1, 2]
    assert _reclaim._driver_devices() == devices  # asking again (cuInit again) gives the same answer
    print("devices ok")


def driver_devices_raises_driver_error():
    try:
        _reclaim._driver_devices()
    except _reclaim.DriverError as error:
        print("raised:", error)


if __name__ == "__main__":
    scenario.run(driver_devices_lists_the_fakes_three_devices, driver_devices_raises_driver_error)
