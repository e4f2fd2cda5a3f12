"""The model (test_model.py) exercises every public name: each rule declares the names it calls
(`@exercises`), and their union, with the exclusions below, must be every name of cuda_reclaim's
``__all__`` and of each public submodule's."""

import importlib
import os
import pkgutil

import pytest

import cuda_reclaim

pytest.importorskip("prometheus_client")  # cuda_reclaim.metrics needs it (the metrics extra)
test_model = pytest.importorskip("test_model")

WORKER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "children", "model_worker.py")

# Names no rule calls, each with why. Pure data and exception classes that are only raised are checked where
# they are defined (test_stats_table.py, test_api.py, test_metrics.py, test_pytest_plugin.py, test_graph_api.py).
EXCLUDED = {
    # Pure data: tuples and dicts of stats() keys and constants; the model reads them, it calls nothing.
    "ABI_VERSION": "a constant (the C ABI's version)",
    "COUNTERS": "data: the counter table, every key of stats() (the model's gauges and hold-law check read it)",
    "pytest_plugin.DEFAULT_TIMEOUT": "a constant (the check's default flush timeout)",
    # Exception classes, only raised: the fake driver fails on purpose in test_graph_api.py.
    "DriverError": "an exception class the package raises, never called",
    # A pytest fixture cannot be called (pytest refuses a direct call): it is what pytest injects in a test,
    # and a pytest session per example would cost more than the whole model. The model calls what it gives
    # (Reclaim: flush, delta, baseline, stats); test_pytest_plugin.py runs the fixture in pytest sessions.
    "pytest_plugin.reclaim": "a pytest fixture: only pytest calls it",
    # Modules that re-point another library's callback methods (their install() needs that library, which the
    # model's worker does not import): test_integrations.py runs them against stand-ins and the fake driver,
    # on the public API that the model exercises (launch_host_func_ordered and the rest).
    "integrations.cuda_core": "a module of the integrations (test_integrations.py)",
    "integrations.cupy": "a module of the integrations (test_integrations.py)",
    "integrations.numba_cuda": "a module of the integrations (test_integrations.py)",
}

# How the worker refers to each module's names (children/model_worker.py imports them under these names).
WORKER_PREFIX = {
    "": "cuda_reclaim.",
    "asyncio": "reclaim_asyncio.",
    "integrations": "cuda_reclaim.integrations.",  # its names are modules, excluded above
    "metrics": "reclaim_metrics.",
    "pytest_plugin": "reclaim_plugin.",
}


def public_names():
    """`name` for each of cuda_reclaim.__all__, `module.name` for each public submodule's __all__."""
    names = set(cuda_reclaim.__all__)
    for module in pkgutil.iter_modules(cuda_reclaim.__path__):
        if module.name.startswith("_"):
            continue
        submodule = importlib.import_module(f"cuda_reclaim.{module.name}")
        names.update(f"{module.name}.{name}" for name in getattr(submodule, "__all__", ()))
    return names


def exercised():
    """name -> the rules that declare it."""
    rules = {}
    for rule_name, value in vars(test_model.PublicApiModel).items():
        for name in getattr(value, "exercises", ()):
            rules.setdefault(name, []).append(rule_name)
    return rules


def test_the_public_submodules_are_the_ones_the_worker_imports():
    submodules = {m.name for m in pkgutil.iter_modules(cuda_reclaim.__path__) if not m.name.startswith("_")}
    assert submodules == set(WORKER_PREFIX) - {""}, "a public submodule the model does not know of"


def test_every_public_name_is_exercised_by_a_rule_of_the_model():
    names = public_names()
    rules = exercised()
    assert rules, "no rule declares what it exercises: the check would pass vacuously"
    missing = sorted(names - set(rules) - set(EXCLUDED))
    assert not missing, f"public names no rule of test_model.py exercises (add a rule, or exclude with why): {missing}"


def test_the_declarations_and_exclusions_name_public_names():
    names = public_names()
    unknown = sorted(set(exercised()) - names)
    assert not unknown, f"rules declare names that are not public: {unknown}"
    stale = sorted(set(EXCLUDED) - names)
    assert not stale, f"exclusions of names that are not public: {stale}"
    both = sorted(set(EXCLUDED) & set(exercised()))
    assert not both, f"excluded and exercised at once: {both}"


def test_the_worker_calls_each_declared_name():
    # A declaration is a claim; the worker's source must at least name what is declared.
    with open(WORKER, encoding="utf-8") as source:
        text = source.read()
    unnamed = []
    for name in exercised():
        module, _, attribute = name.rpartition(".")
        if WORKER_PREFIX[module] + attribute not in text:
            unnamed.append(name)
    assert not unnamed, f"declared as exercised, never named in children/model_worker.py: {sorted(unnamed)}"
