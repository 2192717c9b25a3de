"""Timestamps, dates, decimals and float16 as users have them (issue 14, "types"): `time_unit`,
`decimals`, one error for every column problem at once, readable `loader.columns`, and
`storage_options` on a local path.

References are computed from what pyarrow reads back from the same file: stored integer counts
for temporal columns (converted with numpy's own float64 arithmetic, which stoker reproduces bit
for bit), Python's ``Decimal`` for decimals (``float(Decimal)`` is correctly rounded, as stoker's
conversion is up to precision 15).
"""

from __future__ import annotations

import datetime as dt
import decimal
from typing import Any, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import (ColumnNotFoundError, InvalidOptionError, LossyCastError,
                           UnsupportedTypeError)

N = 300
ROW_GROUP = 64
NANOS = {"D": 86_400 * 10**9, "h": 3_600 * 10**9, "m": 60 * 10**9, "s": 10**9, "ms": 10**6,
         "us": 10**3, "ns": 1}
UNITS = list(NANOS)


def load(path, batch_size: int = 50, **kwargs) -> List[Dict[str, Any]]:
    with stoker.Loader(path, batch_size=batch_size, shuffle=False, drop_last=False,
                       num_threads=2, **kwargs) as loader:
        return list(loader)


def column(batches, name) -> np.ndarray:
    return np.concatenate([np.asarray(b[name]) for b in batches])


def assert_bytes_equal(got: np.ndarray, want: np.ndarray, what: str = "") -> None:
    assert got.dtype == want.dtype, f"{what}: {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: {got.shape} != {want.shape}"
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), what


# ------------------------------------------------------------------------------ temporal

