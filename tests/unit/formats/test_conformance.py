"""Conformance: files written by the writers people use, read by stoker and by pyarrow, compared
value for value.

Writers: pyarrow (format versions 1.0 / 2.4 / 2.6, data page v1 and v2, dictionary on, off and
falling back to plain through a tiny ``dictionary_pagesize_limit``, many small pages, every codec
Arrow has here), DuckDB (``COPY ... (FORMAT parquet)``), Polars (``write_parquet``), pandas (pyarrow
engine, fastparquet engine) and Spark (``local[2]``, one session for the module, started only when
a Spark case runs).

The reference is always pyarrow reading the very file stoker reads, so each writer's type mapping
(pandas turns an int column with nulls into float64, Spark has no unsigned ints, Polars writes
large strings) is part of the reference rather than something a case has to know. Every epoch is
read with ``shuffle=False`` and ``drop_last=False`` and a batch size that does not divide the row
groups, so batches cross row groups.

The suite is data-driven: ``TYPE_GROUPS`` builds one Arrow table per group of types, ``WRITERS``
writes a table with a writer's parameters, ``CASES`` pairs them (one ``(writer, params, group,
read options)`` row per case). Types being added by other work (timestamps, decimals, categoricals
as ids, structs, maps) are new rows of ``TYPE_GROUPS`` and ``CASES`` plus, where the batch entry
is new, a branch of ``check_column``.
"""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import CorruptFileError

pytestmark = pytest.mark.filterwarnings("ignore:The 'fastparquet' engine is deprecated")

N = 517  # rows of every table; row groups of 128 (or a writer's own) leave a short last one
ROW_GROUP = 128
BATCH = 77  # does not divide any row-group size used below
PAD = -3  # pad_value of padded lists (exact in every list value type used)


# ------------------------------------------------------------------------------ type groups

def _valid(n: int, seed: int, rate: float = 0.15) -> np.ndarray:
    rng = np.random.default_rng(seed)
    valid = rng.random(n) >= rate
    valid[:3] = [True, False, True]
    return valid


def _ints(n: int) -> pa.Table:
    cols = {}
    for k, name in enumerate(("int8", "int16", "int32", "int64", "uint8", "uint16", "uint32",
                              "uint64")):
        info = np.iinfo(name)
        span = int(info.max) - int(info.min) + 1
        walk = [int(info.min) + (i * 2654435761) % span for i in range(n - 2)]
        values = np.array([info.min, info.max] + walk, dtype=name)
        cols[name] = pa.array(values, mask=~_valid(n, k))
        cols[name + "_nonnull"] = pa.array(values[::-1].copy())
    return pa.table(cols)


def _floats(n: int) -> pa.Table:
    cols = {}
    for k, name in enumerate(("float32", "float64")):
        info = np.finfo(name)
        special = [0.0, -0.0, np.nan, np.inf, -np.inf, info.max, info.min, info.tiny, 1 / 3]
        rest = np.random.default_rng(k).standard_normal(n - len(special))
        values = np.concatenate([special, rest]).astype(name)
        cols[name] = pa.array(values, mask=~_valid(n, 10 + k))
        cols[name + "_nonnull"] = pa.array(values)
    return pa.table(cols)


def _bools(n: int) -> pa.Table:
    values = np.random.default_rng(3).random(n) < 0.4
    return pa.table({"bool": pa.array(values, mask=~_valid(n, 20)),
                     "bool_nonnull": pa.array(values)})


TEXTS = ["", "a", "héllo wörld", "日本語", "x" * 300, "tab\tnew\nline", "\x00nul", "😀"]


def _strings(n: int) -> pa.Table:
    high = [TEXTS[i % len(TEXTS)] + str(i) * (i % 4) for i in range(n)]  # many distinct values
    low = [TEXTS[i % 3] for i in range(n)]  # few distinct values: stays dictionary-encoded
    return pa.table({"string": pa.array(high, mask=~_valid(n, 30)),
                     "string_low": pa.array(low, mask=~_valid(n, 31)),
                     "string_nonnull": pa.array(high[::-1])})


