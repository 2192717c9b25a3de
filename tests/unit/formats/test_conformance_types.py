"""Conformance of the types issue 14 added, over files written by several writers.

tests/unit/formats/test_conformance.py covers the plain types (ints, floats, bool, strings, lists) over every
writer and format option; this file adds rows for timestamps (naive and zoned), dates, decimals,
categoricals (a dictionary-encoded string column as ids) and struct leaves, written by pyarrow
(format 1.0 and 2.6), DuckDB, Polars, pandas and Spark. Every value stoker delivers is compared with
pyarrow's read of the same file:

- temporal columns with ``time_unit``: the float64 count of the unit, exactly the correctly
  rounded quotient of pyarrow's stored count (``float(Fraction(count * from_ns, to_ns))``);
- decimals with ``decimals="float64"``: exactly ``float(Decimal)``;
- ``categories={"cat": "auto"}``: ``vocabulary[id - 1]`` is the value, 0 only for nulls;
- struct leaves ``s.a`` / ``s.b``: the child values.

Nulls are delivered with ``null_mask=True`` and the masks compared too. Spark writes its own
encodings of these types: TIMESTAMP_NTZ, INT96 timestamps (no statistics, so ``allow_lossy_cast``)
and INT64-backed decimals.
"""

from __future__ import annotations

import datetime
import decimal
from fractions import Fraction
from typing import Any, Callable, Dict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker

N = 300
ROW_GROUP = 64
BATCH = 77
UNIT_NS = {"D": 86_400 * 10**9, "s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}
TIME_UNIT = {"ts": "s", "tz": "ms", "d": "D"}
CATEGORIES = ["red", "green", "blue", "über", ""]


def _table() -> pa.Table:
    rng = np.random.default_rng(14)
    valid = rng.random(N) > 0.15
    base_us = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z
    ts = [int(base_us + rng.integers(-10**13, 10**13)) if v else None for v in valid]
    tz = [int(base_us // 1000 + rng.integers(-10**10, 10**10)) for _ in range(N)]
    days = [datetime.date(2026, 1, 1) + datetime.timedelta(days=int(k))
            if v else None for k, v in zip(rng.integers(-20000, 20000, N), valid[::-1])]
    dec = [decimal.Decimal(int(k)).scaleb(-2) if v else None
           for k, v in zip(rng.integers(-10**11, 10**11, N), np.roll(valid, 3))]
    cat_index = rng.integers(0, len(CATEGORIES), N)
    cat = pa.DictionaryArray.from_arrays(
        pa.array(cat_index.astype(np.int32), mask=~np.roll(valid, 5)), pa.array(CATEGORIES))
    a = pa.array(rng.integers(-1000, 1000, N).astype(np.int32), mask=~np.roll(valid, 7))
    b = pa.array(rng.standard_normal(N), mask=~np.roll(valid, 11))
    return pa.table({
        "ts": pa.array(ts, pa.timestamp("us")),
        "tz": pa.array(tz, pa.timestamp("ms", tz="UTC")),
        "d": pa.array(days, pa.date32()),
        "dec": pa.array(dec, pa.decimal128(12, 2)),
        "cat": cat,
        "s": pa.StructArray.from_arrays([a, b], ["a", "b"]),
    })


def write_spark(table: pa.Table, path: str) -> None:
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


def _writer(name: str, params: Dict[str, Any]) -> Callable[[pa.Table, str], None]:
    """One of tests/unit/formats/test_conformance.py's writers, with these parameters."""
    def write(table: pa.Table, path: str) -> None:
        import test_conformance as conformance

        conformance.WRITERS[name](table, path, params)
    return write


WRITERS: Dict[str, Callable[[pa.Table, str], None]] = {
    "pyarrow-1.0": _writer("pyarrow", {"version": "1.0", "row_group_size": ROW_GROUP}),
    "pyarrow-2.6": _writer("pyarrow", {"version": "2.6", "row_group_size": ROW_GROUP}),
    "duckdb": _writer("duckdb", {"ROW_GROUP_SIZE": ROW_GROUP}),
    "polars": _writer("polars", {"row_group_size": ROW_GROUP}),
    # A pandas user's frame: datetime64 columns, a category, Decimal and dict objects.
    "pandas": _writer("pandas", {"engine": "pyarrow", "row_group_size": ROW_GROUP}),
    "spark": write_spark,
}


def _spark_reason() -> str:
    import petastorm_fixtures

    return petastorm_fixtures.spark_missing()


@pytest.fixture(scope="module", autouse=True)
def _stop_spark():
    yield
    import test_conformance as conformance

    conformance.stop_spark()

OPTIONS: Dict[str, Any] = dict(
    columns=["ts", "tz", "d", "dec", "cat", "s"], time_unit=TIME_UNIT, decimals="float64",
    categories={"cat": "auto"}, null_mask=True, shuffle=False, drop_last=False,
    batch_size=BATCH)


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


def _param(writer: str):
    if writer != "spark":
        return writer
    reason = _spark_reason()
    return pytest.param(writer, marks=[pytest.mark.slow,
                                       pytest.mark.skipif(bool(reason), reason=reason or "ok")])


@pytest.mark.parametrize("writer", [_param(w) for w in sorted(WRITERS)])
def test_new_types_equal_pyarrows_read(writer, tmp_path):
    path = str(tmp_path / f"{writer}.parquet")
    WRITERS[writer](_table(), path)
    want = pq.read_table(path)
    options = dict(OPTIONS)
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
