"""Petastorm datasets written by Petastorm itself, and Petastorm's own readers, for the tests.

Petastorm 0.13.1 needs the bench's shims to run on pyarrow 25 / NumPy 2
(bench/runners/_petastorm_compat.py). Spark's Python workers are separate processes: a
``sitecustomize.py`` on their PYTHONPATH applies the same shims there, so the functions Petastorm
ships to them (row encoding, the row-group count of materialize_dataset) run unchanged.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from typing import Any, Dict, List

import numpy as np

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def apply_compat() -> None:
    if REPO not in sys.path:
        sys.path.insert(0, REPO)
    from bench.runners import _petastorm_compat

    _petastorm_compat.apply()


def missing() -> str:
    """Why Petastorm (with OpenCV) cannot run here, or '' when it can."""
    try:
        apply_compat()
        import cv2  # noqa: F401
        import petastorm  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"petastorm/opencv unavailable: {type(error).__name__}: {error}"
    return ""


def spark_missing() -> str:
    """Why a local Spark cannot start here (no Java, no pyspark), or '' when it can."""
    if shutil.which("java") is None:
        return "java not found (apt-get install openjdk-17-jre-headless)"
    try:
        import pyspark  # noqa: F401
    except ImportError as error:
        return f"pyspark not installed: {error}"
    return ""


_SITECUSTOMIZE = """
import sys
sys.path.insert(0, {repo!r})
try:
    from bench.runners import _petastorm_compat
    _petastorm_compat.apply()
except Exception as error:  # the worker still runs; Petastorm's own error will show
    sys.stderr.write("petastorm compat shims failed: %r\\n" % (error,))
"""


def spark_session(tmp: str):
    """A local[2] SparkSession whose Python workers load Petastorm's shims."""
    from pyspark.sql import SparkSession

    site = os.path.join(tmp, "spark-site")
    os.makedirs(site, exist_ok=True)
    with open(os.path.join(site, "sitecustomize.py"), "w") as f:
        f.write(_SITECUSTOMIZE.format(repo=REPO))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [site, REPO] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    return (SparkSession.builder.master("local[2]").appName("stoker-petastorm-tests")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .config("spark.driver.memory", "1g")
            .config("spark.local.dir", os.path.join(tmp, "spark-local"))
            .config("spark.driver.extraJavaOptions", f"-Djava.io.tmpdir={tmp}")
            .getOrCreate())


def materialize(spark, path: str, schema, rows: List[Dict[str, Any]], row_group_size_mb: int = 1,
                partitions: int = 2) -> str:
    """Writes ``rows`` the way Petastorm's documentation does (materialize_dataset +
    dict_to_spark_row); returns the file:// URL."""
    apply_compat()
    from petastorm.etl.dataset_metadata import materialize_dataset
    from petastorm.unischema import dict_to_spark_row

    url = "file://" + path
    with materialize_dataset(spark, url, schema, row_group_size_mb):
        rdd = spark.sparkContext.parallelize(rows, partitions).map(
            lambda row: dict_to_spark_row(schema, row))
        spark.createDataFrame(rdd, schema.as_spark_schema()).coalesce(partitions) \
            .write.mode("overwrite").parquet(url)
    return url


def petastorm_rows(url: str, **kwargs) -> List[Any]:
    """Every row Petastorm's own make_reader returns (one epoch)."""
    apply_compat()
    from petastorm import make_reader

    kwargs.setdefault("num_epochs", 1)
    # The thread pool of Petastorm 0.13.1 intermittently ends a small dataset's epoch with no
    # rows at all; the dummy (synchronous) pool reads every row.
    kwargs.setdefault("reader_pool_type", "dummy")
    with make_reader(url, **kwargs) as reader:
        return [row for row in reader]


def petastorm_batches(url: str, **kwargs) -> List[Any]:
    apply_compat()
    from petastorm import make_batch_reader

    kwargs.setdefault("num_epochs", 1)
    kwargs.setdefault("reader_pool_type", "dummy")
    with make_batch_reader(url, **kwargs) as reader:
        return [batch for batch in reader]


def value_key(value: Any) -> Any:
    """A hashable, exact form of a value (arrays by dtype, shape and bytes)."""
    if value is None:
        return None
    if isinstance(value, np.ndarray):
        return ("nd", value.dtype.str, value.shape, value.tobytes())
    if isinstance(value, np.generic):
        item = value.item()
        return ("np", type(value).__name__, "nan" if item != item else item)
    return ("py", type(value).__name__, value)


