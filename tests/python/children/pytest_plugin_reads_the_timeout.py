"""A pytester test module of test_pytest_plugin.py: getini("reclaim_timeout") is the value that
EXPECTED_RECLAIM_TIMEOUT gives (a Python literal), of its type unless EXPECTED_RECLAIM_TIMEOUT_TYPE is "any"."""

import ast
import os


def test_reads_the_timeout(request):
    expected = ast.literal_eval(os.environ["EXPECTED_RECLAIM_TIMEOUT"])
    value = request.config.getini("reclaim_timeout")
    typed = os.environ.get("EXPECTED_RECLAIM_TIMEOUT_TYPE") == "any" or type(value) is type(expected)
    assert typed and value == expected, repr(value)
