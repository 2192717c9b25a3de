"""Types to tensors: every conversion checked against pyarrow's own, on files written by pyarrow,
DuckDB, Polars, pandas and Spark.

The suite is a table: ``_cases()`` lists one ``Case`` per (file written by a writer, column or
type set, batch size, list mode) and ``test_format`` is the one body that checks a row (``CHECKS``).
A new type is a column of ``pyarrow_table`` / ``DUCK_QUERY`` (or of ``new_types_table``); a new
writer or encoding is an entry of ``SOURCES`` with its rows. The other tests of the module check the
options that act on types (nulls, ``fill_null``, ``null_mask``, pads, features, partitions).
tests/unit/formats/test_conformance.py is the table of writers x format options (page versions,
encodings, codecs).

The reference is always what pyarrow reads back from the very file stoker reads
(``pq.read_table(path).column(c)`` and its ``to_numpy()`` / ``to_pylist()``), so a writer's type
mapping (DuckDB's TIMESTAMP_S is stored as microseconds, pyarrow's date64 comes back as date32)
is part of the reference, not something the test has to know. Batches are compared byte for byte
after checking dtype and shape. Fixtures have several row groups and batch sizes that do not divide
them, so batches cross row groups (and files).
"""

from __future__ import annotations

import datetime
import decimal
import json
import os
import re
import uuid
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Callable, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import (InvalidOptionError, LossyCastError, NullValueError,
                           UnsupportedTypeError)

N = 300  # pyarrow fixtures: row groups of 64 -> 4 x 64 + 44
PA_ROW_GROUP = 64
PA_BATCHES = (1, 50, 1000)  # one row, crossing row groups, one short batch holding everything
DUCK_N = 5000  # DuckDB rounds row groups up to 2048 rows -> 2048 + 2048 + 904
DUCK_BATCHES = (333, 6000)


# ------------------------------------------------------------------------------ reference side

TEMPORAL = (pa.types.is_timestamp, pa.types.is_date, pa.types.is_time, pa.types.is_duration)


def is_temporal(t: pa.DataType) -> bool:
    return any(check(t) for check in TEMPORAL)


def temporal_to_int64(col: pa.ChunkedArray) -> np.ndarray:
    """pyarrow's integer view of a temporal column (its storage), widened to int64."""
    bits = col.type.bit_width
    storage = col.cast(pa.int32() if bits == 32 else pa.int64())
    return storage.to_numpy().astype(np.int64)


def expected_dense(col: pa.ChunkedArray) -> np.ndarray:
    """What stoker must deliver for a dense column: pyarrow's numpy conversion, [rows, ...]."""
    t = col.type
    if isinstance(t, pa.FixedShapeTensorType):
        if pa.types.is_boolean(t.value_type):  # pyarrow has no bool tensors: unpack the storage
            flat = col.combine_chunks().storage.flatten().to_numpy(zero_copy_only=False)
            return flat.reshape(len(col), *t.shape)
        return col.combine_chunks().to_numpy_ndarray()
    if pa.types.is_fixed_size_list(t):
        arr = col.combine_chunks()
        shape = []
        while pa.types.is_fixed_size_list(arr.type):
            shape.append(arr.type.list_size)
            arr = arr.flatten()
        return arr.to_numpy(zero_copy_only=False).reshape(len(col), *shape)
    if is_temporal(t):
        return temporal_to_int64(col)
    storage = getattr(t, "storage_type", t)  # arrow.uuid and other extensions
    if pa.types.is_fixed_size_binary(storage):  # raw bytes, [rows, byte_width] uint8
        rows = [v.bytes if hasattr(v, "bytes") else v for v in col.to_pylist()]
        return np.frombuffer(b"".join(rows), np.uint8).reshape(len(col), storage.byte_width)
    if pa.types.is_dictionary(t):
        return col.cast(t.value_type).to_numpy()
    return col.to_numpy()


def assert_same_array(got: Any, want: np.ndarray, what: str = "") -> None:
    """dtype, shape, then every byte (so -0.0, NaN payloads and bool bytes count)."""
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_array_equal(got, want, err_msg=what)
    np.testing.assert_array_equal(np.ascontiguousarray(got).view(np.uint8),
                                  np.ascontiguousarray(want).view(np.uint8), err_msg=what)


def reference(path: str, column: str) -> pa.ChunkedArray:
    return pq.read_table(path, columns=[column]).column(column)


def value_dtype(t: pa.DataType) -> np.dtype:
    if pa.types.is_dictionary(t):
        t = t.value_type
    return np.dtype(t.to_pandas_dtype())


def check_column(batches: List[Dict[str, Any]], name: str, col: pa.ChunkedArray, mode: str,
                 pad_value: float = 0) -> None:
    """Compares one column of a whole epoch (shuffle=False) with pyarrow's conversion."""
    assert sum(len(b[name]) for b in batches) == len(col)
    t = col.type
    if mode == "dense":
        got = np.concatenate([np.asarray(b[name]) for b in batches])
        assert_same_array(got, expected_dense(col), name)
        return
    if pa.types.is_dictionary(t):
        t = t.value_type
    rows = col.to_pylist()
    start = 0
    for i, batch in enumerate(batches):
        value = batch[name]
        count = len(value)
        want_rows = rows[start:start + count]
        if mode == "strings":
            assert isinstance(value, stoker.Ragged)
            assert value.kind == ("binary" if pa.types.is_binary(t) or
                                  pa.types.is_large_binary(t) else "utf8")
            assert value.tolist() == want_rows, f"{name} batch {i}"
            raw = [r.encode() if isinstance(r, str) else r for r in want_rows]
            assert_same_array(value.values, np.frombuffer(b"".join(raw), np.uint8), name)
            lengths = [len(r) for r in raw]
            assert_same_array(value.offsets, np.concatenate([[0], np.cumsum(lengths)])
                              .astype(np.int64), name)
        elif mode == "ragged":
            assert isinstance(value, stoker.Ragged) and value.kind == "list"
            dtype = value_dtype(t.value_type)
            flat = [v for r in want_rows for v in r]
            assert_same_array(value.values, np.array(flat, dtype=dtype), name)
            assert_same_array(value.offsets, np.concatenate(
                [[0], np.cumsum([len(r) for r in want_rows])]).astype(np.int64), name)
            assert value.tolist() == want_rows
        else:  # padded
            dtype = value_dtype(t.value_type)
            longest = max((len(r) for r in want_rows), default=0)
            want = np.full((count, longest), pad_value, dtype=dtype)
            for r, row in enumerate(want_rows):
                want[r, :len(row)] = np.array(row, dtype=dtype)
            assert_same_array(value, want, f"{name} batch {i}")
            assert_same_array(batch[name + "_lengths"],
                              np.array([len(r) for r in want_rows], np.int64), name)
        start += count
    assert start == len(col)


def mode_of(t: pa.DataType, lists: str) -> str:
    if pa.types.is_dictionary(t):
        t = t.value_type
    if (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or
            pa.types.is_large_binary(t)):
        return "strings"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return lists
    return "dense"


# ------------------------------------------------------------------------------ fixtures: data

def float_values(n: int, dtype) -> np.ndarray:
    info = np.finfo(dtype)
    special = np.array([0.0, -0.0, np.nan, np.inf, -np.inf, info.max, info.min, info.tiny,
                        info.smallest_subnormal, 1.0 / 3.0], dtype=dtype)
    rng = np.random.default_rng(7)
    rest = rng.standard_normal(max(n - len(special), 0)).astype(dtype)
    return np.concatenate([special, rest])[:n]


def int_values(n: int, dtype) -> np.ndarray:
    info = np.iinfo(dtype)
    span = int(info.max) - int(info.min) + 1
    # Both extremes first, then a walk that wraps around the whole range.
    walk = [int(info.min) + (i * 2654435761) % span for i in range(n - 2)]
    return np.array([info.min, info.max] + walk, dtype=dtype)[:n]


