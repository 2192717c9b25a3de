"""The pyarrow version rule at `import stoker` (docs/install.md, "The pyarrow version rule").

The installed wheel against real pyarrow releases is tests/system/test_wheel.py; here the check itself.
"""

from __future__ import annotations

import pyarrow
import pytest

import stoker
from stoker import _build_info
from stoker._pyarrow_abi import check_pyarrow_version, required_range
from stoker.errors import PyarrowVersionError, StokerError


def test_the_build_records_the_pyarrow_it_was_built_against():
    assert _build_info.PYARROW_VERSION == pyarrow.__version__
    assert _build_info.HAVE_PNG and _build_info.HAVE_WEBP  # `make build` has every codec
    check_pyarrow_version()  # what `import stoker` ran


@pytest.mark.parametrize("found", ["26.0.0", "26.0.1", "26.0.7", "26.0.1.dev3"])
def test_any_patch_release_of_the_minor_passes(found):
    check_pyarrow_version(found=found, built="26.0.1")


@pytest.mark.parametrize("found", ["25.0.1", "26.1.0", "27.0.0", "2.6.0"])
def test_another_minor_is_a_clear_import_error(found):
    with pytest.raises(PyarrowVersionError) as info:
        check_pyarrow_version(found=found, built="26.0.1")
    message = str(info.value)
    assert "built against pyarrow 26.0.1" in message
    assert f"pyarrow {found} is installed" in message
    assert "pip install 'pyarrow>=26.0,<26.1'" in message
    assert isinstance(info.value, ImportError) and isinstance(info.value, StokerError)


def test_required_range_is_the_minor():
    assert required_range("26.0.1") == "pyarrow>=26.0,<26.1"
    assert required_range("25.3.0") == "pyarrow>=25.3,<25.4"


def test_the_wheel_metadata_pins_the_built_minor():
    import os
    import tomllib

    root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
    with open(os.path.join(root, "pyproject.toml"), "rb") as f:
        project = tomllib.load(f)
    built = _build_info.PYARROW_VERSION
    major, minor = built.split(".")[:2]
    pin = f"pyarrow>={major}.{minor},<{major}.{int(minor) + 1}"
    assert pin in project["project"]["dependencies"]
    assert f"pyarrow=={built}" in project["build-system"]["requires"]
    assert stoker.__version__ == project["project"]["version"]
