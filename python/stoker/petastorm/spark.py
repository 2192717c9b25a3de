"""Petastorm's Spark converter on stoker: change one import.

    from stoker.petastorm.spark import SparkDatasetConverter, make_spark_converter
    # was: from petastorm.spark import SparkDatasetConverter, make_spark_converter

    spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, "file:///tmp/cache")
    converter = make_spark_converter(df)
    with converter.make_torch_dataloader(batch_size=64, num_epochs=1) as loader:
        for batch in loader: ...
    converter.delete()

The DataFrame is written once by Spark (:func:`stoker.spark.materialize`) and read by
``stoker.petastorm.make_batch_reader`` + ``stoker.petastorm.pytorch.DataLoader``, with
Petastorm's arguments and defaults (``batch_size=32``, ``num_epochs=None``: endless,
``workers_count=4``). ``make_tf_dataset`` is not provided: stoker feeds PyTorch.
"""

from __future__ import annotations

from typing import Any, Callable, List, Optional

from .. import spark as _spark
from ..errors import InvalidOptionError, UnsupportedInputError

__all__ = ["SparkDatasetConverter", "make_spark_converter"]

# Petastorm's DEFAULT_ROW_GROUP_SIZE_BYTES.
_DEFAULT_ROW_GROUP_SIZE_BYTES = 32 * 1024 * 1024
_COMPRESSIONS = ("uncompressed", "gzip", "lz4", "snappy")


class SparkDatasetConverter:
    """One materialized DataFrame; makes any number of torch data loaders. Picklable."""

    PARENT_CACHE_DIR_URL_CONF = "petastorm.spark.converter.parentCacheDirUrl"

    def __init__(self, cache_dir_url: str, file_urls: List[str], dataset_size: int) -> None:
        self.cache_dir_url = cache_dir_url
        self.file_urls = file_urls
        self.dataset_size = dataset_size

    def __len__(self) -> int:
        return self.dataset_size

    def make_torch_dataloader(self, batch_size: int = 32, num_epochs: Optional[int] = None,
                              workers_count: Optional[int] = None,
                              shuffling_queue_capacity: int = 0,
                              data_loader_fn: Optional[Callable[..., Any]] = None,
                              **petastorm_reader_kwargs: Any) -> "TorchDatasetContextManager":
        """A context manager whose value is a ``stoker.petastorm.pytorch.DataLoader`` (or
        ``data_loader_fn(reader=..., batch_size=..., shuffling_queue_capacity=...)``) over
        ``make_batch_reader(files, num_epochs=..., workers_count=..., **petastorm_reader_kwargs)``;
        leaving it stops the reader."""
        for name in ("dataset_url", "dataset_url_or_urls", "num_epochs", "workers_count"):
            if name in petastorm_reader_kwargs:
                raise InvalidOptionError(
                    f"make_torch_dataloader() sets {name} itself: drop it from the reader "
                    "arguments")
        reader_kwargs = dict(petastorm_reader_kwargs, num_epochs=num_epochs,
                             workers_count=4 if workers_count is None else workers_count)
        return TorchDatasetContextManager(self.file_urls, batch_size, reader_kwargs,
                                          shuffling_queue_capacity, data_loader_fn)

    def make_tf_dataset(self, *args: Any, **kwargs: Any) -> Any:
        raise UnsupportedInputError(
            "stoker.petastorm.spark makes PyTorch data loaders only: use make_torch_dataloader, "
            "or petastorm.spark for TensorFlow")

    def delete(self) -> None:
        """Removes the materialized files."""
        _spark.SparkDataset(self.cache_dir_url, self.file_urls, self.dataset_size).delete()


class TorchDatasetContextManager:
    """Opens the reader and data loader on entry; stops the reader on exit."""

    def __init__(self, files: List[str], batch_size: int, reader_kwargs: dict,
                 shuffling_queue_capacity: int,
                 data_loader_fn: Optional[Callable[..., Any]]) -> None:
        self._files = files
        self._batch_size = batch_size
        self._reader_kwargs = reader_kwargs
        self._capacity = shuffling_queue_capacity
        self._make = data_loader_fn
        self.reader: Any = None
        self.loader: Any = None

    def __enter__(self) -> Any:
        from . import make_batch_reader
        from .pytorch import DataLoader

        self.reader = make_batch_reader(self._files, **self._reader_kwargs)
        make = self._make or DataLoader
        self.loader = make(reader=self.reader, batch_size=self._batch_size,
                           shuffling_queue_capacity=self._capacity)
        return self.loader

    def __exit__(self, *exc: Any) -> None:
        self.reader.stop()
        self.reader.join()


def make_spark_converter(df: Any,
                         parquet_row_group_size_bytes: int = _DEFAULT_ROW_GROUP_SIZE_BYTES,
                         compression_codec: Optional[str] = None,
                         dtype: Optional[str] = "float32") -> SparkDatasetConverter:
    """Petastorm's ``make_spark_converter``: ``df`` (a DataFrame, or the path of a folder of
    Parquet files already written) materialized under the Spark conf
    ``petastorm.spark.converter.parentCacheDirUrl``; ``compression_codec=None`` writes
    uncompressed, as Petastorm does."""
    from pyspark.sql import SparkSession

    spark = SparkSession.builder.getOrCreate()
    if isinstance(df, str):
        written = spark.read.parquet(df)
        files = sorted(_spark.local_path(f) for f in written.inputFiles())
        return SparkDatasetConverter(df, files, written.count())
    parent = spark.conf.get(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, None)
    if not parent:
        raise InvalidOptionError(
            f"Please set the spark config {SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF} "
            "(e.g. spark.conf.set(SparkDatasetConverter.PARENT_CACHE_DIR_URL_CONF, "
            "'file:///tmp/stoker-cache'))")
    codec = (compression_codec or "uncompressed").lower()
    # Petastorm also lists bzip2 and deflate, which Parquet has no codec for: Spark refuses them.
    if codec not in _COMPRESSIONS:
        raise InvalidOptionError(
            f"compression_codec should be None or one of {', '.join(map(repr, _COMPRESSIONS))}, "
            f"got {compression_codec!r}")
    data = _spark.materialize(df, parent, dtype=dtype,
                              row_group_bytes=parquet_row_group_size_bytes, compression=codec)
    return SparkDatasetConverter(data.url, data.files, data.num_rows)
