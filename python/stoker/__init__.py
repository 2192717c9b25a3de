"""stoker: a deterministic, parallel Parquet-to-tensor data loader with a C++ core."""

import pyarrow  # noqa: F401  (loads libarrow/libparquet before the extension needs them)

from . import errors
from .cache import cache_usage, clear_cache
from ._describe import describe
from ._redact import redact_uri
from ._ragged import Ragged, to_pylist
from .errors import StokerError
from .loader import Loader

__version__ = "0.1.0"
__all__ = [
    "Loader", "Ragged", "StokerError", "cache_usage", "clear_cache", "describe", "errors",
    "redact_uri", "to_pylist", "__version__",
]
