"""Evolving schemas: files of one dataset that disagree the ways pyarrow.dataset accepts.

Each case writes a few files with pyarrow, reads them with stoker in order (shuffle=False, batch_size=2, drop_last=False) and
compares the values with pyarrow's read of the same files, each converted to the unified type.
Conflicts (string vs float) raise SchemaMismatchError naming both files and the column, but only
for a column the loader reads.
"""

from __future__ import annotations

import functools
import os
from typing import Any, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import NullValueError, SchemaMismatchError

from stoker_testdata import load_in_order


def write_files(root, tables: List[pa.Table]) -> str:
    os.makedirs(root, exist_ok=True)
    for i, table in enumerate(tables):
        pq.write_table(table, os.path.join(root, f"part-{i}.parquet"), row_group_size=7)
    return os.fspath(root)


load = functools.partial(load_in_order, batch_size=5)


def column(batches: List[Dict[str, Any]], name: str) -> list:
    out: list = []
    for batch in batches:
        value = batch[name]
        out.extend(value.tolist())
    return out


def test_int32_and_int64_unify_to_int64(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"x": pa.array(range(10), pa.int32()), "y": pa.array([1.5] * 10, pa.float32())}),
        pa.table({"x": pa.array(range(10, 25), pa.int64()),
                  "y": pa.array([2.5] * 15, pa.float64())}),
    ])
    batches = load(root, columns=["x", "y"])
    assert all(b["x"].dtype == np.int64 for b in batches)
    assert all(b["y"].dtype == np.float64 for b in batches)
    assert column(batches, "x") == list(range(25))
    assert column(batches, "y") == [1.5] * 10 + [2.5] * 15
    with stoker.Loader(root, columns=["x"], shuffle=False, batch_size=2, drop_last=False) as loader:
        assert loader.columns["x"].arrow_type == "int64"


def test_unsigned_and_signed_widen_to_a_signed_type(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"x": pa.array([0, 200, 255], pa.uint8())}),
        pa.table({"x": pa.array([-128, 5, 127], pa.int8())}),
    ])
    batches = load(root, columns=["x"])
    assert batches[0]["x"].dtype == np.int16
    assert column(batches, "x") == [0, 200, 255, -128, 5, 127]


def test_int_and_float_unify_exactly(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"x": pa.array([1, 2, 2**31 - 1], pa.int32())}),
        pa.table({"x": pa.array([0.5, -1.25], pa.float32())}),
    ])
    batches = load(root, columns=["x"])
    assert batches[0]["x"].dtype == np.float64  # int32 does not fit float32's mantissa
    assert column(batches, "x") == [1.0, 2.0, 2**31 - 1, 0.5, -1.25]


@pytest.mark.parametrize("types", [
    (pa.string(), pa.large_string()),
    (pa.large_string(), pa.string()),
    (pa.dictionary(pa.int32(), pa.string()), pa.string()),
    (pa.string(), pa.dictionary(pa.int8(), pa.large_string())),
])
def test_string_variants_unify(tmp_path, types):
    values = [["a", "bb", None, "ccc"], ["dd", "", "e"]]
    tables = []
    for vals, t in zip(values, types):
        array = pa.array(vals, pa.string())
        array = array.dictionary_encode().cast(t) if pa.types.is_dictionary(t) else array.cast(t)
        tables.append(pa.table({"s": array, "n": pa.array(range(len(vals)), pa.int64())}))
    root = write_files(tmp_path, tables)
    batches = load(root, columns=["s", "n"], null_mask=["s"])
    got = column(batches, "s")
    mask = column(batches, "s_mask")
    assert [g if m else None for g, m in zip(got, mask)] == values[0] + values[1]


def test_column_added_later_is_null_in_old_files(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"a": pa.array(range(8), pa.int64())}),
        pa.table({"a": pa.array(range(8, 12), pa.int64()),
                  "b": pa.array([1.0, 2.0, None, 4.0], pa.float32())}),
    ])
    # Without a choice for nulls: the usual null error, naming the column and the old file.
    with pytest.raises(NullValueError, match=r"'b'.*part-0\.parquet.*fill_null"):
        stoker.Loader(root, columns=["a", "b"], shuffle=False, batch_size=2, drop_last=False)
    batches = load(root, columns=["a", "b"], fill_null={"b": -1.0})
    assert column(batches, "b") == [-1.0] * 8 + [1.0, 2.0, -1.0, 4.0]
    batches = load(root, columns=["b"], null_mask=["b"])
    assert column(batches, "b_mask") == [False] * 8 + [True, True, False, True]
    # A column only the old files lack is not a problem when it is not read.
    assert column(load(root, columns=["a"]), "a") == list(range(12))


def test_string_added_later_needs_null_mask(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"a": pa.array([1, 2], pa.int64())}),
        pa.table({"a": pa.array([3], pa.int64()), "s": pa.array(["x"])}),
    ])
    with pytest.raises(NullValueError, match=r"'s'.*part-0\.parquet.*null_mask"):
        stoker.Loader(root, columns=["s"], shuffle=False, batch_size=2, drop_last=False)
    batches = load(root, columns=["s"], null_mask=["s"])
    assert column(batches, "s_mask") == [False, False, True]
    assert column(batches, "s")[2] == "x"