def pyarrow_table(n: int = N) -> pa.Table:
    """One column per type stoker converts, with edge values, no nulls."""
    rng = np.random.default_rng(1)
    cols: Dict[str, pa.Array] = {}
    for name in ("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"):
        cols[name] = pa.array(int_values(n, np.dtype(name)))
    for name in ("float16", "float32", "float64"):
        cols[name] = pa.array(float_values(n, np.dtype(name)))
    cols["bool"] = pa.array(rng.random(n) < 0.3)
    cols["fsl_f32"] = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.standard_normal(n * 3).astype(np.float32)), 3)
    cols["fsl_u8"] = pa.FixedSizeListArray.from_arrays(
        pa.array(rng.integers(0, 256, n * 5).astype(np.uint8)), 5)
    cols["fsl_nested_i16"] = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 6, dtype=np.int16)), 3), 2)
    cols["fsl_bool"] = pa.FixedSizeListArray.from_arrays(pa.array(rng.random(n * 5) < 0.5), 5)
    cols["fsl_nested_bool"] = pa.FixedSizeListArray.from_arrays(
        pa.FixedSizeListArray.from_arrays(pa.array(np.arange(n * 6) % 3 == 0), 3), 2)
    cols["tensor_f32"] = pa.FixedShapeTensorArray.from_numpy_ndarray(
        rng.standard_normal((n, 2, 3)).astype(np.float32))
    cols["tensor_bool"] = pa.FixedShapeTensorArray.from_numpy_ndarray(
        (np.arange(n * 6) % 7 < 3).reshape(n, 3, 2))
    cols["tensor_i64_3d"] = pa.FixedShapeTensorArray.from_numpy_ndarray(
        np.arange(n * 8, dtype=np.int64).reshape(n, 2, 2, 2))
    lengths = [(i * 7) % 6 for i in range(n)]  # includes empty lists
    cols["list_i32"] = pa.array([list(range(i, i + k)) for i, k in enumerate(lengths)],
                                pa.list_(pa.int32()))
    cols["list_f16"] = pa.array([np.full(k, i / 4, np.float16) for i, k in enumerate(lengths)],
                                pa.list_(pa.float16()))
    cols["large_list_f64"] = pa.array([[i * 0.5] * k for i, k in enumerate(lengths)],
                                      pa.large_list(pa.float64()))
    cols["list_bool"] = pa.array([[(i + j) % 3 == 0 for j in range(k)]
                                  for i, k in enumerate(lengths)], pa.list_(pa.bool_()))
    cols["list_u64"] = pa.array([[2**64 - 1 - i] * (k % 3) for i, k in enumerate(lengths)],
                                pa.list_(pa.uint64()))
    texts = ["", "a", "héllo wörld", "日本語", "x" * 100, "tab\tnew\nline", "\x00nul"]
    cols["string"] = pa.array([texts[i % len(texts)] + str(i) * (i % 3) for i in range(n)])
    cols["large_string"] = pa.array([texts[(i + 3) % len(texts)] for i in range(n)],
                                    pa.large_string())
    cols["binary"] = pa.array([bytes(range(i % 9)) + b"\x00\xff" * (i % 2) for i in range(n)],
                              pa.binary())
    cols["large_binary"] = pa.array([b"" if i % 5 == 0 else bytes([i % 256]) * 3
                                     for i in range(n)], pa.large_binary())
    base = np.arange(n, dtype=np.int64) * 1_000_003 - 50_000_000
    for unit in ("s", "ms", "us", "ns"):
        cols[f"ts_{unit}"] = pa.array(base, pa.timestamp(unit))
    cols["ts_ms_utc"] = pa.array(base, pa.timestamp("ms", tz="UTC"))
    cols["ts_us_tokyo"] = pa.array(base, pa.timestamp("us", tz="Asia/Tokyo"))
    cols["date32"] = pa.array((base // 1000).astype(np.int32), pa.date32())
    cols["date64"] = pa.array((base // 1000) * 86_400_000, pa.date64())
    for unit in ("s", "ms", "us", "ns"):
        cols[f"duration_{unit}"] = pa.array(base, pa.duration(unit))
    cols["time32_s"] = pa.array((np.arange(n) * 251 % 86400).astype(np.int32), pa.time32("s"))
    cols["time32_ms"] = pa.array((np.arange(n) * 250_001 % 86_400_000).astype(np.int32),
                                 pa.time32("ms"))
    cols["time64_us"] = pa.array(np.arange(n) * 250_000_001 % 86_400_000_000, pa.time64("us"))
    cols["time64_ns"] = pa.array(np.arange(n) * 250_000_000_001 % 86_400_000_000_000,
                                 pa.time64("ns"))
    cols["fixed_binary16"] = pa.array([bytes([i % 256, 255 - i % 256]) * 8 for i in range(n)],
                                      pa.binary(16))
    cols["uuid"] = pa.array([uuid.UUID(int=i * 0x9E3779B97F4A7C15).bytes for i in range(n)],
                            pa.uuid())
    words = ["red", "green", "blue", "", "ünïcode"]
    cols["dict_string"] = pa.array([words[i % 5] for i in range(n)]).dictionary_encode()
    cols["dict_binary"] = pa.array([bytes([i % 4]) * (i % 4) for i in range(n)],
                                   pa.binary()).dictionary_encode()
    cols["dict_int64"] = pa.array([(i % 4) * 1000 for i in range(n)]).dictionary_encode()
    cols["dict_float32"] = pa.array(np.float32([0.5, -1.25, 3])[np.arange(n) % 3]
                                    ).dictionary_encode()
    return pa.table(cols)


@pytest.fixture(scope="module")
def pyarrow_file(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("types") / "pyarrow.parquet")
    pq.write_table(pyarrow_table(), path, row_group_size=PA_ROW_GROUP)
    assert pq.ParquetFile(path).metadata.num_row_groups == 5
    return path


DUCK_SETUP = ("CREATE TYPE mood AS ENUM ('sad', 'ok', 'happy', 'ünïcode')",)
DUCK_QUERY = """
SELECT
  (i % 256 - 128)::TINYINT AS int8, (i * 13 % 65536 - 32768)::SMALLINT AS int16,
  ((i * 1000003) % 4294967296 - 2147483648)::INTEGER AS int32,
  (i * 1000000000007 - 9000000000000000000)::BIGINT AS int64,
  (i % 256)::UTINYINT AS uint8, (i * 13 % 65536)::USMALLINT AS uint16,
  (i * 1000003 % 4294967296)::UINTEGER AS uint32, (18446744073709551615 - i)::UBIGINT AS uint64,
  (i / 7.0)::FLOAT AS float32, (i / 7.0 - 300)::DOUBLE AS float64,
  CASE WHEN i % 11 = 0 THEN 'NaN'::DOUBLE WHEN i % 13 = 0 THEN '-inf'::DOUBLE
       ELSE (i * 1.5)::DOUBLE END AS float64_special,
  i % 3 = 0 AS bool,
  'row ' || i || repeat('é', i % 4) AS string,
  ('\\x' || lpad(to_hex(i % 256), 2, '0'))::BLOB || repeat('z', i % 3)::BLOB AS binary,
  TIMESTAMP '2001-02-03 04:05:06' + INTERVAL (i * 977) SECOND AS ts_us,
  (TIMESTAMP '2001-02-03 04:05:06' + INTERVAL (i * 977) SECOND)::TIMESTAMP_MS AS ts_ms,
  (TIMESTAMP '2001-02-03 04:05:06' + INTERVAL (i * 977) SECOND)::TIMESTAMP_S AS ts_s,
  (TIMESTAMP '2001-02-03 04:05:06' + INTERVAL (i * 977) SECOND)::TIMESTAMP_NS AS ts_ns,
  (TIMESTAMP '2001-02-03 04:05:06' + INTERVAL (i * 977) SECOND)::TIMESTAMPTZ AS ts_tz,
  DATE '1960-01-01' + (i * 3)::INTEGER AS date,
  TIME '00:00:00' + INTERVAL (i * 17) SECOND AS time,
  [i::INTEGER, (i * 2)::INTEGER, i::INTEGER][1:i % 4] AS list_i32,
  [(i * 0.25)::DOUBLE, NULL::DOUBLE][1:(i % 2)] AS list_f64,
  [(i % 5)::SMALLINT, 1, 2, 3]::SMALLINT[4] AS array_i16,
  [i % 2 = 0, i % 3 = 0, i % 5 = 0][1:i % 4] AS list_bool,
  ('00000000-0000-4000-8000-' || lpad(to_hex(i * 7919), 12, '0'))::UUID AS uuid,
  INTERVAL (i) DAY + INTERVAL (i % 13) MONTH + INTERVAL (i * 1001) MILLISECOND AS interval,
  (['sad', 'ok', 'happy', 'ünïcode'])[i % 4 + 1]::mood AS enum
FROM range(5000) t(i)
"""


@pytest.fixture(scope="module")
def duckdb_file(tmp_path_factory) -> str:
    duckdb = pytest.importorskip("duckdb")
    path = str(tmp_path_factory.mktemp("types") / "duckdb.parquet")
    con = duckdb.connect()
    for statement in DUCK_SETUP:
        con.execute(statement)
    con.execute(f"COPY ({DUCK_QUERY}) TO '{path}' (FORMAT PARQUET, ROW_GROUP_SIZE 2048)")
    con.close()
    assert pq.ParquetFile(path).metadata.num_row_groups == 3
    return path


PA_COLUMNS = pyarrow_table(16).column_names
DUCK_COLUMNS = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
                "float32", "float64", "float64_special", "bool", "string", "binary", "ts_us",
                "ts_ms", "ts_s", "ts_ns", "ts_tz", "date", "time", "list_i32", "array_i16",
                "list_bool", "uuid", "interval", "enum"]


def load(path: str, columns, batch_size: int, **kwargs) -> List[Dict[str, Any]]:
    with stoker.Loader(path, columns=columns, batch_size=batch_size, shuffle=False,
                       drop_last=False, num_threads=2, **kwargs) as loader:
        info = loader.columns
        batches = list(loader)
    for batch in batches:
        batch["__info__"] = info
    return batches


def check_file_column(path: str, column: str, batch_size: int, lists: str = "padded") -> None:
    col = reference(path, column)
    batches = load(path, [column], batch_size, lists=lists)
    expected_batches = -(-len(col) // batch_size)
    assert len(batches) == expected_batches
    for batch in batches[:-1]:
        assert len(batch[column]) == batch_size
    check_column(batches, column, col, mode_of(col.type, lists))
    info = batches[0]["__info__"][column]
    t = col.type
    if is_temporal(t):
        # The unit travels in the annotation; the values are int64 in that unit.
        assert info.annotation == str(t)
        assert info.dtype == "int64"


# ------------------------------------------------------------------------------ the table
#
# One row per (writer, type, read) case; test_format at the end of the module is the one body
# that checks a row:
#
# - a column of a plain-types file (pyarrow, pyarrow's other encodings and page versions, DuckDB,
#   DuckDB's V2 pages with zstd): check_file_column, every value against pyarrow's read of the
#   same file, at batch sizes that cross row groups, padded or ragged lists;
# - the types issue 14 added (timestamps naive and zoned, dates, decimals, categoricals as ids,
#   struct leaves) over pyarrow 1.0 / 2.6, DuckDB, Polars, pandas and Spark (section "new types"
#   below): check_new_types.

PA_WRITER_OPTIONS = {
    "v2_pages_zstd_plain": dict(data_page_version="2.0", compression="zstd",
                                use_dictionary=False, write_statistics=False),
    "byte_stream_split_tiny_pages": dict(
        use_byte_stream_split=["float16", "float32", "float64", "int32", "int64", "uint32"],
        data_page_size=512, compression="snappy"),
}


def write_pyarrow_variant(options: str, folder) -> str:
    """The same table with other encodings, page versions and codecs."""
    path = str(folder / f"{options}.parquet")
    pq.write_table(pyarrow_table(), path, row_group_size=PA_ROW_GROUP,
                   **PA_WRITER_OPTIONS[options])
    return path


def write_duckdb_v2(folder) -> str:
    duckdb = pytest.importorskip("duckdb")
    path = str(folder / "duckdb_v2.parquet")
    con = duckdb.connect()
    for statement in DUCK_SETUP:
        con.execute(statement)
    con.execute(f"COPY ({DUCK_QUERY}) TO '{path}' (FORMAT PARQUET, ROW_GROUP_SIZE 2048, "
                "COMPRESSION zstd, PARQUET_VERSION V2)")
    con.close()
    return path


@dataclass(frozen=True)
class Case:
    """One row: the file (``source``), what is read from it and how it is checked (``check``)."""

    source: str  # a key of SOURCES
    column: str  # a column, or "*": every column of the new-types table
    batch_size: int
    lists: str = "padded"
    check: str = "column"  # a key of CHECKS

    def id(self) -> str:
        if self.check == "new_types":
            return f"new-types-{self.source.split(':', 1)[1]}"
        lists = "-ragged" if self.lists == "ragged" else ""
        return f"{self.source}-{self.column}-{self.batch_size}{lists}"


def _new_types_source(writer: str) -> Callable[[Any, Any], str]:
    def make(request, folder) -> str:
        path = str(folder / f"{writer}.parquet")
        NEW_TYPES_WRITERS[writer](new_types_table(), path)
        return path
    return make


# source -> make(request, folder): the file a row reads (made once per module, on first use).
SOURCES: Dict[str, Callable[[Any, Any], str]] = {
    "pyarrow": lambda request, folder: request.getfixturevalue("pyarrow_file"),
    "duckdb": lambda request, folder: request.getfixturevalue("duckdb_file"),
    "duckdb-v2-zstd": lambda request, folder: write_duckdb_v2(folder),
}
for _options in sorted(PA_WRITER_OPTIONS):
    SOURCES[f"pyarrow-{_options}"] = (
        lambda request, folder, _o=_options: write_pyarrow_variant(_o, folder))


@pytest.fixture(scope="module")
def format_files(request, tmp_path_factory) -> Callable[[str], str]:
    """source -> the path of its file, written on first use and kept for the module."""
    made: Dict[str, str] = {}

    def path(source: str) -> str:
        if source not in made:
            made[source] = SOURCES[source](request, tmp_path_factory.mktemp("formats"))
        return made[source]

    return path


def check_column_or_pyarrows_error(path: str, case: Case) -> None:
    """DuckDB's V2 files use DELTA_BINARY_PACKED; Arrow 25 cannot decode it for int32/uint32
    columns whose deltas span the whole range ("InitBlock EOF"). Where pyarrow itself fails,
    stoker must fail cleanly too: a CorruptFileError naming column, file and row group."""
    column = case.column
    file = pq.ParquetFile(path)
    for row_group in range(file.metadata.num_row_groups):
        try:
            file.read_row_group(row_group, columns=[column])
        except OSError as error:
            arrow_error, bad_group = error, row_group
            break
    else:
        check_file_column(path, column, case.batch_size, case.lists)
        return
    with pytest.raises(stoker.errors.CorruptFileError) as err:
        load(path, [column], case.batch_size)
    message = str(err.value)
    assert f"'{column}'" in message and path in message
    assert re.search(rf"row group {bad_group}\b", message) and str(arrow_error) in message
    assert column in ("int32", "uint32")  # the known case; anything else is news


CHECKS: Dict[str, Callable[[str, Case], None]] = {
    "column": lambda path, case: check_file_column(path, case.column, case.batch_size,
                                                   case.lists),
    "column_or_pyarrows_error": check_column_or_pyarrows_error,
    "new_types": lambda path, case: check_new_types(path, case.source.split(":", 1)[1]),
}


def _cases() -> List[Case]:
    cases = [Case("pyarrow", c, b) for c in PA_COLUMNS for b in PA_BATCHES]
    cases += [Case("duckdb", c, b) for c in DUCK_COLUMNS for b in DUCK_BATCHES]
    cases += [Case(f"pyarrow-{o}", c, 50) for o in sorted(PA_WRITER_OPTIONS) for c in PA_COLUMNS]
    cases += [Case("duckdb-v2-zstd", c, 777, check="column_or_pyarrows_error")
              for c in DUCK_COLUMNS]
    cases += [Case("pyarrow", c, 50, lists="ragged")
              for c in ["list_i32", "list_f16", "large_list_f64", "list_u64", "list_bool"]]
    cases += [Case("duckdb", c, 333, lists="ragged")
              for c in ["list_i32", "array_i16", "list_bool"]]
    cases += [Case(f"new-types:{w}", "*", NEW_TYPES_BATCH, check="new_types")
              for w in sorted(NEW_TYPES_WRITERS)]
    return cases


def _param(case: Case):
    marks = []
    if case.source == "new-types:spark":
        reason = _spark_reason()
        marks = [pytest.mark.slow, pytest.mark.skipif(bool(reason), reason=reason or "ok")]
    return pytest.param(case, id=case.id(), marks=marks)


def test_every_column_at_once(pyarrow_file):
    """All columns in one loader: each slot of the batch lines up with its own column."""
    table = pq.read_table(pyarrow_file)
    batches = load(pyarrow_file, None, 97, lists="padded")
    for name in table.column_names:
        check_column(batches, name, table.column(name), mode_of(table.column(name).type,
                                                                "padded"))


def test_column_metadata(pyarrow_file):
    with stoker.Loader(pyarrow_file, shuffle=False, lists="padded", batch_size=8) as loader:
        info = loader.columns
    assert info["int16"].dtype == "int16" and info["int16"].kind == stoker._stoker.ColumnKind.dense
    assert info["float16"].dtype == "float16"
    assert list(info["fsl_nested_i16"].inner_shape) == [2, 3]
    assert list(info["tensor_f32"].inner_shape) == [2, 3]
    assert info["tensor_f32"].annotation == "arrow.fixed_shape_tensor"
    assert info["string"].annotation == "utf8" and info["binary"].annotation == "binary"
    assert info["dict_string"].annotation == "utf8"
    assert info["dict_int64"].dtype == "int64"
    assert info["list_i32"].kind == stoker._stoker.ColumnKind.padded
    assert info["ts_us_tokyo"].annotation == "timestamp[us, tz=Asia/Tokyo]"
    assert info["ts_ms_utc"].annotation == "timestamp[ms, tz=UTC]"
    # Parquet has no second-resolution time32: pyarrow stores and reads back milliseconds.
    assert info["time32_s"].annotation == str(reference(pyarrow_file, "time32_s").type)
    assert info["time32_s"].annotation == "time32[ms]"
    assert info["date32"].annotation == "date32[day]"
    assert info["duration_ns"].annotation == "duration[ns]"


def test_several_files_in_order(write_parquet, tmp_path):
    """Batches cross file boundaries too; shuffle=False keeps file then row order."""
    table = pyarrow_table(N)
    parts = [(0, 70, 16), (70, 181, 50), (181, N, 33)]
    for k, (begin, end, row_group) in enumerate(parts):
        write_parquet(table.slice(begin, end - begin), name=f"ds/part-{k}.parquet",
                      row_group_size=row_group)
    root = str(tmp_path / "ds")
    columns = ["int64", "float16", "fsl_f32", "tensor_f32", "string", "list_i32", "ts_ns",
               "dict_string"]
    batches = load(root, columns, 23, lists="padded")
    for name in columns:
        # What pyarrow reads back from each file is the reference, in file order.
        col = pa.chunked_array([reference(os.path.join(root, f"part-{k}.parquet"), name)
                                .combine_chunks() for k in range(3)])
        check_column(batches, name, col, mode_of(col.type, "padded"))


# ------------------------------------------------------------------------------ lists

def test_list_without_mode_names_column_and_both_options(pyarrow_file):
    for column in ("list_i32", "large_list_f64"):
        with pytest.raises(UnsupportedTypeError) as err:
            stoker.Loader(pyarrow_file, columns=["int8", column], shuffle=False)
        message = str(err.value)
        assert f"'{column}'" in message and "padded" in message and "ragged" in message


def test_duckdb_list_without_mode(duckdb_file):
    with pytest.raises(UnsupportedTypeError, match="'list_i32'.*padded.*ragged"):
        stoker.Loader(duckdb_file, columns=["list_i32"], shuffle=False)


@pytest.mark.parametrize("column,pad", [("list_i32", -7), ("list_f16", 0.5),
                                        ("large_list_f64", float("nan")), ("list_u64", 3),
                                        ("list_bool", 1)])
def test_pad_value_honoured(pyarrow_file, column, pad):
    col = reference(pyarrow_file, column)
    batches = load(pyarrow_file, [column], 50, lists={column: "padded"}, pad_value=pad)
    check_column(batches, column, col, "padded", pad_value=pad)
    # Some batch really is padded (not every row has the longest length).
    assert any((np.asarray(b[column + "_lengths"]) < np.asarray(b[column]).shape[1]).any()
               for b in batches)


def test_lists_per_column_modes(pyarrow_file):
    batches = load(pyarrow_file, ["list_i32", "large_list_f64", "int32"], 41,
                   lists={"list_i32": "ragged", "large_list_f64": "padded"})
    check_column(batches, "list_i32", reference(pyarrow_file, "list_i32"), "ragged")
    check_column(batches, "large_list_f64", reference(pyarrow_file, "large_list_f64"), "padded")
    check_column(batches, "int32", reference(pyarrow_file, "int32"), "dense")
    assert "list_i32_lengths" not in batches[0]


def test_pad_value_not_representable(pyarrow_file):
    with pytest.raises(InvalidOptionError, match="pad_value.*'list_i32'.*int32"):
        stoker.Loader(pyarrow_file, columns=["list_i32"], lists="padded", pad_value=0.5,
                      shuffle=False)
    with pytest.raises(InvalidOptionError, match="pad_value.*'list_bool'.*bool"):
        stoker.Loader(pyarrow_file, columns=["list_bool"], lists="padded", pad_value=2,
                      shuffle=False)


def test_list_of_strings_ragged_only(write_parquet):
    # Ragged: nested offsets (tests/unit/formats/test_nested.py); padded pads one level of numbers
    # only.
    path = write_parquet({"tags": pa.array([["a"], ["b", "c"]])})
    with stoker.Loader(path, columns=["tags"], lists="ragged", shuffle=False,
                       batch_size=2) as loader:
        assert next(iter(loader))["tags"].tolist() == [["a"], ["b", "c"]]
    with pytest.raises(UnsupportedTypeError, match="'tags'.*lists=\\{'tags': 'ragged'\\}"):
        stoker.Loader(path, columns=["tags"], lists="padded", shuffle=False, batch_size=2)


# ------------------------------------------------------------------------------ tensors

def test_fixed_shape_tensor_with_permutation_is_refused(write_parquet):
    storage = pa.FixedSizeListArray.from_arrays(pa.array(np.arange(12, dtype=np.float32)), 6)
    tensor_type = pa.fixed_shape_tensor(pa.float32(), [2, 3], permutation=[1, 0])
    path = write_parquet({"t": pa.ExtensionArray.from_storage(tensor_type, storage)})
    with pytest.raises(UnsupportedTypeError, match="'t'.*permutation"):
        stoker.Loader(path, columns=["t"], shuffle=False)


def test_fixed_shape_tensor_with_dim_names(write_parquet):
    data = np.arange(40 * 6, dtype=np.uint16).reshape(40, 3, 2)
    tensor_type = pa.fixed_shape_tensor(pa.uint16(), [3, 2], dim_names=["H", "W"])
    storage = pa.FixedSizeListArray.from_arrays(pa.array(data.ravel()), 6)
    path = write_parquet({"t": pa.ExtensionArray.from_storage(tensor_type, storage)},
                         row_group_size=16)
    batches = load(path, ["t"], 15)
    check_column(batches, "t", reference(path, "t"), "dense")
    assert_same_array(np.concatenate([b["t"] for b in batches]), data, "t")


# ------------------------------------------------------------------------------ dictionaries

def test_dictionary_chunks_with_different_dictionaries(write_parquet):
    """Each row group carries its own dictionary; the high-cardinality one falls back to plain
    pages mid-column."""
    n = 1000
    words = pa.array([f"w{(i * 37) % (5 + i // 200)}" for i in range(n)]).dictionary_encode()
    unique = pa.array([f"u{i}" * 3 for i in range(n)]).dictionary_encode()
    path = write_parquet({"words": words, "unique": unique}, row_group_size=300,
                         dictionary_pagesize_limit=256)
    for name in ("words", "unique"):
        col = reference(path, name)
        assert pa.types.is_dictionary(col.type)
        check_column(load(path, [name], 128), name, col, "strings")


def test_pandas_style_categoricals(write_parquet):
    """What pyarrow writes for pandas categoricals: int8 codes, and the pandas schema metadata."""
    n = 200
    codes = pa.array((np.arange(n) * 5 % 3).astype(np.int8))
    strings = pa.DictionaryArray.from_arrays(codes, pa.array(["low", "mid", "high"]))
    numbers = pa.DictionaryArray.from_arrays(codes, pa.array([10, 20, 30], pa.int64()))
    pandas_meta = {"index_columns": [], "column_indexes": [], "columns": [
        {"name": name, "field_name": name, "pandas_type": "categorical", "numpy_type": "int8",
         "metadata": {"num_categories": 3, "ordered": False}} for name in ("s", "i")],
        "creator": {"library": "pyarrow", "version": pa.__version__},
        "pandas_version": "2.2.3"}
    table = pa.table({"s": strings, "i": numbers}).replace_schema_metadata(
        {b"pandas": json.dumps(pandas_meta).encode()})
    path = write_parquet(table, row_group_size=64)
    batches = load(path, ["s", "i"], 50)
    check_column(batches, "s", reference(path, "s"), "strings")
    check_column(batches, "i", reference(path, "i"), "dense")
    assert np.concatenate([b["i"] for b in batches]).dtype == np.int64


def test_real_pandas_categoricals(write_parquet):
    pd = pytest.importorskip("pandas")
    df = pd.DataFrame({"c": pd.Categorical(["x", "y", "x", "z"] * 30),
                       "n": pd.Categorical([1.5, 2.5, 1.5] * 40)})
    path = write_parquet(pa.Table.from_pandas(df, preserve_index=False), row_group_size=50)
    batches = load(path, ["c", "n"], 33)
    check_column(batches, "c", reference(path, "c"), "strings")
    check_column(batches, "n", reference(path, "n"), "dense")


# ------------------------------------------------------------------------------ nulls

def null_table(n: int = N) -> pa.Table:
    """Nulls only from row group 2 on (rows 128+), so errors must name row group 2."""
    def nulls_at(i):
        return i >= 2 * PA_ROW_GROUP and i % 5 == 1
    cols = {}
    for name in ("int8", "int64", "uint16", "float16", "float32", "float64"):
        cols[name] = pa.array([None if nulls_at(i) else (i % 100) for i in range(n)],
                              pa.from_numpy_dtype(np.dtype(name)))
    cols["bool"] = pa.array([None if nulls_at(i) else i % 2 == 0 for i in range(n)])
    cols["ts_ms"] = pa.array([None if nulls_at(i) else i * 1000 for i in range(n)],
                             pa.timestamp("ms"))
    cols["date32"] = pa.array([None if nulls_at(i) else i for i in range(n)], pa.date32())
    cols["string"] = pa.array([None if nulls_at(i) else f"s{i}" for i in range(n)])
    cols["binary"] = pa.array([None if nulls_at(i) else bytes([i % 256]) for i in range(n)])
    cols["list_i32"] = pa.array([None if nulls_at(i) else [i] * (i % 3) for i in range(n)],
                                pa.list_(pa.int32()))
    cols["dict_string"] = pa.array([None if nulls_at(i) else f"d{i % 3}" for i in range(n)]
                                   ).dictionary_encode()
    return pa.table(cols)


NULL_NUMERIC = ["int8", "int64", "uint16", "float16", "float32", "float64", "bool", "ts_ms",
                "date32"]
NULL_VARIABLE = ["string", "binary", "list_i32", "dict_string"]


@pytest.fixture(scope="module")
def null_file(tmp_path_factory) -> str:
    path = str(tmp_path_factory.mktemp("nulls") / "nulls.parquet")
    pq.write_table(null_table(), path, row_group_size=PA_ROW_GROUP)
    return path


@pytest.fixture(scope="module")
def duckdb_null_file(tmp_path_factory) -> str:
    duckdb = pytest.importorskip("duckdb")
    path = str(tmp_path_factory.mktemp("nulls") / "duck_nulls.parquet")
    con = duckdb.connect()
    con.execute(f"""COPY (SELECT
        CASE WHEN i >= 2048 AND i % 5 = 1 THEN NULL ELSE i END::BIGINT AS int64,
        CASE WHEN i >= 2048 AND i % 5 = 1 THEN NULL ELSE i / 4 END::DOUBLE AS float64,
        CASE WHEN i >= 2048 AND i % 5 = 1 THEN NULL ELSE i % 2 = 0 END AS bool,
        CASE WHEN i >= 2048 AND i % 5 = 1 THEN NULL ELSE 'v' || i END AS string,
        CASE WHEN i >= 2048 AND i % 5 = 1 THEN NULL ELSE DATE '2000-01-01' + i::INTEGER END
          AS date
        FROM range({DUCK_N}) t(i)) TO '{path}' (FORMAT PARQUET, ROW_GROUP_SIZE 2048)""")
    con.close()
    return path


@pytest.mark.parametrize("column", NULL_NUMERIC + NULL_VARIABLE)
def test_nulls_raise_naming_column_and_row_group(null_file, column):
    with pytest.raises(NullValueError) as err:
        load(null_file, [column], 50, lists="padded")
    message = str(err.value)
    assert f"'{column}'" in message
    assert null_file in message and "row group 2" in message
    assert "null_mask" in message


@pytest.mark.parametrize("column", ["int64", "float64", "bool", "string", "date"])
def test_duckdb_nulls_raise(duckdb_null_file, column):
    with pytest.raises(NullValueError, match=f"'{column}'.*row group 1"):
        load(duckdb_null_file, [column], 1000)


def fill_value_for(t: pa.DataType):
    if pa.types.is_boolean(t):
        return True
    if pa.types.is_floating(t):
        return -1.5
    return 42 if pa.types.is_unsigned_integer(t) else -42


@pytest.mark.parametrize("column", NULL_NUMERIC)
def test_fill_null(null_file, column):
    col = reference(null_file, column)
    value = fill_value_for(col.type)
    batches = load(null_file, [column], 50, fill_null={column: float(value)})
    if is_temporal(col.type):
        storage = pa.int32() if col.type.bit_width == 32 else pa.int64()
        want = pc.fill_null(col.cast(storage), value).to_numpy().astype(np.int64)
    else:
        want = pc.fill_null(col, pa.scalar(value, col.type)).to_numpy()
    got = np.concatenate([b[column] for b in batches])
    assert_same_array(got, want, column)
    assert column + "_mask" not in batches[0]


@pytest.mark.parametrize("column", ["int64", "float64", "bool", "date"])
def test_duckdb_fill_null(duckdb_null_file, column):
    col = reference(duckdb_null_file, column)
    value = fill_value_for(col.type)
    batches = load(duckdb_null_file, [column], 1000, fill_null=float(value))
    if is_temporal(col.type):
        want = pc.fill_null(col.cast(pa.int32()), value).to_numpy().astype(np.int64)
    else:
        want = pc.fill_null(col, pa.scalar(value, col.type)).to_numpy()
    assert_same_array(np.concatenate([b[column] for b in batches]), want, column)


@pytest.mark.parametrize("column", NULL_NUMERIC)
def test_null_mask_numeric(null_file, column):
    col = reference(null_file, column)
    batches = load(null_file, [column], 50, null_mask=[column])
    mask = np.concatenate([b[column + "_mask"] for b in batches])
    assert_same_array(mask, col.is_valid().to_numpy(zero_copy_only=False), column)
    assert not mask.all()
    got = np.concatenate([b[column] for b in batches])
    if is_temporal(col.type):
        storage = pa.int32() if col.type.bit_width == 32 else pa.int64()
        want = pc.fill_null(col.cast(storage), 0).to_numpy().astype(np.int64)
    else:
        zero = False if pa.types.is_boolean(col.type) else 0
        want = pc.fill_null(col, pa.scalar(zero, col.type)).to_numpy()
    assert_same_array(got, want, column)  # zeros where null, the values elsewhere


@pytest.mark.parametrize("column", NULL_VARIABLE)
def test_null_mask_variable_length(null_file, column):
    col = reference(null_file, column)
    batches = load(null_file, [column], 50, null_mask=True, lists="ragged")
    mask = np.concatenate([b[column + "_mask"] for b in batches])
    assert_same_array(mask, col.is_valid().to_numpy(zero_copy_only=False), column)
    got = [row for b in batches for row in b[column].tolist()]
    empty = [] if pa.types.is_list(col.type) else (
        b"" if pa.types.is_binary(col.type) else "")
    assert got == [empty if row is None else row for row in col.to_pylist()]


def test_null_mask_padded_list(null_file):
    col = reference(null_file, "list_i32")
    batches = load(null_file, ["list_i32"], 50, null_mask=True, lists="padded", pad_value=-1)
    lengths = np.concatenate([b["list_i32_lengths"] for b in batches])
    want = [0 if row is None else len(row) for row in col.to_pylist()]
    assert_same_array(lengths, np.array(want, np.int64), "lengths")
    for b in batches:
        values = np.asarray(b["list_i32"])
        for r, length in enumerate(np.asarray(b["list_i32_lengths"])):
            assert (values[r, length:] == -1).all()


@pytest.mark.parametrize("column", NULL_VARIABLE)
def test_fill_null_does_not_apply_to_variable_length(null_file, column):
    """A number cannot stand for a missing string or list: nulls there still need the mask."""
    with pytest.raises(NullValueError, match=f"'{column}'.*null_mask"):
        load(null_file, [column], 50, fill_null=0, lists="ragged")


@pytest.mark.parametrize("column,value", [("int8", 0.5), ("int8", 300), ("uint16", -1),
                                          ("bool", 2), ("int64", float("nan")),
                                          ("float16", 1e-9), ("float32", 0.1)])
def test_fill_null_not_representable(null_file, column, value):
    with pytest.raises(InvalidOptionError, match=f"fill_null.*'{column}'"):
        stoker.Loader(null_file, columns=[column], fill_null={column: value}, shuffle=False)


def test_global_fill_null_checked_where_nulls_are(write_parquet):
    """fill_null=nan for every column: fine for an int column without nulls, an error naming
    the column and row group for an int column with some (NaN has no int64 value)."""
    path = write_parquet({"id": pa.array(np.arange(100)),
                          "x": pa.array([None if i == 70 else i / 2 for i in range(100)]),
                          "n": pa.array([None if i == 70 else i for i in range(100)])},
                         row_group_size=32)
    batches = load(path, ["id", "x"], 30, fill_null=float("nan"))
    x = np.concatenate([b["x"] for b in batches])
    assert_same_array(x, pc.fill_null(reference(path, "x"), float("nan")).to_numpy(), "x")
    assert_same_array(np.concatenate([b["id"] for b in batches]), np.arange(100), "id")
    with pytest.raises(InvalidOptionError, match="'n'.*row group 2.*fill_null=nan.*int64"):
        load(path, ["id", "n"], 30, fill_null=float("nan"))


def test_fill_null_special_float_values(null_file):
    for value in (float("nan"), float("-inf")):
        batches = load(null_file, ["float16", "float32"], 50, fill_null=value)
        for column in ("float16", "float32"):
            col = reference(null_file, column)
            want = pc.fill_null(col, pa.scalar(value, col.type)).to_numpy()
            assert_same_array(np.concatenate([b[column] for b in batches]), want, column)


# ------------------------------------------------------------------------------ features

FEATURE_SOURCES = {
    "int8": np.int8, "int16": np.int16, "int32": np.int32, "int64": np.int64,
    "uint8": np.uint8, "uint16": np.uint16, "uint32": np.uint32, "uint64": np.uint64,
    "float16": np.float16, "float32": np.float32, "float64": np.float64, "bool": np.bool_,
}


@pytest.fixture(scope="module")
def feature_file(tmp_path_factory) -> str:
    rng = np.random.default_rng(3)
    cols = {}
    for name, dtype in FEATURE_SOURCES.items():
        if dtype == np.bool_:
            cols[name] = rng.random(N) < 0.5
        elif np.issubdtype(dtype, np.floating):
            cols[name] = (rng.standard_normal(N) * 100).astype(dtype)
        else:
            info = np.iinfo(dtype)
            cols[name] = rng.integers(info.min, info.max, N, dtype=dtype, endpoint=True)
    # Values a float32 cannot hold exactly, so a lossy cast visibly rounds.
    cols["int64"][:3] = [2**53 + 1, -(2**62) - 1, 16_777_217]
    cols["float64"][:2] = [0.1, 1e300]
    path = str(tmp_path_factory.mktemp("features") / "features.parquet")
    pq.write_table(pa.table(cols), path, row_group_size=PA_ROW_GROUP)
    return path


LOSSLESS = {
    "float32": ["int8", "int16", "uint8", "uint16", "float16", "float32", "bool"],
    "float64": ["int8", "int16", "int32", "uint8", "uint16", "uint32", "float16", "float32",
                "float64", "bool"],
    "int64": ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "bool"],
    "int32": ["int8", "int16", "int32", "uint8", "uint16", "bool"],
}
LOSSY = {
    "float32": ["int32", "int64", "uint32", "uint64", "float64"],
    "float64": ["int64", "uint64"],
    "int64": ["uint64", "float16", "float32", "float64"],
    "int32": ["int64", "uint32", "float32"],
}


def expected_features(path: str, names, dtype) -> np.ndarray:
    table = pq.read_table(path, columns=list(names))
    with np.errstate(over="ignore"):  # 1e300 -> inf is the lossy cast under test
        return np.stack([table.column(n).to_numpy().astype(dtype) for n in names], axis=1)


@pytest.mark.parametrize("features_dtype", sorted(LOSSLESS))
def test_features_lossless(feature_file, features_dtype):
    names = LOSSLESS[features_dtype]
    batches = load(feature_file, None, 50, features=names, features_dtype=features_dtype)
    got = np.concatenate([b["features"] for b in batches])
    assert_same_array(got, expected_features(feature_file, names, features_dtype), "features")
    assert set(batches[0]) == {"features", "__info__"}


@pytest.mark.parametrize("features_dtype,column",
                         [(d, c) for d in sorted(LOSSY) for c in LOSSY[d]])
def test_features_lossy_cast_refused(feature_file, features_dtype, column):
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(feature_file, features=["int8", column], features_dtype=features_dtype,
                      shuffle=False)
    assert f"'{column}'" in str(err.value) and "allow_lossy_cast" in str(err.value)


@pytest.mark.parametrize("features_dtype,columns", [
    ("float32", ["int64", "float64", "uint64", "int32"]),
    ("float64", ["int64", "uint64"]),
])
def test_features_lossy_cast_allowed(feature_file, features_dtype, columns):
    batches = load(feature_file, None, 50, features=columns, features_dtype=features_dtype,
                   allow_lossy_cast=True)
    got = np.concatenate([b["features"] for b in batches])
    want = expected_features(feature_file, columns, features_dtype)
    assert_same_array(got, want, "features")
    # The cast really was lossy for at least one value (else the test proves nothing).
    table = pq.read_table(feature_file, columns=columns)
    assert any(Fraction(float(want[k, j])) != Fraction(value) for j, c in enumerate(columns)
               for k, value in enumerate(table.column(c).to_pylist()[:3]))


@pytest.mark.parametrize("features_dtype", ["float32", "float64"])
def test_features_special_floats(pyarrow_file, features_dtype):
    """float16 subnormals, infinities, NaN and -0.0 widen exactly (bytes compared)."""
    names = ["float16", "float32", "bool", "uint8"]
    if features_dtype == "float64":
        names.append("float64")
    batches = load(pyarrow_file, None, 50, features=names, features_dtype=features_dtype)
    got = np.concatenate([b["features"] for b in batches])
    want = expected_features(pyarrow_file, names, features_dtype)
    assert_same_array(got, want, "features")
    assert np.isnan(got[:, 0]).any() and np.isinf(got[:, 0]).any()
    assert np.signbit(got[1, 0]) and got[1, 0] == 0  # -0.0 kept


def test_features_next_to_columns_and_with_fill(null_file):
    batches = load(null_file, ["int8", "string"], 50, features=["float32", "bool", "int8"],
                   fill_null={"float32": 2.5, "bool": 1, "int8": -3}, null_mask=["string"],
                   features_name="x", features_dtype="float64")
    table = pq.read_table(null_file)
    want = np.stack([
        pc.fill_null(table.column("float32"), 2.5).to_numpy().astype(np.float64),
        pc.fill_null(table.column("bool"), True).to_numpy().astype(np.float64),
        pc.fill_null(table.column("int8"), -3).to_numpy().astype(np.float64)], axis=1)
    assert_same_array(np.concatenate([b["x"] for b in batches]), want, "x")
    assert_same_array(np.concatenate([b["int8"] for b in batches]),
                      pc.fill_null(table.column("int8"), -3).to_numpy(), "int8")


def test_duckdb_features(duckdb_file):
    names = ["int8", "int16", "uint8", "uint16", "float32", "bool"]
    batches = load(duckdb_file, None, 333, features=names)
    got = np.concatenate([b["features"] for b in batches])
    assert_same_array(got, expected_features(duckdb_file, names, np.float32), "features")
    with pytest.raises(LossyCastError, match="'float64'"):
        stoker.Loader(duckdb_file, features=names + ["float64"], shuffle=False)


def test_features_reject_non_scalar(pyarrow_file):
    for column in ("fsl_f32", "fsl_bool", "string", "list_i32"):
        with pytest.raises(UnsupportedTypeError, match=f"'{column}'"):
            stoker.Loader(pyarrow_file, features=["int8", column], lists="padded",
                          shuffle=False)


# ------------------------------------------------------------------------------ partitions

def test_hive_partitions(write_parquet, tmp_path):
    rows = {}
    for year in (2021, 2022):
        for city in ("oslo", "rome"):
            count = 37 if city == "oslo" else 20
            values = np.arange(count, dtype=np.int32) + year * 100
            write_parquet({"v": values}, name=f"hive/year={year}/city={city}/part.parquet",
                          row_group_size=16)
            rows[(year, city)] = values
    order = sorted(rows, key=lambda k: f"year={k[0]}/city={k[1]}")
    batches = load(str(tmp_path / "hive"), ["v", "year", "city"], 25)
    with stoker.Loader(str(tmp_path / "hive"), shuffle=False, batch_size=8) as loader:
        assert loader.columns["year"].dtype == "int64"
        assert loader.columns["city"].kind == stoker._stoker.ColumnKind.strings
    assert_same_array(np.concatenate([b["v"] for b in batches]),
                      np.concatenate([rows[k] for k in order]), "v")
    assert_same_array(np.concatenate([b["year"] for b in batches]),
                      np.concatenate([np.full(len(rows[k]), k[0], np.int64) for k in order]),
                      "year")
    assert [c for b in batches for c in b["city"].tolist()] == [
        k[1] for k in order for _ in range(len(rows[k]))]
    # pyarrow's own reading of the partitioned dataset agrees on every row.
    import pyarrow.dataset as ds
    table = ds.dataset(str(tmp_path / "hive"), partitioning="hive").to_table()
    pairs = sorted(zip(table.column("year").to_pylist(), table.column("city").to_pylist(),
                       table.column("v").to_pylist()))
    got = sorted(zip(np.concatenate([b["year"] for b in batches]).tolist(),
                     [c for b in batches for c in b["city"].tolist()],
                     np.concatenate([b["v"] for b in batches]).tolist()))
    assert got == pairs


def test_hive_partition_mixed_values_are_strings(write_parquet, tmp_path):
    for key in ("7", "x7", "-3"):
        write_parquet({"v": np.arange(5, dtype=np.int64)}, name=f"mixed/key={key}/p.parquet")
    batches = load(str(tmp_path / "mixed"), ["key", "v"], 4)
    keys = [k for b in batches for k in b["key"].tolist()]
    assert keys == ["-3"] * 5 + ["7"] * 5 + ["x7"] * 5


# ------------------------------------------------------------------------------ DuckDB specials

@pytest.mark.parametrize("sql,column", [
    ("SELECT (i * 1.5)::DECIMAL(10, 2) AS d FROM range(10) t(i)", "d"),
])
def test_duckdb_unsupported_types_name_the_column(write_duckdb, sql, column):
    path = write_duckdb(sql)
    with pytest.raises(UnsupportedTypeError, match=f"'{column}'"):
        stoker.Loader(path, columns=[column], lists="ragged", shuffle=False)
    assert pq.read_table(path).num_rows == 10  # the file itself is fine


def test_duckdb_structs_and_maps_are_flattened(write_duckdb):
    """DuckDB's STRUCT and MAP: leaves `st.a`, `st.b`; `m.keys` and `m.values` (ragged)."""
    path = write_duckdb("SELECT {'a': i, 'b': i * 2} AS st, MAP {'k' || i: i} AS m "
                        "FROM range(10) t(i)")
    with stoker.Loader(path, columns=["st", "m"], lists="ragged", shuffle=False,
                       batch_size=10) as loader:
        batch = next(iter(loader))
    table = pq.read_table(path)
    assert batch["st.a"].tolist() == [r["a"] for r in table["st"].to_pylist()]
    assert batch["st.b"].tolist() == [r["b"] for r in table["st"].to_pylist()]
    assert batch["m.keys"].tolist() == [[k for k, _ in r] for r in table["m"].to_pylist()]
    assert batch["m.values"].tolist() == [[v for _, v in r] for r in table["m"].to_pylist()]


def test_duckdb_from_arrow_table(write_duckdb):
    """DuckDB re-encoding an Arrow table (its own writer, pyarrow's types going in)."""
    table = pyarrow_table(DUCK_N).select(["int8", "uint32", "float64", "bool", "string",
                                        "large_binary", "ts_ns", "date32", "list_i32"])
    path = write_duckdb(table, row_group_size=2048)
    assert pq.ParquetFile(path).metadata.num_row_groups >= 2
    for column in table.column_names:
        check_file_column(path, column, 700)


# ------------------------------------------------------------------------------ slices

SLICE_COLUMNS = ["bool", "float16", "uint64", "fsl_nested_i16", "tensor_f32", "list_i32",
                 "fsl_bool", "fsl_nested_bool", "list_bool",
                 "large_list_f64", "string", "large_binary", "ts_ns", "dict_string",
                 "dict_binary"]


@pytest.mark.parametrize("lists", ["padded", "ragged"])
def test_row_group_slices_across_ranks(pyarrow_file, lists):
    """world_size=3 cuts the 300 rows at 100 and 200, inside row groups: every type must
    decode from a slice that starts mid row group (offset buffers, bit offsets, dictionaries)."""
    per_rank = [load(pyarrow_file, SLICE_COLUMNS, 30, lists=lists, rank=r, world_size=3)
                for r in range(3)]
    assert [sum(len(b["uint64"]) for b in batches) for batches in per_rank] == [100] * 3
    table = pq.read_table(pyarrow_file, columns=SLICE_COLUMNS)
    for r, batches in enumerate(per_rank):
        part = table.slice(r * 100, 100)
        for name in SLICE_COLUMNS:
            check_column(batches, name, part.column(name), mode_of(part.column(name).type, lists))


def test_null_mask_on_slices(null_file):
    columns = ["int8", "bool", "float16", "string", "list_i32", "dict_string"]
    table = pq.read_table(null_file, columns=columns)
    for r in range(3):
        batches = load(null_file, columns, 30, null_mask=True, lists="ragged", rank=r,
                       world_size=3)
        part = table.slice(r * 100, 100)
        for name in columns:
            mask = np.concatenate([b[name + "_mask"] for b in batches])
            assert_same_array(mask, part.column(name).is_valid().to_numpy(zero_copy_only=False),
                              name)
        got = np.concatenate([b["int8"] for b in batches])
        assert_same_array(got, pc.fill_null(part.column("int8"), 0).to_numpy(), "int8")
        strings = [s for b in batches for s in b["dict_string"].tolist()]
        assert strings == [s or "" for s in part.column("dict_string").to_pylist()]


def test_padded_batch_of_empty_lists(write_parquet, load_batches):
    path = write_parquet({"l": pa.array([[]] * 10 + [[1, 2]] * 3, pa.list_(pa.int16()))},
                         row_group_size=4)
    batches = load_batches(path, columns=["l"], batch_size=5, lists="padded", shuffle=False,
                           drop_last=False)
    assert np.asarray(batches[0]["l"]).shape == (5, 0)
    check_column(batches, "l", reference(path, "l"), "padded")


def test_null_elements_inside_lists_name_the_options(write_parquet):
    path = write_parquet({"l": pa.array([[1, None], [2]] * 10, pa.list_(pa.int32()))},
                         row_group_size=8)
    with pytest.raises(NullValueError,
                       match=r"'l'.*row group 0.*fill_null=\{'l': value\}.*null_mask=\['l'\]"):
        load(path, ["l"], 4, lists="ragged")
    # null_mask delivers them: 0 with False in l_mask_1 (tests/unit/formats/test_nested_nulls.py).
    batches = load(path, ["l"], 4, lists="ragged", null_mask=True)
    assert [m for b in batches for m in b["l_mask_1"].tolist()] == [True, False, True] * 10


def test_torch_output_strings_and_ragged(pyarrow_file):
    torch = pytest.importorskip("torch")
    columns = ["string", "binary", "list_i32", "float16", "tensor_f32"]
    batches = load(pyarrow_file, columns, 64, lists="ragged", output="torch")
    table = pq.read_table(pyarrow_file, columns=columns)
    assert isinstance(batches[0]["float16"], torch.Tensor)
    assert batches[0]["float16"].dtype == torch.float16
    assert tuple(batches[0]["tensor_f32"].shape) == (64, 2, 3)
    for name in ("string", "binary", "list_i32"):
        assert isinstance(batches[0][name].values, torch.Tensor)
        got = [row for b in batches for row in stoker.to_pylist(b[name])]
        assert got == table.column(name).to_pylist()
    dense = np.concatenate([b["tensor_f32"].numpy() for b in batches])
    assert_same_array(dense, expected_dense(table.column("tensor_f32")), "tensor_f32")


# ------------------------------------------------------------------------------ options by column

def test_pad_value_per_column_dict(pyarrow_file):
    batches = load(pyarrow_file, ["list_i32", "list_u64"], 50, lists="padded",
                   pad_value={"list_i32": -7})
    check_column(batches, "list_i32", reference(pyarrow_file, "list_i32"), "padded", pad_value=-7)
    check_column(batches, "list_u64", reference(pyarrow_file, "list_u64"), "padded", pad_value=0)


def test_hive_partition_values_are_url_decoded(write_parquet, tmp_path):
    import pyarrow.dataset as ds
    write_parquet({"v": [1, 2]}, name="hive/city=New%20York/part.parquet")
    root = str(tmp_path / "hive")
    want = ds.dataset(root, partitioning="hive").to_table().column("city").to_pylist()
    got = [c for b in load(root, ["city"], 2) for c in b["city"].tolist()]
    assert got == want == ["New York", "New York"]


def test_fixed_size_binary_nulls(write_parquet):
    """Raw bytes with nulls: the mask, zero rows under null_mask, every byte = fill_null."""
    values = [None if i % 6 == 4 else bytes([i, 255 - i, 7]) for i in range(60)]
    path = write_parquet({"h": pa.array(values, pa.binary(3))}, row_group_size=16)
    with pytest.raises(NullValueError, match="'h'.*row group 0"):
        load(path, ["h"], 10)
    masked = load(path, ["h"], 10, null_mask=True)
    valid = np.array([v is not None for v in values])
    assert_same_array(np.concatenate([b["h_mask"] for b in masked]), valid, "mask")
    want = np.array([list(v) if v is not None else [0, 0, 0] for v in values], np.uint8)
    assert_same_array(np.concatenate([b["h"] for b in masked]), want, "h")
    filled = load(path, ["h"], 10, fill_null=9)
    want[~valid] = 9
    assert_same_array(np.concatenate([b["h"] for b in filled]), want, "h")
    with pytest.raises(InvalidOptionError, match="fill_null.*'h'.*uint8"):
        stoker.Loader(path, columns=["h"], fill_null={"h": 256}, shuffle=False)


# ------------------------------------------------------------------------------ new types
#
# Conformance of the types issue 14 added, over files written by several writers: timestamps
# (naive and zoned), dates, decimals, categoricals (a dictionary-encoded string column as ids) and
# struct leaves, written by pyarrow (format 1.0 and 2.6), DuckDB, Polars, pandas and Spark (the
# writers of tests/unit/formats/test_conformance.py). Every value stoker delivers is compared with
# pyarrow's read of the same file:
#
# - temporal columns with ``time_unit``: the float64 count of the unit, exactly the correctly
#   rounded quotient of pyarrow's stored count (``float(Fraction(count * from_ns, to_ns))``);
# - decimals with ``decimals="float64"``: exactly ``float(Decimal)``;
# - ``categories={"cat": "auto"}``: ``vocabulary[id - 1]`` is the value, 0 only for nulls;
# - struct leaves ``s.a`` / ``s.b``: the child values.
#
# Nulls are delivered with ``null_mask=True`` and the masks compared too. Spark writes its own
# encodings of these types: TIMESTAMP_NTZ, INT96 timestamps (no statistics, so
# ``allow_lossy_cast``) and INT64-backed decimals.

NEW_TYPES_N = 300
NEW_TYPES_ROW_GROUP = 64
NEW_TYPES_BATCH = 77
UNIT_NS = {"D": 86_400 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
TIME_UNIT = {"ts": "s", "tz": "ms", "d": "D"}
CATEGORIES = ["red", "green", "blue", "über", ""]


def new_types_table() -> pa.Table:
    rng = np.random.default_rng(14)
    valid = rng.random(NEW_TYPES_N) > 0.15
    base_us = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
    ts = [int(base_us + rng.integers(-10**13, 10**13)) if v else None for v in valid]
    tz = [int(base_us // 1000 + rng.integers(-10**10, 10**10)) for _ in range(NEW_TYPES_N)]
    days = [datetime.date(2026, 1, 1) + datetime.timedelta(days=int(k))
            if v else None
            for k, v in zip(rng.integers(-20000, 20000, NEW_TYPES_N), valid[::-1])]
    dec = [decimal.Decimal(int(k)).scaleb(-2) if v else None
           for k, v in zip(rng.integers(-10**11, 10**11, NEW_TYPES_N), np.roll(valid, 3))]
    cat_index = rng.integers(0, len(CATEGORIES), NEW_TYPES_N)
    cat = pa.DictionaryArray.from_arrays(
        pa.array(cat_index.astype(np.int32), mask=~np.roll(valid, 5)), pa.array(CATEGORIES))
    a = pa.array(rng.integers(-1000, 1000, NEW_TYPES_N).astype(np.int32),
                 mask=~np.roll(valid, 7))
    b = pa.array(rng.standard_normal(NEW_TYPES_N), mask=~np.roll(valid, 11))
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("us")),
        "tz": pa.array(tz, pa.timestamp("ms", tz="UTC")),
        "d": pa.array(days, pa.date32()),
        "dec": pa.array(dec, pa.decimal128(12, 2)),
        "cat": cat,
        "s": pa.StructArray.from_arrays([a, b], ["a", "b"]),
    })


def write_spark_new_types(table: pa.Table, path: str) -> None:
    """Spark's own types: TIMESTAMP_NTZ for the naive timestamps, TimestampType (INT96, Spark's
    default) for the zoned ones, DateType, DecimalType(12, 2) (INT64-backed), a plain string
    column (dictionary-encoded by Spark) and a struct."""
    import test_conformance as conformance
    from pyspark.sql import types as T

    spark = conformance._spark_session()
    schema = T.StructType([
        T.StructField("ts", T.TimestampNTZType(), True),
        T.StructField("tz", T.TimestampType(), True),
        T.StructField("d", T.DateType(), True),
        T.StructField("dec", T.DecimalType(12, 2), True),
        T.StructField("cat", T.StringType(), True),
        T.StructField("s", T.StructType([T.StructField("a", T.IntegerType(), True),
                                         T.StructField("b", T.DoubleType(), True)]), True),
    ])
    data = [(r["ts"], r["tz"], r["d"], r["dec"], r["cat"], (r["s"]["a"], r["s"]["b"]))
            for r in table.to_pylist()]
    conformance.save_spark(spark.createDataFrame(data, schema, verifySchema=False), path,
                           {"parquet.block.size": str(16 << 10)})


def _conformance_writer(name: str, params: Dict[str, Any]) -> Callable[[pa.Table, str], None]:
    """One of tests/unit/formats/test_conformance.py's writers, with these parameters."""
    def write(table: pa.Table, path: str) -> None:
        import test_conformance as conformance

        conformance.WRITERS[name](table, path, params)
    return write


_RG = NEW_TYPES_ROW_GROUP
NEW_TYPES_WRITERS: Dict[str, Callable[[pa.Table, str], None]] = {
    "pyarrow-1.0": _conformance_writer("pyarrow", {"version": "1.0", "row_group_size": _RG}),
    "pyarrow-2.6": _conformance_writer("pyarrow", {"version": "2.6", "row_group_size": _RG}),
    "duckdb": _conformance_writer("duckdb", {"ROW_GROUP_SIZE": _RG}),
    "polars": _conformance_writer("polars", {"row_group_size": _RG}),
    # A pandas user's frame: datetime64 columns, a category, Decimal and dict objects.
    "pandas": _conformance_writer("pandas", {"engine": "pyarrow", "row_group_size": _RG}),
    "spark": write_spark_new_types,
}
for _writer in NEW_TYPES_WRITERS:
    SOURCES[f"new-types:{_writer}"] = _new_types_source(_writer)


def _spark_reason() -> str:
    import petastorm_fixtures

    return petastorm_fixtures.spark_missing()


@pytest.fixture(scope="module", autouse=True)
def _stop_spark():
    yield
    import test_conformance as conformance

    conformance.stop_spark()


NEW_TYPES_OPTIONS: Dict[str, Any] = dict(
    columns=["ts", "tz", "d", "dec", "cat", "s"], time_unit=TIME_UNIT, decimals="float64",
    categories={"cat": "auto"}, null_mask=True, shuffle=False, drop_last=False,
    batch_size=NEW_TYPES_BATCH)


def _stored_counts(col: pa.ChunkedArray):
    """pyarrow's stored counts of a temporal column and the nanoseconds of one count."""
    t = col.type
    if pa.types.is_date32(t):
        return col.cast(pa.int32()).cast(pa.int64()), UNIT_NS["D"]
    if pa.types.is_date64(t):
        return col.cast(pa.int64()), UNIT_NS["ms"]
    return col.cast(pa.int64()), UNIT_NS[t.unit]


def _epoch(batches, name: str) -> np.ndarray:
    return np.concatenate([np.asarray(b[name]) for b in batches])


def check_new_types(path: str, writer: str) -> None:
    """Every value of the new-types table, as ``writer`` wrote it, equals pyarrow's read."""
    want = pq.read_table(path)
    options = dict(NEW_TYPES_OPTIONS)
    # Spark's INT96 timestamps carry no statistics: the type's range makes counts of
    # nanoseconds beyond 2**52 possible, so the conversion needs the explicit flag.
    int96 = pa.types.is_timestamp(want.column("tz").type) and want.column("tz").type.unit == "ns"
    if int96:
        options["allow_lossy_cast"] = True
    with stoker.Loader(path, **options) as loader:
        assert set(loader.columns) == {"ts", "tz", "d", "dec", "cat", "s.a", "s.b"}
        vocabulary = loader.vocabulary("cat")
        batches = list(loader)

    def check_mask(name: str, col: pa.ChunkedArray) -> np.ndarray:
        valid = col.is_valid().to_numpy(zero_copy_only=False)
        np.testing.assert_array_equal(_epoch(batches, name + "_mask"), valid, err_msg=name)
        return valid

    for name, unit in TIME_UNIT.items():
        col = want.column(name)
        valid = check_mask(name, col)
        counts, from_ns = _stored_counts(col)
        expected = [float(Fraction(c * from_ns, UNIT_NS[unit])) if c is not None else 0.0
                    for c in counts.to_pylist()]
        got = _epoch(batches, name)
        assert got.dtype == np.float64, name
        if from_ns == 1 and counts.type == pa.int64() and int96:
            # Nanosecond counts beyond 2**53 are rounded to float64 before the division.
            np.testing.assert_allclose(got, expected, rtol=1e-15, err_msg=f"{writer}: {name}")
        else:
            assert got.tolist() == expected, f"{writer}: {name} differs from pyarrow's counts"
        assert valid.sum() > 0

    col = want.column("dec")
    check_mask("dec", col)
    expected = [float(v) if v is not None else 0.0 for v in col.to_pylist()]
    assert _epoch(batches, "dec").tolist() == expected, writer

    col = want.column("cat")
    valid = check_mask("cat", col)
    values = col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col
    ids = _epoch(batches, "cat")
    assert ids.dtype == np.int64
    assert set(values.drop_null().to_pylist()) <= set(vocabulary)
    for value, got_id, ok in zip(values.to_pylist(), ids.tolist(), valid):
        assert (vocabulary[got_id - 1] == value) if ok else got_id == 0, (writer, value, got_id)

    struct = want.column("s").combine_chunks()
    for leaf in ("a", "b"):
        child = pa.chunked_array([struct.field(leaf)])
        name = "s." + leaf
        valid = check_mask(name, child)
        expected = np.asarray(child.fill_null(0).to_numpy(zero_copy_only=False))
        got = _epoch(batches, name)
        assert got.dtype == expected.dtype, name
        np.testing.assert_array_equal(got[valid], expected[valid], err_msg=f"{writer}: {name}")


# ------------------------------------------------------------------------------ the one body

@pytest.mark.parametrize("case", [_param(c) for c in _cases()])
def test_format(case: Case, format_files) -> None:
    CHECKS[case.check](format_files(case.source), case)