def row_key(row: Any) -> tuple:
    """Hashable row, fields by name (Petastorm orders a schema view's fields by a set's order,
    which changes between runs); a null string is None (Petastorm 0.13.1 on pandas 3 says
    'nan')."""
    out = []
    for name in row._fields:
        value = getattr(row, name)
        if isinstance(value, np.str_) and value == "nan":
            value = None
        out.append((name, value_key(value)))
    return tuple(sorted(out))


def scratch() -> str:
    return tempfile.mkdtemp(prefix="stoker-petastorm-")


def remove(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)


def write_with_helpers(path: str, schema, rows: List[Dict[str, Any]], row_group_rows: int = 8,
                       files: int = 2) -> str:
    """The on-disk format of materialize_dataset without Spark: rows encoded by the Unischema's
    codecs, Parquet written by pyarrow, the metadata added by Petastorm's own functions
    (bench.petastorm_format.write_store); returns the file:// URL."""
    apply_compat()
    from bench.petastorm_format import write_store

    write_store(path, schema, rows, row_group_rows, files)
    return "file://" + path


def everything_schema():
    """Every codec, nullable fields, None dims, PNG and JPEG (RGB and gray)."""
    apply_compat()
    from petastorm.codecs import (CompressedImageCodec, CompressedNdarrayCodec, NdarrayCodec,
                                  ScalarCodec)
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql import types as T

    return Unischema("Everything", [
        UnischemaField("id", np.int32, (), ScalarCodec(T.IntegerType()), False),
        UnischemaField("big", np.int64, (), ScalarCodec(T.LongType()), False),
        UnischemaField("score", np.float64, (), ScalarCodec(T.DoubleType()), True),
        UnischemaField("flag", np.bool_, (), ScalarCodec(T.BooleanType()), False),
        UnischemaField("name", np.str_, (), ScalarCodec(T.StringType()), True),
        UnischemaField("png_rgb", np.uint8, (12, 16, 3), CompressedImageCodec("png"), False),
        UnischemaField("png_gray", np.uint8, (12, 16), CompressedImageCodec("png"), False),
        UnischemaField("jpg_rgb", np.uint8, (16, 24, 3), CompressedImageCodec("jpeg", 90), False),
        UnischemaField("jpg_gray", np.uint8, (16, 16), CompressedImageCodec("jpeg", 80), False),
        UnischemaField("mat", np.float32, (3, 4), NdarrayCodec(), False),
        UnischemaField("var", np.int64, (None,), NdarrayCodec(), False),
        UnischemaField("cloud", np.float32, (None, 3), CompressedNdarrayCodec(), False),
        UnischemaField("zmat", np.int16, (2, 5), CompressedNdarrayCodec(), False),
        UnischemaField("maybe", np.float64, (3,), CompressedNdarrayCodec(), True),
    ])


def _smooth_image(rng, shape):
    """A smooth image (JPEG-friendly) with some noise."""
    h, w = shape[:2]
    y, x = np.mgrid[0:h, 0:w]
    base = (x * 255 // max(w - 1, 1) + y * 255 // max(h - 1, 1)) // 2
    image = base[..., None] if len(shape) == 3 else base
    image = image + rng.integers(0, 40, shape)
    return np.clip(image, 0, 255).astype(np.uint8)


def everything_rows(n: int, seed: int = 0) -> List[Dict[str, Any]]:
    rows = []
    for i in range(n):
        rng = np.random.default_rng(seed * 100003 + i)
        rows.append({
            "id": np.int32(i),
            "big": np.int64(i * 10**10),
            "score": None if i % 5 == 3 else float(rng.normal()),
            "flag": bool(i % 2),
            "name": None if i % 7 == 4 else f"row-{i}",
            "png_rgb": rng.integers(0, 256, (12, 16, 3), dtype=np.uint8),
            "png_gray": rng.integers(0, 256, (12, 16), dtype=np.uint8),
            "jpg_rgb": _smooth_image(rng, (16, 24, 3)),
            "jpg_gray": _smooth_image(rng, (16, 16)),
            "mat": rng.normal(size=(3, 4)).astype(np.float32),
            "var": np.arange(i % 4, dtype=np.int64) * i,
            "cloud": rng.normal(size=(1 + i % 3, 3)).astype(np.float32),
            "zmat": rng.integers(-500, 500, (2, 5)).astype(np.int16),
            "maybe": None if i % 4 == 1 else rng.normal(size=3),
        })
    return rows