def test_real_conflict_names_both_files_and_the_column(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"a": pa.array([1, 2], pa.int64()), "c": pa.array(["x", "y"])}),
        pa.table({"a": pa.array([3], pa.int64()), "c": pa.array([1.5], pa.float64())}),
    ])
    with pytest.raises(SchemaMismatchError) as info:
        stoker.Loader(root, columns=["c"], shuffle=False, batch_size=2, drop_last=False)
    message = str(info.value)
    assert "'c'" in message and "part-0.parquet" in message and "part-1.parquet" in message
    # The conflict does not matter when the column is not read.
    assert column(load(root, columns=["a"]), "a") == [1, 2, 3]


def test_int64_and_float64_conflict(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"v": pa.array([2**60], pa.int64())}),
        pa.table({"v": pa.array([0.5], pa.float64())}),
    ])
    with pytest.raises(SchemaMismatchError, match="'v'"):
        stoker.Loader(root, columns=["v"], shuffle=False, batch_size=2, drop_last=False)


def test_struct_leaf_added_later(tmp_path):
    old = pa.table({"s": pa.array([{"a": 1}, {"a": 2}], pa.struct([("a", pa.int32())]))})
    new = pa.table({"s": pa.array([{"a": 3, "b": 0.5}, None],
                                  pa.struct([("a", pa.int64()), ("b", pa.float64())]))})
    root = write_files(tmp_path, [old, new])
    batches = load(root, columns=["s"], fill_null={"s": 0})
    assert column(batches, "s.a") == [1, 2, 3, 0]
    assert column(batches, "s.b") == [0.0, 0.0, 0.5, 0.0]
    assert batches[0]["s.a"].dtype == np.int64


def _evolving(tmp_path) -> str:
    rng = np.random.default_rng(3)
    tables = []
    for i in range(4):
        n = 40 + 13 * i
        ints = rng.integers(-1000, 1000, n)
        cols = {"i": pa.array(ints, pa.int32() if i % 2 else pa.int64()),
                "s": pa.array([f"v{k}" for k in ints], pa.large_string() if i == 2 else pa.string())}
        if i >= 2:
            cols["late"] = pa.array(rng.random(n), pa.float32())
        tables.append(pa.table(cols))
    return write_files(tmp_path / "data", tables)


def _digest(batches) -> bytes:
    out = b""
    for batch in batches:
        for key in sorted(batch):
            value = batch[key]
            if hasattr(value, "values") and hasattr(value, "offsets"):
                out += np.asarray(value.values).tobytes() + np.asarray(value.offsets).tobytes()
            else:
                out += np.asarray(value).tobytes()
    return out


@pytest.mark.parametrize("threads", [1, 4])
def test_evolving_dataset_is_deterministic(tmp_path, threads):
    root = _evolving(tmp_path)
    kwargs = dict(columns=["i", "s", "late"], fill_null={"late": 0.0}, null_mask=["s"],
                  shuffle=True, seed=7, batch_size=16)
    reference = _digest(load(root, num_threads=1, **kwargs))
    assert _digest(load(root, num_threads=threads, **kwargs)) == reference
    cache = tmp_path / "cache"
    assert _digest(load(root, num_threads=threads, cache_dir=str(cache), **kwargs)) == reference
    assert _digest(load(root, num_threads=threads, cache_dir=str(cache), **kwargs)) == reference


def test_cache_entries_follow_the_unified_type(tmp_path):
    # Cached arrays of a file hold its type as the dataset read it: a file added later that
    # widens the column must not be served the narrower arrays.
    root = tmp_path / "data"
    write_files(root, [pa.table({"x": pa.array(range(9), pa.int32())})])
    cache = os.fspath(tmp_path / "cache")
    assert column(load(os.fspath(root), columns=["x"], cache_dir=cache), "x") == list(range(9))
    pq.write_table(pa.table({"x": pa.array([2**40], pa.int64())}), root / "part-9.parquet")
    for _ in range(2):
        batches = load(os.fspath(root), columns=["x"], cache_dir=cache)
        assert batches[0]["x"].dtype == np.int64
        assert column(batches, "x") == list(range(9)) + [2**40]


def test_feature_added_later_takes_fill_null(tmp_path):
    root = write_files(tmp_path, [
        pa.table({"a": pa.array([1.0, 2.0], pa.float32())}),
        pa.table({"a": pa.array([3.0], pa.float32()), "b": pa.array([7], pa.int16())}),
    ])
    with pytest.raises(NullValueError, match=r"'b'.*part-0\.parquet"):
        stoker.Loader(root, features=["a", "b"], shuffle=False, batch_size=2, drop_last=False)
    batches = load(root, features=["a", "b"], fill_null={"b": -1})
    features = np.concatenate([b["features"] for b in batches])
    np.testing.assert_array_equal(features, np.array([[1, -1], [2, -1], [3, 7]], np.float32))
