"""A pytester test module of test_pytest_plugin.py: one test with the reclaim marker, for --strict-markers."""

import pytest


@pytest.mark.reclaim(allow_held=True)
def test_marked():
    pass