def _binary(n: int) -> pa.Table:
    values = [bytes(range(i % 11)) + b"\x00\xff" * (i % 3) for i in range(n)]
    return pa.table({"binary": pa.array(values, pa.binary(), mask=~_valid(n, 40)),
                     "binary_nonnull": pa.array(values, pa.binary())})


def _lists(n: int) -> pa.Table:
    lengths = [(i * 7) % 6 for i in range(n)]  # includes empty lists
    valid = _valid(n, 50)
    return pa.table({
        "list_i32": pa.array([list(range(i, i + k)) for i, k in enumerate(lengths)],
                             pa.list_(pa.int32()), mask=~valid),
        "list_i64": pa.array([[i * 10**12 + j for j in range(k)] for i, k in enumerate(lengths)],
                             pa.list_(pa.int64())),
        "list_f64": pa.array([[i / 4] * k for i, k in enumerate(lengths)],
                             pa.list_(pa.float64()), mask=~_valid(n, 51)),
        "list_f32": pa.array([np.full(k, i / 8, np.float32) for i, k in enumerate(lengths)],
                             pa.list_(pa.float32())),
    })


def _dict_strings(n: int) -> pa.Table:
    # pandas "category" and Arrow dictionary columns: delivered as their values today.
    words = ["red", "green", "blue", "", "ünïcode"]
    return pa.table({"dict_string": pa.array([words[i % 5] for i in range(n)],
                                             mask=~_valid(n, 60)).dictionary_encode()})


TYPE_GROUPS: Dict[str, Callable[[int], pa.Table]] = {
    "ints": _ints, "floats": _floats, "bool": _bools, "strings": _strings, "binary": _binary,
    "lists": _lists, "dict_strings": _dict_strings,
}


def _all(n: int) -> pa.Table:
    tables = [TYPE_GROUPS[g](n) for g in SCALAR_GROUPS]
    cols = {name: t.column(name) for t in tables for name in t.column_names}
    return pa.table(cols)


def _float16(n: int) -> pa.Table:
    # Only pyarrow writes Parquet FLOAT16 here; not part of "all" (the other writers' table).
    values = np.concatenate([np.array([0, -0.0, np.nan, np.inf, -np.inf, 65504, 6e-8], np.float16),
                             np.arange(n - 7, dtype=np.float16) / 8])
    return pa.table({"float16": pa.array(values, mask=~_valid(n, 70)),
                     "float16_nonnull": pa.array(values)})


SCALAR_GROUPS = tuple(TYPE_GROUPS)  # the groups of "all"
TYPE_GROUPS["all"] = _all
TYPE_GROUPS["float16"] = _float16


# ----------------------------------------------------------------------------------- writers

def write_pyarrow(table: pa.Table, path: str, params: Dict[str, Any]) -> None:
    params = dict(params)
    empty = params.pop("empty_row_groups", False)
    params.setdefault("row_group_size", ROW_GROUP)
    if not empty:
        pq.write_table(table, path, **params)
        return
    # Empty row groups between and around the real ones (a writer flushing an empty batch).
    rgs = params.pop("row_group_size")
    with pq.ParquetWriter(path, table.schema, **params) as writer:
        writer.write_table(table.slice(0, 0))
        for start in range(0, len(table), rgs):
            writer.write_table(table.slice(start, rgs))
            writer.write_table(table.slice(0, 0))
    meta = pq.ParquetFile(path).metadata
    assert any(meta.row_group(r).num_rows == 0 for r in range(meta.num_row_groups)), \
        "pyarrow no longer writes empty row groups; the case tests nothing"


def write_duckdb(table: pa.Table, path: str, params: Dict[str, Any]) -> None:
    duckdb = pytest.importorskip("duckdb")
    options = ", ".join(f"{k} {v}" for k, v in params.items())
    con = duckdb.connect()
    try:
        con.register("t", table)
        con.execute(f"COPY t TO '{path}' (FORMAT parquet{', ' + options if options else ''})")
    finally:
        con.close()


def write_polars(table: pa.Table, path: str, params: Dict[str, Any]) -> None:
    pl = pytest.importorskip("polars")
    pl.from_arrow(table).write_parquet(path, **params)


