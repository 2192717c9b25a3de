"""A Spark DataFrame served by stoker: written once to Parquet by Spark, read by a Loader.

    data = stoker.spark.materialize(df, "/local_disk0/stoker")   # or a file:// / s3:// URL
    loader = data.loader(batch_size=1024, features=[...], label="y")   # any Loader option
    ...
    data.delete()

``materialize`` writes the DataFrame with Spark's own Parquet writer into a new folder under the
parent folder, once: a second call with a DataFrame of the same plan and the same write options
returns the same folder (as Petastorm's converter does). The folder is removed at interpreter exit
(best effort) or by :meth:`SparkDataset.delete`. Floating-point columns (and arrays of them) are
cast to ``dtype`` (``"float32"`` by default, ``None`` keeps them) and Spark ML vectors become
arrays, as ``petastorm.spark.make_spark_converter`` does. The Petastorm-named interface is
:mod:`stoker.petastorm.spark`.

Runs on the driver (it needs the active SparkSession); the returned :class:`SparkDataset` is
picklable, so a training function on another process or node can make its Loader from it.
"""

from __future__ import annotations

import atexit
import dataclasses
import datetime
import os
import shutil
import threading
import urllib.parse
import uuid
from typing import Any, List, Optional

from .errors import InvalidOptionError

__all__ = ["materialize", "SparkDataset", "local_path"]

_COMPRESSIONS = ("uncompressed", "snappy", "gzip", "lz4", "zstd")
_DEFAULT_ROW_GROUP_BYTES = 32 * 1024 * 1024


@dataclasses.dataclass
class SparkDataset:
    """A materialized DataFrame: its folder, its Parquet files (as stoker sources) and rows."""

    url: str  # the folder, as Spark wrote it
    files: List[str]  # every Parquet file, local paths or URIs stoker reads
    num_rows: int

    def __len__(self) -> int:
        return self.num_rows

    def loader(self, **kwargs: Any) -> Any:
        """A :class:`stoker.Loader` over the files; ``kwargs`` are Loader options."""
        from .loader import Loader

        if "source" in kwargs:
            raise InvalidOptionError(
                "SparkDataset.loader() reads the materialized DataFrame: drop source=")
        return Loader(self.files, **kwargs)

    def delete(self) -> None:
        """Removes the folder (and forgets it, so the next materialize writes again)."""
        _forget(self.url)
        _delete(self.url)


