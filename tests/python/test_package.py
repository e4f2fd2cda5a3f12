"""The package as a user imports it: lazy submodules, its version, the typing markers it ships."""

import importlib.metadata
import os

import pytest

import cuda_reclaim
from conftest import run_child_script


def test_asyncio_submodule_works_after_a_plain_import_without_importing_asyncio_first():
    result = run_child_script("lazy_asyncio_submodule.py")
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


def test_unknown_attribute_raises_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'asyncoi'"):
        cuda_reclaim.asyncoi


def test_version_is_the_installed_distribution_version():
    try:
        distribution = importlib.metadata.distribution("cuda-reclaim")
    except importlib.metadata.PackageNotFoundError:
        distribution = None
    installed_init = distribution and str(distribution.locate_file("cuda_reclaim/__init__.py"))
    installed = bool(installed_init) and os.path.isfile(installed_init) and os.path.samefile(
        installed_init, cuda_reclaim.__file__
    )
    if not installed:
        pytest.skip("cuda_reclaim runs from the source tree here: no installed metadata to compare with")
    assert cuda_reclaim.__version__ == distribution.version


def test_typing_markers_ship_with_the_package():
    package = os.path.dirname(cuda_reclaim.__file__)
    for name in ("py.typed", "__init__.pyi", "_reclaim.pyi", "asyncio.pyi", "pytest_plugin.pyi"):
        assert os.path.isfile(os.path.join(package, name)), name