def write_pandas(table: pa.Table, path: str, params: Dict[str, Any]) -> None:
    pd = pytest.importorskip("pandas")
    params = dict(params)
    engine = params.pop("engine")
    if engine == "fastparquet":
        pytest.importorskip("fastparquet")
    if params.pop("arrow_dtypes", False):
        df = table.to_pandas(types_mapper=pd.ArrowDtype)
    else:
        # What a pandas user has: ints with nulls become float64, strings objects or str.
        df = table.to_pandas()
    df.to_parquet(path, engine=engine, **params)


@dataclass
class Spark:
    session: Any = None
    folder: str = ""


_SPARK = Spark()


def _spark_missing() -> str:
    import petastorm_fixtures

    return petastorm_fixtures.spark_missing()


def _spark_session():
    """One local[2] session for the module, started by tests/petastorm_fixtures.py's helper (kept
    small; its Python workers load Petastorm's shims). The JVM outlives ``stop()`` and later
    sessions in this process (tests/system/test_petastorm_spark.py) inherit its environment, so it
    must be started the same way here."""
    if _SPARK.session is None:
        import petastorm_fixtures

        _SPARK.folder = tempfile.mkdtemp(prefix="stoker-conformance-spark-")
        _SPARK.session = petastorm_fixtures.spark_session(_SPARK.folder)
    return _SPARK.session


def _spark_type(t: pa.DataType):
    from pyspark.sql import types as T

    simple = {pa.int8(): T.ByteType(), pa.int16(): T.ShortType(), pa.int32(): T.IntegerType(),
              pa.int64(): T.LongType(), pa.uint8(): T.ShortType(), pa.uint16(): T.IntegerType(),
              pa.uint32(): T.LongType(), pa.float32(): T.FloatType(),
              pa.float64(): T.DoubleType(), pa.bool_(): T.BooleanType(),
              pa.string(): T.StringType(), pa.binary(): T.BinaryType()}
    if pa.types.is_dictionary(t):
        t = t.value_type
    if pa.types.is_list(t):
        inner = _spark_type(t.value_type)
        return None if inner is None else T.ArrayType(inner, containsNull=False)
    return simple.get(t)  # uint64 has no Spark type: the column is left out


def write_spark(table: pa.Table, path: str, params: Dict[str, Any]) -> None:
    from pyspark.sql import types as T

    spark = _spark_session()
    fields, names = [], []
    for f in table.schema:
        st = _spark_type(f.type)
        if st is not None:
            fields.append(T.StructField(f.name, st, True))
            names.append(f.name)
    rows = table.select(names).to_pylist()
    data = [tuple(r[n] for n in names) for r in rows]
    df = spark.createDataFrame(data, T.StructType(fields), verifySchema=False)
    save_spark(df, path, params)


def save_spark(df: Any, path: str, params: Dict[str, Any]) -> None:
    """Writes a Spark DataFrame as the one Parquet file `path` (one partition, Spark's writer)."""
    out = path + ".spark"
    writer = df.coalesce(1).write.mode("overwrite")
    for key, value in params.items():
        writer = writer.option(key, value)
    writer.parquet("file://" + out)
    parts = sorted(glob.glob(os.path.join(out, "part-*.parquet")))
    assert len(parts) == 1, parts
    shutil.move(parts[0], path)
    shutil.rmtree(out)


WRITERS: Dict[str, Callable[[pa.Table, str, Dict[str, Any]], None]] = {
    "pyarrow": write_pyarrow, "duckdb": write_duckdb, "polars": write_polars,
    "pandas": write_pandas, "spark": write_spark,
}


# ------------------------------------------------------------------------------------- cases

@dataclass
class Case:
    writer: str
    group: str
    params: Dict[str, Any] = field(default_factory=dict)
    nulls: str = "mask"  # "mask": null_mask=True; "fill": fill_null for scalars (+ mask others)
    lists: str = "ragged"
    name: str = ""
    rows: int = N

    def id(self) -> str:
        extra = self.name or "-".join(f"{k}={v}" for k, v in self.params.items()) or "default"
        return f"{self.writer}-{self.group}-{extra}-{self.nulls}-{self.lists}"


CODECS = ("none", "snappy", "gzip", "brotli", "zstd", "lz4")

