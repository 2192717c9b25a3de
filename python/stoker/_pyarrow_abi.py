"""The pyarrow version rule, checked by ``import stoker`` before the extension is loaded.

The extension links the Arrow and Parquet C++ libraries inside the pyarrow wheel
(``libarrow.so.<major * 100 + minor>``), and Arrow treats that SO version as the ABI version: a
stoker build works with every patch release of the pyarrow minor it was built against and with no
other. The built-against version is recorded at build time in ``stoker/_build_info.py``.
"""

from __future__ import annotations

import os

import pyarrow

from .errors import PyarrowVersionError


def _minor(version: str) -> tuple:
    parts = version.split(".")
    try:
        return int(parts[0]), int(parts[1])
    except (IndexError, ValueError):
        return tuple(parts[:2])


def required_range(built: str) -> str:
    """The pip requirement of pyarrow versions ABI-compatible with `built`, e.g. >=26.0,<26.1."""
    major, minor = _minor(built)
    return f"pyarrow>={major}.{minor},<{major}.{minor + 1}"


def check_pyarrow_version(found: str | None = None, built: str | None = None) -> None:
    """Raises PyarrowVersionError when pyarrow's major.minor differs from the one built against."""
    if built is None:
        try:
            from ._build_info import PYARROW_VERSION as built
        except ImportError:  # a source tree that was never built: the extension import will say so
            return
    found = pyarrow.__version__ if found is None else found
    if _minor(found) == _minor(built):
        return
    raise PyarrowVersionError(
        f"stoker was built against pyarrow {built} and needs '{required_range(built)}', but "
        f"pyarrow {found} is installed ({pyarrow.__file__}). stoker links pyarrow's C++ "
        f"libraries, whose ABI changes with every minor release. Fix: "
        f"pip install '{required_range(built)}', or build stoker from source against pyarrow "
        f"{found} (docs/install.md; stoker at {os.path.dirname(__file__)}).")