def temporal_table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(14)
    # Instants around today, both sides of the epoch, with sub-second parts.
    seconds = rng.integers(-2 * 10**9, 2 * 10**9, n)
    nanos = seconds * 10**9 + rng.integers(0, 10**9, n)
    days = (seconds // 86_400).astype(np.int32)
    cols = {
        "ts_s": pa.array(seconds, pa.timestamp("s")),
        "ts_ms": pa.array(nanos // 10**6, pa.timestamp("ms")),
        "ts_us": pa.array(nanos // 10**3, pa.timestamp("us")),
        "ts_ns": pa.array(nanos, pa.timestamp("ns")),
        "ts_ms_utc": pa.array(nanos // 10**6, pa.timestamp("ms", tz="UTC")),
        "ts_us_tokyo": pa.array(nanos // 10**3, pa.timestamp("us", tz="Asia/Tokyo")),
        "date32": pa.array(days, pa.date32()),
        "date64": pa.array(days.astype(np.int64) * 86_400_000, pa.date64()),
        "time64_us": pa.array(rng.integers(0, 86_400 * 10**6, n), pa.time64("us")),
        "duration_ms": pa.array(rng.integers(-10**9, 10**9, n), pa.duration("ms")),
        "ts_us_nulls": pa.array([None if i % 7 == 3 else int(v) for i, v in
                                 enumerate(nanos // 10**3)], pa.timestamp("us")),
        "x": pa.array(rng.standard_normal(n)),
    }
    return pa.table(cols)


@pytest.fixture(scope="module")
def temporal_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("temporal") / "t.parquet")
    pq.write_table(temporal_table(), path, row_group_size=ROW_GROUP)
    return path


def unit_nanos(t: pa.DataType) -> int:
    if pa.types.is_date32(t):
        return NANOS["D"]
    if pa.types.is_date64(t):
        return NANOS["ms"]
    return {"s": 10**9, "ms": 10**6, "us": 10**3, "ns": 1}[t.unit]


def expected_counts(path: str, name: str, unit: str) -> np.ndarray:
    """numpy's float64 conversion of the stored counts (what pyarrow reads back) into `unit`."""
    col = pq.read_table(path, columns=[name]).column(name)
    storage = col.cast(pa.int32() if col.type.bit_width == 32 else pa.int64())
    counts = storage.fill_null(0).to_numpy().astype(np.int64).astype(np.float64)
    source, target = unit_nanos(col.type), NANOS[unit]
    return counts * float(source // target) if source >= target else counts / float(
        target // source)


TEMPORAL = ["ts_s", "ts_ms", "ts_us", "ts_ms_utc", "ts_us_tokyo", "date32", "date64",
            "time64_us", "duration_ms"]


@pytest.mark.parametrize("unit", UNITS)
def test_time_unit_delivers_float64_counts_of_the_unit(temporal_file, unit):
    # Nanoseconds of today's instants do not fit float64 exactly: those need allow_lossy_cast.
    lossy = unit == "ns"
    batches = load(temporal_file, columns=TEMPORAL, time_unit=unit, allow_lossy_cast=lossy)
    for name in TEMPORAL:
        assert_bytes_equal(column(batches, name), expected_counts(temporal_file, name, unit),
                           f"{name} in {unit}")


def test_time_unit_values_match_python_datetimes(temporal_file):
    """Independent of the stored counts: seconds since the epoch as Python computes them."""
    table = pq.read_table(temporal_file, columns=["ts_ms_utc", "ts_us_tokyo", "date32"])
    batches = load(temporal_file, columns=table.column_names, time_unit={
        "ts_ms_utc": "s", "ts_us_tokyo": "s", "date32": "D"})
    epoch = dt.datetime(1970, 1, 1, tzinfo=dt.timezone.utc)
    for name in ("ts_ms_utc", "ts_us_tokyo"):
        want = [(v - epoch) / dt.timedelta(seconds=1) for v in table.column(name).to_pylist()]
        # Time zones do not shift the instant: both are seconds since 1970-01-01T00:00Z.
        np.testing.assert_allclose(column(batches, name), want, rtol=0, atol=1e-6)
    want_days = [(v - dt.date(1970, 1, 1)).days for v in table.column("date32").to_pylist()]
    assert column(batches, "date32").tolist() == want_days


def test_nanosecond_timestamps_need_allow_lossy_cast_and_the_error_says_so(temporal_file):
    with pytest.raises(LossyCastError) as err:
        load(temporal_file, columns=["ts_ns"], time_unit="s")
    message = str(err.value)
    assert "'ts_ns'" in message and "time_unit='s'" in message
    assert "allow_lossy_cast=True" in message and "statistics" in message
    batches = load(temporal_file, columns=["ts_ns"], time_unit="s", allow_lossy_cast=True)
    assert_bytes_equal(column(batches, "ts_ns"), expected_counts(temporal_file, "ts_ns", "s"))


def test_without_time_unit_temporal_columns_stay_int64_counts(temporal_file):
    table = pq.read_table(temporal_file, columns=["ts_us", "date32"])
    batches = load(temporal_file, columns=["ts_us", "date32"])
    assert_bytes_equal(column(batches, "ts_us"),
                       table.column("ts_us").cast(pa.int64()).to_numpy())
    assert_bytes_equal(column(batches, "date32"),
                       table.column("date32").cast(pa.int32()).to_numpy().astype(np.int64))


def test_time_unit_per_column_and_column_info(temporal_file):
    with stoker.Loader(temporal_file, columns=["ts_us", "date32", "x"],
                       time_unit={"ts_us": "h"}, shuffle=False, batch_size=10) as loader:
        info = loader.columns
        batch = next(iter(loader))
    assert info["ts_us"].dtype == "float64" and info["ts_us"].kind == "dense"
    assert info["ts_us"].annotation == "timestamp[us] in h since 1970-01-01"
    assert info["date32"].dtype == "int64" and info["date32"].annotation == "date32[day]"
    assert batch["ts_us"].dtype == np.float64 and batch["date32"].dtype == np.int64


def test_temporal_features_with_time_unit(temporal_file):
    table = pq.read_table(temporal_file)
    # Days of a date are integers well below 2**24: exact in float32, no allow_lossy_cast.
    batches = load(temporal_file, features=["date32", "date64"], time_unit="D")
    got = column(batches, "features")
    assert got.dtype == np.float32 and got.shape == (N, 2)
    want = np.stack([expected_counts(temporal_file, c, "D") for c in ("date32", "date64")], 1)
    assert_bytes_equal(got, want.astype(np.float32))
    # Seconds since the epoch as float64 features.
    batches = load(temporal_file, features=["ts_ms", "x"], time_unit={"ts_ms": "s"},
                   features_dtype="float64")
    want = np.stack([expected_counts(temporal_file, "ts_ms", "s"),
                     table.column("x").to_numpy()], 1)
    assert_bytes_equal(column(batches, "features"), want)


def test_temporal_feature_into_float32_names_time_unit_and_allow_lossy_cast(temporal_file):
    # Without time_unit: raw microseconds into float32, the error points at time_unit.
    with pytest.raises(LossyCastError) as err:
        load(temporal_file, features=["ts_us"])
    assert "time_unit={'ts_us': 's'}" in str(err.value)
    # With it, float64 seconds still do not fit float32 exactly: allow_lossy_cast or float64.
    with pytest.raises(LossyCastError) as err:
        load(temporal_file, features=["ts_us"], time_unit="s")
    assert "allow_lossy_cast" in str(err.value) and "features_dtype" in str(err.value)
    got = column(load(temporal_file, features=["ts_us"], time_unit="s", allow_lossy_cast=True),
                 "features")
    assert_bytes_equal(got[:, 0], expected_counts(temporal_file, "ts_us", "s").astype(np.float32))


def test_time_unit_with_nulls_fill_null_and_mask(temporal_file):
    table = pq.read_table(temporal_file, columns=["ts_us_nulls"])
    valid = table.column("ts_us_nulls").is_valid().to_numpy(zero_copy_only=False)
    want = expected_counts(temporal_file, "ts_us_nulls", "s")
    got = column(load(temporal_file, columns=["ts_us_nulls"], time_unit="s", fill_null=-1.5),
                 "ts_us_nulls")
    assert_bytes_equal(got, np.where(valid, want, -1.5))
    batches = load(temporal_file, columns=["ts_us_nulls"], time_unit="s", null_mask=True)
    assert column(batches, "ts_us_nulls_mask").tolist() == valid.tolist()
    assert_bytes_equal(column(batches, "ts_us_nulls")[valid], want[valid])


def test_time_unit_changes_the_fingerprint_and_the_cache_entry(temporal_file, tmp_path):
    cache = str(tmp_path / "cache")
    fingerprints = set()
    for unit in ("s", "ms", None):
        for _ in range(2):  # a cold then a warm epoch from the same cache folder
            with stoker.Loader(temporal_file, columns=["ts_ms"], time_unit=unit, shuffle=False,
                               drop_last=False, batch_size=64, cache_dir=cache) as loader:
                got = column(list(loader), "ts_ms")
                fingerprints.add(loader.state_dict()["fingerprint"])
            want = (expected_counts(temporal_file, "ts_ms", unit) if unit else
                    pq.read_table(temporal_file).column("ts_ms").cast(pa.int64()).to_numpy())
            assert_bytes_equal(got, want, f"time_unit={unit}")
    assert len(fingerprints) == 3


def test_bad_time_unit_names_the_option(temporal_file):
    with pytest.raises(InvalidOptionError, match="time_unit"):
        load(temporal_file, columns=["ts_us"], time_unit="sec")
    with pytest.raises(InvalidOptionError, match=r"time_unit\['ts_us'\]"):
        load(temporal_file, columns=["ts_us"], time_unit={"ts_us": "weeks"})
    with pytest.raises(InvalidOptionError, match="time_unit names column 'nope'"):
        load(temporal_file, columns=["ts_us"], time_unit={"nope": "s"})
    with pytest.raises(InvalidOptionError, match=r"time_unit names column 'x' \(double\)"):
        load(temporal_file, features=["x"], time_unit={"x": "s"})
    with pytest.raises(InvalidOptionError, match=r"decimals names column 'x' \(double\)"):
        load(temporal_file, columns=["x"], decimals={"x": "float64"})
    # For all columns, the option applies where it fits and leaves the others alone.
    batches = load(temporal_file, columns=["x", "ts_s"], time_unit="s", decimals="float64",
                   lists={"x": "padded"})
    assert column(batches, "x").dtype == np.float64 and column(batches, "ts_s").dtype == np.float64


# ------------------------------------------------------------------------------ decimals

PRECISIONS = [(5, 2), (12, 3), (18, 4), (38, 10)]


def decimal_values(precision: int, scale: int, n: int) -> List[Any]:
    rng = np.random.default_rng(precision)
    out = []
    for i in range(n):
        if i % 11 == 5:
            out.append(None)
            continue
        digits = "".join(str(d) for d in rng.integers(0, 10, precision))
        sign = "-" if i % 3 == 0 else ""
        out.append(decimal.Decimal(f"{sign}{digits[:precision - scale]}.{digits[precision - scale:]}"))
    # The extremes of the type.
    out[1] = decimal.Decimal("9" * (precision - scale) + "." + "9" * scale)
    out[2] = out[1].copy_negate()  # exact (unary minus would round to the context's 28 digits)
    return out


@pytest.fixture(scope="module", params=["integer", "fixed_len_byte_array"])
def decimal_file(request, tmp_path_factory):
    """decimal128 of precision 5, 12, 18 and 38, stored as Spark and Impala do: int32/int64
    for small precisions (store_decimal_as_integer), else fixed-length byte arrays."""
    cols = {f"d{p}": pa.array(decimal_values(p, s, N), pa.decimal128(p, s))
            for p, s in PRECISIONS}
    path = str(tmp_path_factory.mktemp("decimals") / f"{request.param}.parquet")
    pq.write_table(pa.table(cols), path, row_group_size=ROW_GROUP,
                   store_decimal_as_integer=request.param == "integer")
    physical = {pq.ParquetFile(path).schema.column(i).physical_type for i in range(len(cols))}
    want = ({"INT32", "INT64", "FIXED_LEN_BYTE_ARRAY"} if request.param == "integer"
            else {"FIXED_LEN_BYTE_ARRAY"})
    assert physical == want
    return path


def decimals_of(path: str, name: str) -> List[Any]:
    return pq.read_table(path, columns=[name]).column(name).to_pylist()


def test_decimals_without_the_option_name_it(decimal_file):
    with pytest.raises(UnsupportedTypeError) as err:
        load(decimal_file, columns=["d12"])
    assert "'d12'" in str(err.value) and "decimals={'d12': 'float64'}" in str(err.value)


@pytest.mark.parametrize("name", ["d5", "d12"])
def test_decimals_float64_exact_up_to_precision_15(decimal_file, name):
    got = column(load(decimal_file, columns=[name], decimals="float64", fill_null=0), name)
    want = np.array([float(v) if v is not None else 0.0 for v in decimals_of(decimal_file, name)])
    assert_bytes_equal(got, want, name)


@pytest.mark.parametrize("name", ["d18", "d38"])
def test_decimals_float64_above_precision_15_needs_allow_lossy_cast(decimal_file, name):
    with pytest.raises(LossyCastError) as err:
        load(decimal_file, columns=[name], decimals="float64")
    assert f"'{name}'" in str(err.value) and "allow_lossy_cast=True" in str(err.value)
    got = column(load(decimal_file, columns=[name], decimals="float64", allow_lossy_cast=True,
                      fill_null=0), name)
    want = np.array([float(v) if v is not None else 0.0 for v in decimals_of(decimal_file, name)])
    np.testing.assert_allclose(got, want, rtol=2**-52, atol=0)


def test_decimals_float32(decimal_file):
    # Precision 5 is exact in float32: the float64 value rounded to float32.
    got = column(load(decimal_file, columns=["d5"], decimals="float32", fill_null=0), "d5")
    want = np.array([float(v) if v is not None else 0.0 for v in decimals_of(decimal_file, "d5")])
    assert_bytes_equal(got, want.astype(np.float32))
    with pytest.raises(LossyCastError, match=r"decimals='float32' for column 'd12'"):
        load(decimal_file, columns=["d12"], decimals="float32")
    got = column(load(decimal_file, columns=["d12"], decimals={"d12": "float32"},
                      allow_lossy_cast=True, fill_null=0), "d12")
    want = np.array([float(v) if v is not None else 0.0 for v in decimals_of(decimal_file, "d12")])
    assert_bytes_equal(got, want.astype(np.float32))


@pytest.mark.parametrize("name", ["d5", "d12", "d18"])
def test_decimals_scaled_int64_is_the_unscaled_integer(decimal_file, name):
    batches = load(decimal_file, columns=[name], decimals="scaled_int64", null_mask=True)
    values = decimals_of(decimal_file, name)
    scale = dict((f"d{p}", s) for p, s in PRECISIONS)[name]
    valid = np.array([v is not None for v in values])
    want = np.array([unscaled(v, scale) if v is not None else 0 for v in values], np.int64)
    assert column(batches, f"{name}_mask").tolist() == valid.tolist()
    assert_bytes_equal(column(batches, name), want)


def test_decimals_scaled_int64_refuses_precision_38_naming_the_column(decimal_file):
    with pytest.raises(InvalidOptionError) as err:
        load(decimal_file, columns=["d38"], decimals="scaled_int64", allow_lossy_cast=True)
    assert "'d38'" in str(err.value) and "precision 38" in str(err.value)


def test_decimal_features(decimal_file):
    batches = load(decimal_file, features=["d5", "d12"], decimals="float64",
                   features_dtype="float64", fill_null=0)
    want = np.stack([[float(v) if v is not None else 0.0 for v in decimals_of(decimal_file, c)]
                     for c in ("d5", "d12")], 1)
    assert_bytes_equal(column(batches, "features"), want)
    # Precision 5 stacks into float32 exactly; precision 12 would round.
    got = column(load(decimal_file, features=["d5"], decimals="float64", fill_null=0), "features")
    assert_bytes_equal(got[:, 0], want[:, 0].astype(np.float32))
    with pytest.raises(LossyCastError):
        load(decimal_file, features=["d12"], decimals="float64", fill_null=0)


def test_decimal256(tmp_path):
    values = [decimal.Decimal("1234567890123456789012345678901234567.891"), None,
              decimal.Decimal("-0.001")] * 30
    path = str(tmp_path / "d256.parquet")
    pq.write_table(pa.table({"big": pa.array(values, pa.decimal256(40, 3))}), path)
    got = column(load(path, decimals="float64", allow_lossy_cast=True, fill_null=0), "big")
    want = [float(v) if v is not None else 0.0 for v in values]
    np.testing.assert_allclose(got, want, rtol=2**-52, atol=0)


# ------------------------------------------------------------------------------ float16

def test_float16_columns_and_features(tmp_path):
    values = np.array([0.5, -2.0, 65504.0, 6e-8, np.inf, -0.0, np.nan] * 20, np.float16)
    path = str(tmp_path / "half.parquet")
    pq.write_table(pa.table({"h": pa.array(values, pa.float16())}), path, row_group_size=32)
    with stoker.Loader(path, shuffle=False, batch_size=len(values)) as loader:
        assert loader.columns["h"].dtype == "float16"
        assert_bytes_equal(next(iter(loader))["h"], values)
    torch = pytest.importorskip("torch")
    with stoker.Loader(path, shuffle=False, batch_size=len(values), output="torch") as loader:
        got = next(iter(loader))["h"]
    assert got.dtype == torch.float16
    assert_bytes_equal(got.numpy(), values)
    features = column(load(path, features=["h"], batch_size=7), "features")
    assert_bytes_equal(features[:, 0], values.astype(np.float32))


# ------------------------------------------------------------------------------ all problems at once

_TS_BASE_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z


@pytest.fixture(scope="module")
def mixed_file(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("mixed") / "m.parquet")
    table = pa.table({
        "a": pa.array([1, 2, 3], pa.int64()),
        "tags": pa.array([[1], [2, 3], []], pa.list_(pa.int32())),
        "price": pa.array([decimal.Decimal("1.5")] * 3, pa.decimal128(7, 2)),
        # Realistic microsecond timestamps and a uint64 beyond 2**53: the footers' statistics
        # show that stacking either into float32 loses information.
        "ts": pa.array([_TS_BASE_US + k for k in (1, 2, 3)], pa.timestamp("us")),
        "big": pa.array([1, 2, 2**60], pa.uint64()),
        "n": pa.array([1.0, None, 3.0]),
        "s": pa.array(["x", None, "z"]),
    })
    pq.write_table(table, path)
    return path


def test_construction_reports_every_column_problem_at_once(mixed_file):
    with pytest.raises(ColumnNotFoundError) as err:
        stoker.Loader(mixed_file, columns=["nope", "tags", "price", "a", "missing"],
                      features=["ts", "big"])
    message = str(err.value)
    lines = message.splitlines()
    assert lines[0].startswith("6 problems with the requested columns")
    problems = lines[1:]
    assert len(problems) == 6 and all(line.startswith("  - ") for line in problems)
    # One line per column, in the order asked for, each naming the option that fixes it.
    expected = [("'nope'", "available columns"), ("'tags'", "lists={'tags': 'padded'}"),
                ("'price'", "decimals={'price': 'float64'}"), ("'missing'", "available columns"),
                ("'ts'", "time_unit={'ts': 's'}"), ("'big'", "allow_lossy_cast=True")]
    for line, (column_name, fix) in zip(problems, expected):
        assert column_name in line and fix in line, line


def test_several_problems_keep_the_first_problems_type(mixed_file):
    with pytest.raises(UnsupportedTypeError) as err:
        stoker.Loader(mixed_file, columns=["tags", "price"], features=["big"])
    assert str(err.value).startswith("3 problems")
    # Columns come before features; here the first problem is a feature's lossy cast.
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(mixed_file, columns=["a"], features=["big", "price", "nope"])
    assert str(err.value).startswith("3 problems")
    # One problem alone keeps its own message.
    with pytest.raises(UnsupportedTypeError) as err:
        stoker.Loader(mixed_file, columns=["tags", "a"])
    assert "problems" not in str(err.value) and "'tags'" in str(err.value)


def test_fixing_every_listed_problem_opens(mixed_file):
    with stoker.Loader(mixed_file, columns=["tags", "price", "a"], features=["ts", "big"],
                       lists={"tags": "padded"}, decimals="float64", time_unit="s",
                       features_dtype="float64", allow_lossy_cast=True, shuffle=False,
                       batch_size=3) as loader:
        batch = next(iter(loader))
    assert batch["price"].tolist() == [1.5, 1.5, 1.5]
    assert batch["features"][:, 0].tolist() == pytest.approx(
        [(_TS_BASE_US + k) / 1e6 for k in (1, 2, 3)], abs=1e-6)


def test_a_failing_open_also_lists_the_nulls_the_footers_show(mixed_file):
    with pytest.raises(ColumnNotFoundError) as err:
        stoker.Loader(mixed_file, columns=["nope", "n", "s", "a"], batch_size=3)
    lines = str(err.value).splitlines()
    assert lines[0].startswith("3 problems")
    assert "'n' has 1 null(s)" in lines[2] and "fill_null={'n': value}" in lines[2]
    # Strings take only the mask.
    assert "'s' has 1 null(s)" in lines[3] and "null_mask=['s']" in lines[3]
    assert "fill_null=" not in lines[3]  # strings take the mask only
    # A stacked feature takes a fill value or its group's mask (never a per-column mask).
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(mixed_file, features=["big", "n"], features_dtype="float64", batch_size=3)
    line = str(err.value).splitlines()[2]
    assert "feature column 'n' has 1 null(s)" in line and "fill_null={'n': value}" in line
    assert "null_mask=['features']" in line and "null_mask=['n']" not in line
    # Covered nulls are no problem; alone, nulls are found per row group during iteration.
    with pytest.raises(ColumnNotFoundError) as err:
        stoker.Loader(mixed_file, columns=["nope", "n"], fill_null=0, batch_size=3)
    assert "problems" not in str(err.value)
    loader = stoker.Loader(mixed_file, columns=["n"], batch_size=3)
    with pytest.raises(stoker.errors.NullValueError, match="row group 0"):
        list(loader)
    loader.close()


# ------------------------------------------------------------------------------ loader.columns

def test_column_info_repr_and_kind_strings(mixed_file):
    with stoker.Loader(mixed_file, columns=["a", "tags", "price"], lists={"tags": "ragged"},
                       decimals="float64", batch_size=3) as loader:
        info = loader.columns
    assert info["a"].kind == "dense" and info["tags"].kind == "ragged"
    assert info["a"].kind != "ragged" and "dense" == info["a"].kind
    assert info["a"].kind == stoker._stoker.ColumnKind.dense  # the enum still compares
    assert {info["a"].kind: 1}["dense"] == 1  # hashes like its name
    text = repr(info["price"])
    assert text == ("ColumnInfo(name='price', kind='dense', dtype='float64', shape=(), "
                    "arrow_type='decimal128(7, 2)', annotation='decimal128(7, 2) as float64')")
    assert "0x" not in repr(info["tags"]) and "kind='ragged'" in repr(info["tags"])


# ------------------------------------------------------------------------------ storage_options

def test_storage_options_on_a_local_path_raise_naming_the_option(mixed_file):
    with pytest.raises(InvalidOptionError) as err:
        stoker.Loader(mixed_file, storage_options={"region": "us-east-1"})
    assert "storage_options" in str(err.value) and "region" in str(err.value)
    with pytest.raises(InvalidOptionError, match="storage_options"):
        stoker.describe(mixed_file, storage_options={"anonymous": True})
    # An empty dict is what code that always passes one gives: allowed.
    with stoker.Loader(mixed_file, columns=["a"], storage_options={}, batch_size=3) as loader:
        assert len(loader) == 1


# ------------------------------------------------------------------------------ other writers

def test_duckdb_decimals_and_timestamps(write_duckdb):
    """DuckDB's own writer: DECIMAL(4,1) as INT32, (18,3) as INT64, (38,10) as a 16-byte
    FIXED_LEN_BYTE_ARRAY; TIMESTAMP (us), TIMESTAMPTZ and DATE."""
    path = write_duckdb("""
        SELECT ((i * 7 % 2000 - 1000) / 10)::DECIMAL(4,1) AS d4,
               (i * 1234567.891 - 5e9)::DECIMAL(18,3) AS d18,
               ((i::HUGEINT * 12345678901234567)::DECIMAL(38,10)
                + 0.1234567891::DECIMAL(38,10))::DECIMAL(38,10) AS d38,
               TIMESTAMP '2024-03-01 12:00:00' + INTERVAL (i * 3607) SECOND AS ts,
               TIMESTAMPTZ '2024-03-01 12:00:00+00' + INTERVAL (i * 61) SECOND AS tstz,
               DATE '1960-01-01' + (i * 3)::INTEGER AS day
        FROM range(5000) t(i)""", row_group_size=2048)
    physical = {pq.ParquetFile(path).schema.column(i).name: pq.ParquetFile(path).schema.column(
        i).physical_type for i in range(6)}
    assert physical["d4"] == "INT32" and physical["d18"] == "INT64"
    assert physical["d38"] == "FIXED_LEN_BYTE_ARRAY"
    table = pq.read_table(path)
    batches = load(path, batch_size=333, decimals={"d4": "float64", "d18": "scaled_int64",
                                                   "d38": "float64"},
                   allow_lossy_cast=True, time_unit={"ts": "s", "tstz": "ms", "day": "D"})
    assert_bytes_equal(column(batches, "d4"),
                       np.array([float(v) for v in table.column("d4").to_pylist()]))
    assert_bytes_equal(column(batches, "d18"),
                       np.array([int(v.scaleb(3)) for v in table.column("d18").to_pylist()]))
    np.testing.assert_allclose(column(batches, "d38"),
                               [float(v) for v in table.column("d38").to_pylist()], rtol=2**-52)
    for name, unit in (("ts", "s"), ("tstz", "ms"), ("day", "D")):
        assert_bytes_equal(column(batches, name), expected_counts(path, name, unit), name)


def test_transforms_on_timestamps_take_time_unit(temporal_file):
    ops = [stoker.ops.standardize(mean=1.7e9, std=1e8)]
    with pytest.raises(UnsupportedTypeError, match=r"time_unit=\{'ts_us': 's'\}"):
        load(temporal_file, columns=["ts_us"], transforms={"ts_us": ops})
    batches = load(temporal_file, columns=["ts_us"], transforms={"ts_us": ops}, time_unit="s")
    seconds = expected_counts(temporal_file, "ts_us", "s")
    np.testing.assert_allclose(column(batches, "ts_us"), (seconds - 1.7e9) / 1e8, rtol=1e-5)


def unscaled(value: decimal.Decimal, scale: int) -> int:
    """value * 10**scale, exactly (the default context would round 38 digits to 28)."""
    with decimal.localcontext() as context:
        context.prec = 100
        return int(value.scaleb(scale))


def _zigzag_varint(value: int) -> bytes:
    value = (value << 1) ^ (value >> 63)
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def write_byte_array_decimals(path: str, columns: Dict[str, tuple]) -> None:
    """Decimals stored as BYTE_ARRAY (big-endian two's complement), as parquet-mr based writers
    (Hive, older Spark/Impala tooling) may write them, which pyarrow cannot: pyarrow writes plain
    binary columns, then each column's schema element in the footer (Thrift compact protocol) gets
    converted_type DECIMAL, scale and precision appended after its name."""
    arrays = {}
    for name, (values, precision, scale) in columns.items():
        rows = []
        for v in values:
            if v is None:
                rows.append(None)
                continue
            integer = unscaled(v, scale)
            width = max(1, (integer.bit_length() + 8) // 8)
            rows.append(integer.to_bytes(width, "big", signed=True))
        arrays[name] = pa.array(rows, pa.binary())
    pq.write_table(pa.table(arrays), path, store_schema=False, use_dictionary=False,
                   write_statistics=False, row_group_size=ROW_GROUP)
    data = open(path, "rb").read()
    length = int.from_bytes(data[-8:-4], "little")
    footer = data[-8 - length:-8]
    for name, (_, precision, scale) in columns.items():
        encoded = bytes([0x18, len(name)]) + name.encode()  # field 4 (name), after field 3
        at = footer.index(encoded) + len(encoded)
        assert footer[at] == 0, "the schema element should end after its name"
        extra = (bytes([0x25]) + _zigzag_varint(5) +  # field 6 converted_type = DECIMAL
                 bytes([0x15]) + _zigzag_varint(scale) +  # field 7 scale
                 bytes([0x15]) + _zigzag_varint(precision))  # field 8 precision
        footer = footer[:at] + extra + footer[at:]
    with open(path, "wb") as f:
        f.write(data[:-8 - length] + footer + len(footer).to_bytes(4, "little") + b"PAR1")


def test_byte_array_backed_decimals(tmp_path):
    path = str(tmp_path / "byte_array.parquet")
    columns = {f"b{p}": (decimal_values(p, s, N), p, s) for p, s in PRECISIONS}
    write_byte_array_decimals(path, columns)
    schema = pq.ParquetFile(path).schema
    assert {schema.column(i).physical_type for i in range(4)} == {"BYTE_ARRAY"}
    for name, (values, precision, scale) in columns.items():
        # pyarrow reads the patched file back as the decimals written.
        assert pq.read_table(path, columns=[name]).column(name).to_pylist() == values
        mode = "scaled_int64" if precision <= 18 else "float64"
        got = column(load(path, columns=[name], decimals=mode, allow_lossy_cast=True,
                          fill_null=0), name)
        if mode == "scaled_int64":
            want = np.array([unscaled(v, scale) if v is not None else 0 for v in values])
            assert_bytes_equal(got, want, name)
        else:
            want = np.array([float(v) if v is not None else 0.0 for v in values])
            np.testing.assert_allclose(got, want, rtol=2**-52, atol=0)
    got = column(load(path, columns=["b12"], decimals="float64", fill_null=0), "b12")
    assert_bytes_equal(got, np.array([float(v) if v is not None else 0.0
                                      for v in columns["b12"][0]]))


# ------------------------------------------------------------------------------ lists

def test_lists_of_timestamps_and_decimals(tmp_path):
    rng = np.random.default_rng(3)
    lengths = rng.integers(0, 4, N)
    stamps = [None if i % 13 == 4 else [int(v) for v in rng.integers(-10**12, 2 * 10**12, k)]
              for i, k in enumerate(lengths)]
    prices = [[decimal.Decimal(int(v)).scaleb(-2) for v in rng.integers(-10**6, 10**6, k)]
              for k in lengths]
    path = str(tmp_path / "lists.parquet")
    pq.write_table(pa.table({"ts": pa.array(stamps, pa.list_(pa.timestamp("ms"))),
                             "price": pa.array(prices, pa.list_(pa.decimal128(9, 2)))}),
                   path, row_group_size=ROW_GROUP)
    with pytest.raises(UnsupportedTypeError, match=r"time_unit=\{'ts': 's'\}"):
        load(path, columns=["ts"], lists="ragged")
    batches = load(path, lists={"ts": "ragged", "price": "padded"}, time_unit="s",
                   decimals="float64", null_mask=["ts"], pad_value={"price": -1})
    got = [row.tolist() for b in batches for row in
           (b["ts"].values[b["ts"].offsets[i]:b["ts"].offsets[i + 1]]
            for i in range(len(b["ts"].offsets) - 1))]
    assert got == [[v / 1000 for v in row] if row is not None else [] for row in stamps]
    assert column(batches, "ts_mask").tolist() == [row is not None for row in stamps]
    rows = [list(r[:n]) for b in batches for r, n in zip(b["price"], b["price_lengths"])]
    assert rows == [[float(v) for v in row] for row in prices]
    assert batches[0]["price"].dtype == np.float64


def test_time_unit_or_decimals_naming_a_partition_column_raise(tmp_path):
    """Partition values are integers or strings: a per-column time_unit or decimals for one would
    be ignored, so it is refused naming the column; a dataset-wide one simply does not apply."""
    root = tmp_path / "hive"
    (root / "day=3").mkdir(parents=True)
    pq.write_table(pa.table({"x": pa.array([1.0, 2.0])}), str(root / "day=3" / "p.parquet"))
    for option in ({"time_unit": {"day": "D"}}, {"decimals": {"day": "float64"}}):
        with pytest.raises(InvalidOptionError, match="partition column 'day'"):
            stoker.Loader(str(root), columns=["x", "day"], **option)
    with stoker.Loader(str(root), columns=["x", "day"], time_unit="s", decimals="float64",
                       shuffle=False, batch_size=2) as loader:
        assert next(iter(loader))["day"].tolist() == [3, 3]
