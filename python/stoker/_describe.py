"""``stoker.describe``: what a dataset holds and what a Loader makes of each column, from the
footers alone. One engine call (``Describe`` in ``cpp/include/stoker/describe.h``): the same
listing, globs, storage_options and retries as a Loader, every footer read once."""

from __future__ import annotations

import inspect
from typing import Any, Mapping, Optional, Sequence

from . import _stoker
from ._options import (Source, check_int, check_storage_options, column_options, feature_columns,
                       normalise_sources, parse_size, set_categories, set_features, set_transforms,
                       storage_value, transform_chains)
from ._option_names import check_names
from ._redact import redact_uri
from .errors import InvalidOptionError
from .loader import Loader

__all__ = ["describe", "redact_uri"]

# Loader arguments that change the description; every other Loader argument is accepted (so the
# CLI can pass the options of a run unchanged) and has no effect on it.
_DESCRIBED = ("features_name", "features_dtype", "allow_lossy_cast", "categories", "lists",
              "pad_value",
              "fill_null", "null_mask", "num_io_threads", "max_retries", "retry_base_delay",
              "transforms", "on_error", "petastorm", "time_unit", "decimals")


def _loader_defaults() -> dict:
    params = inspect.signature(Loader.__init__).parameters
    return {name: p.default for name, p in params.items() if name not in ("self", "source")}


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
    kw = {name: loader_options.get(name, defaults[name]) for name in _DESCRIBED}
    if isinstance(columns, str) or isinstance(features, str):
        raise InvalidOptionError("columns and features take a list of names, not a string")
    check_int("num_io_threads", kw["num_io_threads"])

    opts = _stoker.LoaderOptions()
    opts.sources = normalise_sources(source)
    opts.columns = list(columns) if columns is not None else []
    null_mask = set_features(opts, features, kw["features_dtype"], kw["features_name"],
                             kw["null_mask"])
    set_categories(opts, kw["categories"])
    opts.allow_lossy_cast = bool(kw["allow_lossy_cast"])
    opts.num_io_threads = kw["num_io_threads"] or 0
    if storage_options is not None:
        if not isinstance(storage_options, Mapping):
            raise InvalidOptionError("storage_options must be a dict of strings")
        check_storage_options(opts.sources, storage_options)
        opts.storage_options = {str(k): storage_value(v) for k, v in storage_options.items()}
    check_int("max_retries", kw["max_retries"])
    opts.max_retries = kw["max_retries"]
    opts.retry_base_delay_s = float(kw["retry_base_delay"])
    # Sizes are checked as a Loader checks them, though they do not change the description.
    for name in ("prefetch_bytes", "task_bytes", "cache_bytes", "cache_min_free_bytes"):
        parse_size(loader_options.get(name, defaults[name]), name)
    opts.default_column_options, opts.column_options = column_options(
        kw["lists"], kw["pad_value"], kw["fill_null"], null_mask,
        opts.columns + feature_columns(opts), kw["on_error"], kw["time_unit"], kw["decimals"])
    transforms = transform_chains(kw["transforms"]) if kw["transforms"] is not None else {}
    if kw["petastorm"] is not False:
        transforms = _petastorm_transforms(opts.sources, storage_options, columns, transforms,
                                           remote=kw["petastorm"] is True)
    if transforms:
        set_transforms(opts, transforms)
    return _stoker.describe(opts)


def _petastorm_transforms(sources, storage_options, columns, transforms, remote):
    """A Petastorm store's codec fields described as the Loader decodes them; a field the Loader
    refuses (a None dimension) is described as stored."""
    from ._petastorm import detect, plan_columns
    from .errors import UnsupportedTypeError

    store = detect(sources, storage_options, remote=remote)
    if store is None:
        return transforms
    out = dict(transforms)
    for name in (columns if columns is not None else list(store.fields)):
        try:
            planned, _, _ = plan_columns(store, [name], {name: out[name]} if name in out else {})
        except UnsupportedTypeError:
            continue
        out.update(planned)
    return out
