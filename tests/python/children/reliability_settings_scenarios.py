"""Child of test_reliability.py for the settings read at import (CUDA_RECLAIM_RESERVED_CAPACITY,
CUDA_RECLAIM_REPORT, which the test sets): one scenario per run, named by the first argument. Each prints "done"
once it got past its import."""

import scenario


def import_the_package():
    """Imports the package."""
    import cuda_reclaim  # noqa: F401 - the import under test

    print("done")


def hand_over_one():
    """Imports the package and hands one object over (the exit's final drain releases it)."""
    import cuda_reclaim

    cuda_reclaim.defer_release(object())
    print("done")


if __name__ == "__main__":
    scenario.run(import_the_package, hand_over_one)