CASES: List[Case] = []
# pyarrow: every type group under each format option that changes the encoding.
for _group in SCALAR_GROUPS + ("float16",):
    for _params, _name in (
            ({}, "default"),
            ({"version": "1.0"}, "format1.0"),
            ({"version": "2.4", "data_page_version": "2.0"}, "format2.4-pagev2"),
            ({"version": "2.6", "use_dictionary": False}, "format2.6-nodict"),
            ({"dictionary_pagesize_limit": 64}, "dictfallback"),
            ({"data_page_size": 64, "write_batch_size": 8, "compression": "zstd"}, "manypages"),
            ({"data_page_size": 64, "write_batch_size": 8, "data_page_version": "2.0",
              "dictionary_pagesize_limit": 128}, "manypages-pagev2-dictfallback"),
            ({"empty_row_groups": True}, "emptyrowgroups")):
        CASES.append(Case("pyarrow", _group, _params, name=_name))
    CASES.append(Case("pyarrow", _group, {}, nulls="fill", lists="padded", name="default"))
for _codec in CODECS:
    for _page in ("1.0", "2.0"):
        CASES.append(Case("pyarrow", "all", {"compression": _codec, "data_page_version": _page},
                          name=f"{_codec}-page{_page}"))
CASES += [
    Case("pyarrow", "all", {"version": "2.6"}, nulls="fill", lists="padded", name="fill-padded"),
    Case("pyarrow", "lists", {"data_page_size": 64, "write_batch_size": 8}, lists="padded",
         name="manypages"),
]
# DuckDB: its own encoder (dictionary fallback at its own limit, v2 pages, zstd).
# Its row groups are whole multiples of 2048 rows, hence the larger tables.
for _group in ("all", "ints", "strings", "lists"):
    CASES.append(Case("duckdb", _group, {"ROW_GROUP_SIZE": 2048}, name="rg2048", rows=5000))
# V2 pages: DELTA_BINARY_PACKED ints, DELTA_LENGTH_BYTE_ARRAY strings. Full-range int32 columns
# are not in these cases: see test_duckdb_v2_full_range_int32_is_refused_by_both.
for _group in ("floats", "bool", "strings", "binary", "lists", "dict_strings"):
    CASES.append(Case("duckdb", _group, {"COMPRESSION": "zstd", "PARQUET_VERSION": "V2",
                                         "ROW_GROUP_SIZE": 2048}, name="zstd-v2", rows=5000))
CASES += [
    Case("duckdb", "all", {"COMPRESSION": "uncompressed"}, nulls="fill", lists="padded",
         name="uncompressed", rows=5000),
    Case("duckdb", "all", {"COMPRESSION": "gzip", "ROW_GROUP_SIZE": 2048}, name="gzip-rg2048",
         rows=3000),
    Case("duckdb", "all", {"COMPRESSION": "snappy", "ROW_GROUP_SIZE": 2048}, nulls="fill",
         lists="padded", name="snappy", rows=3000),
]
# Polars: its own writer (parquet2 lineage): large strings, v2-style pages.
for _group in ("all", "strings", "lists"):
    CASES.append(Case("polars", _group, {"row_group_size": 100}, name="rg100"))
CASES += [
    Case("polars", "all", {"compression": "uncompressed", "data_page_size": 256,
                           "row_group_size": 200}, name="uncompressed-smallpages"),
    Case("polars", "all", {"compression": "snappy", "statistics": False}, nulls="fill",
         lists="padded", name="snappy-nostats"),
]
# pandas: the default conversion (nullable ints become float64) and Arrow-backed dtypes.
for _group in ("ints", "floats", "bool", "strings", "binary", "lists", "dict_strings"):
    CASES.append(Case("pandas", _group, {"engine": "pyarrow"}, name="pyarrow"))
CASES += [
    Case("pandas", "all", {"engine": "pyarrow", "arrow_dtypes": True}, name="pyarrow-arrowdtype"),
    Case("pandas", "all", {"engine": "pyarrow", "arrow_dtypes": True}, nulls="fill",
         lists="padded", name="pyarrow-arrowdtype"),
]
# fastparquet writes no lists from pandas object columns; its own encoder for the rest.
for _group in ("ints", "floats", "bool", "strings", "binary", "dict_strings"):
    CASES.append(Case("pandas", _group, {"engine": "fastparquet"}, name="fastparquet"))
