"""``stoker.describe``: what a dataset holds and what a Loader makes of each column, from the
footers alone. One engine call (``Describe`` in ``cpp/include/stoker/describe.h``): the same
listing, globs, storage_options and retries as a Loader, every footer read once."""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Optional, Sequence

from . import _stoker
from ._option_names import check_names
from ._options import Source, build
from ._redact import redact_uri
from .loader import Loader

__all__ = ["describe", "redact_uri"]

# Every Loader argument is accepted (so the CLI can pass the options of a run unchanged); those
# that do not change a description are ignored (see _options.build, describe=True).
_OWN = ("self", "source", "columns", "features", "storage_options")


def _loader_defaults() -> dict:
    params = inspect.signature(Loader.__init__).parameters
    return {name: p.default for name, p in params.items() if name not in _OWN}


def describe(source: Source, columns: Optional[Sequence[str]] = None,
             features: Any = None,
             storage_options: Optional[Mapping[str, Any]] = None,
             **loader_options: Any) -> "_stoker.DatasetDescription":
    """Describes a Parquet dataset and what ``stoker.Loader`` produces for each column.

    Reads the footers only. Each column is resolved on its own with the given options, so one
    column stoker cannot read does not hide the others: its entry says why (``error_kind``,
    ``error``: what ``Loader`` would raise).

    Args:
        source: As for ``Loader``: a file, folder, glob, URI, or a list of these.
        columns: Columns to describe (default: every column, hive partition columns included).
        features: Columns to describe as stacked features: a list, or ``{group: [columns]}``.
        storage_options: As for ``Loader``.
        **loader_options: Any other ``Loader`` argument. ``lists``, ``fill_null``,
            ``null_mask``, ``pad_value``, ``features_dtype``, ``allow_lossy_cast``,
            ``num_io_threads``, ``max_retries`` and ``retry_base_delay`` change the description;
            the others are accepted and ignored.

    Returns:
        A ``DatasetDescription``: ``files`` (path, size, rows, num_row_groups), ``row_groups``
        (file, index, rows, bytes, compressed_bytes), ``columns`` (name, arrow_type, partition,
        physical_types, encodings, compression, compressed/uncompressed bytes, null counts, and
        ``ok``/``kind``/``dtype``/``inner_shape``/``annotation`` or ``error_kind``/``error``),
        ``rows`` and ``fingerprint``. Paths carry no credentials.

    Raises:
        StokerError: what ``Loader`` raises for the same sources (not found, no Parquet files,
            corrupt footer, schema mismatch, storage errors).
    """
    defaults = _loader_defaults()
    check_names(loader_options, defaults, "stoker.describe()")
    kw = {name: loader_options.get(name, value) for name, value in defaults.items()}
    kw["storage_options"] = storage_options
    # The Loader's own option building: what describe() reads is what a Loader would.
    return _stoker.describe(build(source, columns, features, describe=True, **kw).options)
