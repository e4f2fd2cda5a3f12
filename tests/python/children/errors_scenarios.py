"""Child of test_errors_name_the_function_and_setting.py: one scenario per run, named by the first argument.
The scenarios whose names end in without_the_setting remove CUDA_RECLAIM_LIBCUDA from the environment before
cuda_reclaim is imported."""

import os

import scenario

# Each public function that loads the driver, called so that it gets that far.
CALLS = {
    "keep_alive": lambda cuda_reclaim, asyncio: cuda_reclaim.keep_alive(0x1234, object()),
    "keep_alive_until": lambda cuda_reclaim, asyncio: cuda_reclaim.keep_alive_until(0, object()),
    "launch_host_func": lambda cuda_reclaim, asyncio: cuda_reclaim.launch_host_func(0, print),
    "add_host_node": lambda cuda_reclaim, asyncio: cuda_reclaim.add_host_node(0x1234, print),
    "stream_reached": lambda cuda_reclaim, asyncio: asyncio.run(cuda_reclaim.asyncio.stream_reached(0)),
    "run_when_reached": lambda cuda_reclaim, asyncio: asyncio.run(cuda_reclaim.asyncio.run_when_reached(0, print)),
}


def each_call_raises(*functions):
    """Calls each of `functions` (names of CALLS), each of which must raise a DriverError; prints
    "FUNCTION raised: MESSAGE" for each."""
    import asyncio

    import cuda_reclaim
    import cuda_reclaim.asyncio  # noqa: F401 - the calls of stream_reached and run_when_reached use it

    cuda_reclaim.set_auto_drain("off")
    for function in functions:
        try:
            CALLS[function](cuda_reclaim, asyncio)
        except cuda_reclaim.DriverError as error:
            print(function, "raised:", error)
        else:
            raise AssertionError(function + " raised nothing")


def each_call_raises_without_the_setting(*functions):
    os.environ.pop("CUDA_RECLAIM_LIBCUDA", None)
    each_call_raises(*functions)


def driver_status_without_the_setting():
    """Prints the status of _reclaim._driver_info() with CUDA_RECLAIM_LIBCUDA unset."""
    os.environ.pop("CUDA_RECLAIM_LIBCUDA", None)
    from cuda_reclaim import _reclaim

    print(_reclaim._driver_info()["status"])


if __name__ == "__main__":
    scenario.run(each_call_raises, each_call_raises_without_the_setting, driver_status_without_the_setting)