CASES += [
    Case("pandas", "ints", {"engine": "fastparquet", "compression": "GZIP",
                            "row_group_offsets": 100}, name="fastparquet-gzip-rg100"),
    Case("pandas", "strings", {"engine": "fastparquet", "compression": "SNAPPY",
                               "row_group_offsets": 100}, nulls="fill",
         name="fastparquet-snappy-rg100"),
]
# Spark (parquet-mr): one file per case from a single local session.
CASES += [
    Case("spark", "all", {"compression": "snappy"}, name="snappy"),
    Case("spark", "all", {"compression": "zstd", "parquet.writer.version": "v2",
                          "parquet.enable.dictionary": "false"}, name="zstd-v2-nodict"),
    Case("spark", "all", {"compression": "gzip", "parquet.page.size": "256",
                          "parquet.dictionary.page.size": "128", "parquet.block.size": "4096"},
         nulls="fill", lists="padded", name="gzip-smallpages-dictfallback"),
]


# --------------------------------------------------------------------------------- checking

def _is_string(t: pa.DataType) -> bool:
    return (pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t) or
            pa.types.is_large_binary(t) or pa.types.is_string_view(t) or
            pa.types.is_binary_view(t))


def _is_list(t: pa.DataType) -> bool:
    return pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_list_view(t)


