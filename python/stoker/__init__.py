"""stoker: a deterministic, parallel Parquet-to-tensor data loader with a C++ core."""

import pyarrow  # noqa: F401  (loads libarrow/libparquet before the extension needs them)

from . import errors, ops, spark
from .cache import cache_usage, clear_cache
from ._describe import describe
from ._redact import redact_uri
from ._ragged import Ragged, to_pylist
from ._user_transform import TransformSpec
from .errors import StokerError
from .loader import Loader

__version__ = "0.2.0"


def __getattr__(name):
    # torch is imported only by programs that ask for the adaptor (start-up stays fast).
    if name == "IterableDataset":
        from ._torch import IterableDataset

        return IterableDataset
    raise AttributeError(f"module 'stoker' has no attribute {name!r}")


__all__ = [
    "IterableDataset", "Loader", "Ragged", "StokerError", "TransformSpec", "cache_usage", "clear_cache", "describe",
    "errors", "ops", "redact_uri", "spark", "to_pylist", "__version__",
]
