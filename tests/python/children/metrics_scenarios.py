"""Child of test_metrics.py: one scenario per run, named by the first argument, each about what importing the
package and cuda_reclaim.metrics loads."""

import sys

import scenario


def import_the_package():
    """Imports the package; prints whether prometheus_client was imported with it."""
    import cuda_reclaim  # noqa: F401 - the import under test

    print("prometheus_client" in sys.modules)


def import_metrics_without_prometheus_client():
    """Imports cuda_reclaim.metrics where prometheus_client cannot be imported; prints the ImportError."""
    sys.modules["prometheus_client"] = None  # an import of it raises ImportError
    try:
        import cuda_reclaim.metrics  # noqa: F401 - the import under test
    except ImportError as error:
        print(error)


if __name__ == "__main__":
    scenario.run(import_the_package, import_metrics_without_prometheus_client)