def _values(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


FILL = {"int": 7, "float": -1.5, "bool": True}


def _fill_for(t: pa.DataType) -> Any:
    t = _values(t)
    if pa.types.is_boolean(t):
        return FILL["bool"]
    if pa.types.is_floating(t):
        return FILL["float"]
    return FILL["int"]


def read_options(case: Case, table: pa.Table) -> Dict[str, Any]:
    options: Dict[str, Any] = dict(shuffle=False, drop_last=False, batch_size=BATCH,
                                   lists=case.lists, pad_value=PAD)
    if case.nulls == "mask":
        options["null_mask"] = True
        return options
    fill, mask = {}, []
    for f in table.schema:
        if table.column(f.name).null_count == 0:
            continue
        t = _values(f.type)
        if _is_string(t) or _is_list(t):
            mask.append(f.name)  # fill_null does not apply there: a mask is the only choice
        else:
            fill[f.name] = _fill_for(t)
    options["fill_null"] = fill
    options["null_mask"] = mask
    return options


def _ragged_rows(value: Any) -> list:
    values, offsets = np.asarray(value.values), np.asarray(value.offsets)
    return [values[offsets[i]:offsets[i + 1]] for i in range(len(offsets) - 1)]


def assert_bytes_equal(got: Any, want: np.ndarray, what: str) -> None:
    got = np.asarray(got)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype} != {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    np.testing.assert_array_equal(got, want, err_msg=what)
    assert np.ascontiguousarray(got).tobytes() == np.ascontiguousarray(want).tobytes(), what


def check_column(batches: List[Dict[str, Any]], name: str, col: pa.ChunkedArray,
                 options: Dict[str, Any]) -> None:
    """One column of a whole epoch against pyarrow's read of the same file."""
    t = _values(col.type)
    if pa.types.is_dictionary(col.type):
        col = col.cast(t)
    masked = options.get("null_mask") is True or name in (options.get("null_mask") or ())
    fill = (options.get("fill_null") or {}).get(name)
    valid = col.is_valid().to_numpy(zero_copy_only=False)
    if masked:
        got_mask = np.concatenate([np.asarray(b[name + "_mask"]) for b in batches])
        assert_bytes_equal(got_mask, valid, name + "_mask")
    else:
        assert all(name + "_mask" not in b for b in batches), name
    if _is_string(t):
        want = col.cast(pa.large_binary()).to_pylist()
        got = []
        for b in batches:
            value = b[name]
            assert isinstance(value, stoker.Ragged), name
            binary = (pa.types.is_binary(t) or pa.types.is_large_binary(t) or
                      pa.types.is_binary_view(t))
            assert value.kind == ("binary" if binary else "utf8"), name
            got += [r.tobytes() for r in _ragged_rows(value)]
        assert got == [b"" if v is None else v for v in want], name
        return
    if _is_list(t):
        dtype = np.dtype(t.value_type.to_pandas_dtype())
        rows = [[] if r is None else r for r in col.to_pylist()]
        start = 0
        for i, b in enumerate(batches):
            value = b[name]
            count = len(b[name + "_lengths"]) if options["lists"] == "padded" else len(value)
            want_rows = rows[start:start + count]
            if options["lists"] == "ragged":
                assert isinstance(value, stoker.Ragged) and value.kind == "list", name
                flat = np.array([v for r in want_rows for v in r], dtype=dtype)
                assert_bytes_equal(value.values, flat, f"{name} batch {i}")
                offsets = np.concatenate([[0], np.cumsum([len(r) for r in want_rows])])
                assert_bytes_equal(value.offsets, offsets.astype(np.int64), f"{name} batch {i}")
            else:
                longest = max((len(r) for r in want_rows), default=0)
                want = np.full((count, longest), options["pad_value"], dtype=dtype)
                for r, row in enumerate(want_rows):
                    want[r, :len(row)] = np.array(row, dtype=dtype)
                assert_bytes_equal(value, want, f"{name} batch {i}")
                assert_bytes_equal(b[name + "_lengths"],
                                   np.array([len(r) for r in want_rows], np.int64), name)
            start += count
        assert start == len(col), name
        return
    # Scalars: null rows hold zero, or the fill_null value.
    zero = False if pa.types.is_boolean(t) else 0
    want = col.fill_null(pa.scalar(zero if fill is None else fill, t)).to_numpy(
        zero_copy_only=False)
    got = np.concatenate([np.asarray(b[name]) for b in batches])
    assert_bytes_equal(got, want, name)


def check_file(path: str, options: Dict[str, Any]) -> None:
    """Every column stoker delivers equals pyarrow's read of the same file."""
    want = pq.read_table(path)
    with stoker.Loader(path, **options) as loader:
        assert list(loader.columns) == want.column_names
        batches = list(loader)
    for name in want.column_names:
        check_column(batches, name, want.column(name), options)


def stop_spark() -> None:
    """Stops the module's Spark session (also used by test_formats.py's new-types rows)."""
    if _SPARK.session is not None:
        _SPARK.session.stop()
        _SPARK.session = None
        # spark-site stays: the JVM's PYTHONPATH, which later sessions' workers inherit, names it.
        for entry in os.listdir(_SPARK.folder):
            if entry != "spark-site":
                shutil.rmtree(os.path.join(_SPARK.folder, entry), ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def _stop_spark():
    yield
    stop_spark()


def _marks(case: Case) -> list:
    marks = []
    if case.writer == "spark":
        reason = _spark_missing()
        marks += [pytest.mark.slow, pytest.mark.skipif(bool(reason), reason=reason or "ok")]
    return marks


@pytest.mark.parametrize("case", [pytest.param(c, id=c.id(), marks=_marks(c)) for c in CASES])
def test_conformance(case: Case, tmp_path) -> None:
    table = TYPE_GROUPS[case.group](case.rows)
    path = str(tmp_path / f"{case.writer}.parquet")
    WRITERS[case.writer](table, path, case.params)
    written = pq.read_table(path)
    check_file(path, read_options(case, written))


def test_cases_cover_every_writer_and_codec() -> None:
    """The table itself: every writer, every type group, every codec, both null options."""
    assert {c.writer for c in CASES} == set(WRITERS)
    assert {c.group for c in CASES} >= set(SCALAR_GROUPS)
    assert {c.params.get("compression") for c in CASES if c.writer == "pyarrow"} >= set(CODECS)
    assert {c.nulls for c in CASES} == {"mask", "fill"}
    assert {c.lists for c in CASES} == {"ragged", "padded"}


def test_checker_catches_a_difference(tmp_path) -> None:
    """The comparison is honest: one changed value, one changed null, one changed list element
    or string byte, each makes check_column fail."""
    table = TYPE_GROUPS["all"](200)
    path = str(tmp_path / "x.parquet")
    pq.write_table(table, path, row_group_size=64)
    options = read_options(Case("pyarrow", "all"), table)
    with stoker.Loader(path, **options) as loader:
        batches = list(loader)
    check_file(path, options)  # equal as written

    def changed(name: str, row: int, value: Any) -> pa.ChunkedArray:
        values = table.column(name).to_pylist()
        values[row] = value
        return pa.chunked_array([pa.array(values, table.column(name).type)])

    for name, row, value in (("int64", 5, 1), ("float64", 7, -0.0), ("float32", 0, None),
                             ("bool_nonnull", 150, not table.column("bool_nonnull")[150].as_py()),
                             ("string", 3, "héllo wörle"), ("binary", 190, None),
                             ("list_i32", 2, [2, 3, 4]), ("list_f64", 199, [])):
        with pytest.raises(AssertionError):
            check_column(batches, name, changed(name, row, value), options)


def test_duckdb_v2_full_range_int32_is_refused_by_both(tmp_path) -> None:
    """DuckDB 1.4's V2 writer stores full-range int32 columns as DELTA_BINARY_PACKED with deltas
    that do not fit 32 bits; Arrow (so pyarrow and stoker) refuses the column chunk. stoker says
    so with a typed error naming the file, row group and column, never with wrong values."""
    duckdb = pytest.importorskip("duckdb")
    path = str(tmp_path / "v2.parquet")
    table = _ints(100).select(["int32_nonnull"]).rename_columns(["x"])
    con = duckdb.connect()
    try:
        con.register("t", table)
        con.execute(f"COPY t TO '{path}' (FORMAT parquet, PARQUET_VERSION V2, "
                    "COMPRESSION uncompressed)")
    finally:
        con.close()
    try:
        values = pq.read_table(path).column("x").to_pylist()
    except OSError:
        values = None
    if values is not None:  # a DuckDB or Arrow release that agrees on the encoding
        check_file(path, dict(shuffle=False, drop_last=False, batch_size=BATCH))
        return
    with pytest.raises(CorruptFileError, match=r"v2\.parquet.*row group 0") as info:
        with stoker.Loader(path, shuffle=False, drop_last=False, batch_size=BATCH) as loader:
            list(loader)
    assert "'x'" in str(info.value)


def test_writer_options_take_effect(tmp_path) -> None:
    """The cases test what their names say: pages v2, many pages, dictionary fallback, codecs."""
    from fuzz_parquet import _Thrift, page_headers

    def pages(params: Dict[str, Any]):
        path = str(tmp_path / "x.parquet")
        write_pyarrow(_strings(N), path, params)
        with open(path, "rb") as f:
            data = f.read()
        # Field 1 of a PageHeader is its type: 0 data page, 2 dictionary page, 3 data page v2.
        kinds = [_Thrift(data, start).struct().get(1) for start, _ in page_headers(data)]
        return kinds, pq.ParquetFile(path).metadata

    chunks = 3 * 5  # columns x row groups
    kinds, meta = pages({})
    assert kinds.count(2) == chunks and kinds.count(0) >= chunks and 3 not in kinds, kinds
    kinds, _ = pages({"data_page_version": "2.0"})
    assert kinds.count(3) >= chunks and 0 not in kinds, kinds
    kinds, _ = pages({"data_page_size": 64, "write_batch_size": 8})
    assert kinds.count(0) > 10 * chunks, kinds
    assert set(kinds) == {0, 2}, kinds  # the walk over the pages stays in step
    _, fallback = pages({"dictionary_pagesize_limit": 64})
    column = fallback.row_group(0).column(0)  # "string": many distinct values
    assert column.has_dictionary_page and "PLAIN" in column.encodings, column.encodings
    _, plain = pages({"use_dictionary": False})
    assert not plain.row_group(0).column(0).has_dictionary_page
    for codec in CODECS:
        _, m = pages({"compression": codec})
        want = {"none": "UNCOMPRESSED", "lz4": "LZ4_RAW"}.get(codec, codec.upper())
        assert m.row_group(0).column(0).compression in (want, codec.upper()), codec
