"""Run by children/api_scenarios.py inside a subinterpreter (its text, through _testcapi.run_in_subinterp):
prints whether the import of cuda_reclaim._reclaim is refused there, and how."""

try:
    import cuda_reclaim._reclaim  # noqa: F401 - the import is what is checked
except ImportError as e:
    print("refused:", e)
else:
    print("imported")