def local_path(url: str) -> str:
    """A URL Spark reports (``file:/x``, ``file:///x``, ``dbfs:/x``, ``s3a://b/k``) as a stoker
    source: a local path, or a URI of a filesystem stoker reads (``s3a``/``s3n`` -> ``s3``)."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        return urllib.parse.unquote(parsed.path) if parsed.scheme else url
    if parsed.scheme == "dbfs":
        return "/dbfs" + urllib.parse.unquote(parsed.path)
    if parsed.scheme in ("s3a", "s3n"):
        return "s3" + url[len(parsed.scheme):]
    return url


def materialize(df: Any, parent_dir: str, *, dtype: Optional[str] = "float32",
                row_group_bytes: int = _DEFAULT_ROW_GROUP_BYTES,
                compression: str = "snappy") -> SparkDataset:
    """Writes ``df`` (a ``pyspark.sql.DataFrame``) under ``parent_dir`` once and describes it.

    ``parent_dir``: a local folder or a URL Spark writes (``file:///``, ``s3a://``, ``dbfs:/``),
    visible to every process that reads the dataset. ``dtype``: ``"float32"``, ``"float64"`` or
    ``None`` (float columns as they are). ``row_group_bytes``: Parquet's ``parquet.block.size``.
    """
    if dtype not in (None, "float32", "float64"):
        raise InvalidOptionError(f"dtype must be 'float32', 'float64' or None, got {dtype!r}")
    if isinstance(compression, str) and compression.lower() == "none":
        compression = "uncompressed"
    if not isinstance(compression, str) or compression.lower() not in _COMPRESSIONS:
        raise InvalidOptionError(
            f"compression must be one of {', '.join(map(repr, _COMPRESSIONS))}, got "
            f"{compression!r}")
    if isinstance(row_group_bytes, bool) or not isinstance(row_group_bytes, int) or \
            row_group_bytes <= 0:
        raise InvalidOptionError(
            f"row_group_bytes must be a positive integer, got {row_group_bytes!r}")
    parent = _parent_url(parent_dir)
    key = (row_group_bytes, compression.lower(), dtype, parent)
    plan = df._jdf.queryExecution().analyzed()
    with _LOCK:
        for known_plan, known_key, url in _MATERIALIZED:
            if known_key == key and known_plan.sameResult(plan):
                return _describe(df.sparkSession, url)
        url = _write(df, parent, dtype, row_group_bytes, compression.lower())
        _MATERIALIZED.append((plan, key, url))
    return _describe(df.sparkSession, url)


_LOCK = threading.Lock()
_MATERIALIZED: list = []  # (analyzed plan, write options, folder url)


def _parent_url(parent_dir: Any) -> str:
    if not isinstance(parent_dir, (str, os.PathLike)) or not os.fspath(parent_dir):
        raise InvalidOptionError(
            f"parent_dir must be a folder or URL (file:///..., s3a://..., dbfs:/...), got "
            f"{parent_dir!r}")
    text = os.fspath(parent_dir)
    if urllib.parse.urlparse(text).scheme:
        return text.rstrip("/")
    return "file://" + os.path.abspath(os.path.expanduser(text))


def _write(df: Any, parent: str, dtype: Optional[str], row_group_bytes: int,
           compression: str) -> str:
    spark = df.sparkSession
    name = "{}-appid-{}-{}".format(datetime.datetime.now().strftime("%Y%m%d%H%M%S"),
                                   spark.sparkContext.applicationId, uuid.uuid4())
    url = parent + "/" + name
    df = _cast_floats(_vectors_to_arrays(df, dtype), dtype)
    (df.write.option("compression", compression)
     .option("parquet.block.size", row_group_bytes)
     .parquet(url))
    atexit.register(_delete_quietly, url)
    return url


def _vectors_to_arrays(df: Any, dtype: Optional[str]) -> Any:
    try:
        from pyspark.ml.functions import vector_to_array
        from pyspark.ml.linalg import VectorUDT
        from pyspark.mllib.linalg import VectorUDT as OldVectorUDT
    except ImportError:  # pyspark without its ML package: no vector columns can exist
        return df
    for field in df.schema:
        if isinstance(field.dataType, (VectorUDT, OldVectorUDT)):
            df = df.withColumn(field.name, vector_to_array(df[field.name], dtype or "float64"))
    return df


def _cast_floats(df: Any, dtype: Optional[str]) -> Any:
    if dtype is None:
        return df
    from pyspark.sql.types import ArrayType, DoubleType, FloatType

    source, target = (DoubleType, FloatType) if dtype == "float32" else (FloatType, DoubleType)
    for field in df.schema:
        if isinstance(field.dataType, source):
            df = df.withColumn(field.name, df[field.name].cast(target()))
        elif isinstance(field.dataType, ArrayType) and isinstance(field.dataType.elementType,
                                                                  source):
            df = df.withColumn(field.name, df[field.name].cast(ArrayType(target())))
    return df


def _describe(spark: Any, url: str) -> SparkDataset:
    written = spark.read.parquet(url)
    files = sorted(local_path(f) for f in written.inputFiles())
    return SparkDataset(url=url, files=files, num_rows=written.count())


def _forget(url: str) -> None:
    with _LOCK:
        _MATERIALIZED[:] = [entry for entry in _MATERIALIZED if entry[2] != url]


def _delete(url: str) -> None:
    path = local_path(url)
    if "://" not in path:
        shutil.rmtree(path, ignore_errors=True)
        return
    import pyarrow.fs as pafs

    filesystem, inner = pafs.FileSystem.from_uri(path)
    try:
        filesystem.delete_dir(inner)
    except FileNotFoundError:
        pass


def _delete_quietly(url: str) -> None:
    try:
        _delete(url)
    except Exception:  # noqa: BLE001 - at exit, a folder that cannot be removed is left
        pass
