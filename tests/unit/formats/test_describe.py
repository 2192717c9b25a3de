"""stoker.describe (the engine's Describe) agrees with Loader on every column, and `stoker inspect`
lists files by the catalog's rules."""

from __future__ import annotations

import json
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.__main__ import main
from stoker.errors import error_class

from test_formats import duckdb_file, pyarrow_file  # noqa: F401  (module-scoped fixtures)


@pytest.fixture(scope="module")
def odd_folder(tmp_path_factory) -> str:
    """Hive partitions, nested columns (struct, list of strings, map), with nulls."""
    root = tmp_path_factory.mktemp("odd") / "data"
    for year in (2023, 2024):
        folder = root / f"year={year}" / "city=New%20York"
        folder.mkdir(parents=True)
        table = pa.table({
            "x": pa.array([1.0, None, 3.0], pa.float64()),
            "s": pa.array([{"q": i} for i in range(3)]),
            "tags": pa.array([["a"], [], ["b", "c"]], pa.list_(pa.string())),
            "m": pa.array([[("k", 1)], [], [("j", 2)]], pa.map_(pa.string(), pa.int64())),
            "v": pa.array([[1, 2], [3], []], pa.list_(pa.int16())),
        })
        pq.write_table(table, folder / "part.parquet")
    return str(root)


def _assert_agrees(path: str, column, lists) -> None:
    """Loader(path, columns=[name]) delivers what the description says, or raises its error."""
    kwargs = dict(lists=lists) if lists else {}
    name = column.name
    try:
        loader = stoker.Loader(path, columns=[name], shuffle=False, batch_size=1, num_threads=1,
                               **kwargs)
    except stoker.StokerError as error:
        assert not column.ok, f"{name}: described as ok, Loader raised {error!r}"
        assert type(error) is error_class(column.error_kind), (name, column.error_kind, error)
        assert str(error) == column.error
        return
    with loader:
        info = loader.columns[name]
        assert column.ok, f"{name}: Loader accepts it, description says {column.error!r}"
        assert column.error_kind == "" and column.error == ""
        assert column.kind == info.kind, name
        assert column.dtype == info.dtype, name
        assert list(column.inner_shape) == list(info.inner_shape), name
        assert column.annotation == info.annotation, name
        assert column.arrow_type == info.arrow_type, name


def _flat_names(schema: pa.Schema) -> list:
    """Column names as stoker flattens them: struct leaves `s.q`, map `m.keys` / `m.values`."""
    def flat(name, t):
        while pa.types.is_list(t) or pa.types.is_large_list(t):
            if not (pa.types.is_struct(t.value_type) or pa.types.is_map(t.value_type) or
                    pa.types.is_list(t.value_type)):
                return [name]
            t = t.value_type
        if pa.types.is_map(t):
            return flat(name + ".keys", t.key_type) + flat(name + ".values", t.item_type)
        if pa.types.is_struct(t):
            return [n for f in t for n in flat(name + "." + f.name, f.type)]
        return [name]
    return [n for f in schema for n in flat(f.name, f.type)]


@pytest.mark.parametrize("lists", [None, "padded", "ragged"])
@pytest.mark.parametrize("which", ["pyarrow_file", "duckdb_file", "odd_folder"])
def test_description_agrees_with_loader_on_every_column(which, lists, request):
    path = request.getfixturevalue(which)
    description = stoker.describe(path, lists=lists)
    schema_names = _flat_names(pq.read_schema(
        path if os.path.isfile(path) else next(
            os.path.join(d, f) for d, _, fs in sorted(os.walk(path)) for f in fs)))
    names = [c.name for c in description.columns]
    assert names[:len(schema_names)] == schema_names  # every column, in schema order
    refused = 0
    for column in description.columns:
        _assert_agrees(path, column, lists)
        refused += not column.ok
    if which == "odd_folder":
        assert names[len(schema_names):] == ["year", "city"]  # hive partitions follow
        # Without lists=: list<string>, the map's keys and values, the list of int16; padded:
        # the list<string> and the map's string keys.
        assert refused >= {None: 4, "padded": 2, "ragged": 0}[lists]
    if lists is None and which != "odd_folder":
        needs = [c for c in description.columns if c.needs_list_mode]
        assert needs and all(c.error_kind == "unsupported_type" and "lists=" in c.error
                             and c.kind == stoker._stoker.ColumnKind.ragged for c in needs)


def test_description_of_files_row_groups_and_footer_facts(pyarrow_file):  # noqa: F811
    description = stoker.describe(pyarrow_file)
    meta = pq.ParquetFile(pyarrow_file).metadata
    assert [f.path for f in description.files] == [pyarrow_file]
    assert description.files[0].size == os.path.getsize(pyarrow_file)
    assert description.files[0].rows == description.rows == meta.num_rows
    assert description.files[0].num_row_groups == meta.num_row_groups
    assert [(g.file, g.index, g.rows, g.bytes) for g in description.row_groups] == [
        (0, i, meta.row_group(i).num_rows, meta.row_group(i).total_byte_size)
        for i in range(meta.num_row_groups)]
    by_name = {c.name: c for c in description.columns}
    for leaf in range(meta.num_columns):
        top = meta.schema.column(leaf).path.split(".")[0]
        chunks = [meta.row_group(g).column(leaf) for g in range(meta.num_row_groups)]
        column = by_name[top]
        assert set(chunks[0].encodings) <= set(column.encodings)
        assert chunks[0].compression in column.compression
        assert chunks[0].physical_type in column.physical_types
    int8 = by_name["int8"]
    assert int8.uncompressed_bytes == sum(meta.row_group(g).column(0).total_uncompressed_size
                                          for g in range(meta.num_row_groups))
    assert int8.null_count_known and int8.null_count == 0


def test_description_requested_columns_features_and_unknown(pyarrow_file):  # noqa: F811
    description = stoker.describe(pyarrow_file, columns=["int8", "nope"],
                                  features=["float32", "int64"])
    cols = {c.name: c for c in description.columns}
    assert list(cols) == ["int8", "nope", "float32", "int64"]
    assert cols["int8"].ok and not cols["nope"].ok
    assert cols["nope"].error_kind == "column_not_found" and "'nope'" in cols["nope"].error
    assert cols["float32"].ok and cols["float32"].dtype == "float32"
    # int64 stacked into float32 loses information unless allowed: the same error as Loader.
    assert cols["int64"].error_kind == "lossy_cast" and "allow_lossy_cast" in cols["int64"].error
    allowed = stoker.describe(pyarrow_file, features=["int64"], allow_lossy_cast=True)
    assert allowed.columns[0].ok and allowed.columns[0].dtype == "float32"
    with pytest.raises(TypeError, match="bogus"):
        stoker.describe(pyarrow_file, bogus=1)


def test_description_errors_are_the_loaders(tmp_path):
    for source in (str(tmp_path / "missing"), str(tmp_path)):
        with pytest.raises(stoker.StokerError) as from_describe:
            stoker.describe(source)
        with pytest.raises(stoker.StokerError) as from_loader:
            stoker.Loader(source)
        assert type(from_describe.value) is type(from_loader.value)
        assert str(from_describe.value) == str(from_loader.value)


@pytest.fixture
def nested_folder(tmp_path):
    root = tmp_path / "ds"
    (root / "sub").mkdir(parents=True)
    table = pa.table({"x": np.arange(10, dtype=np.int64)})
    pq.write_table(table, root / "top.parquet")
    pq.write_table(table, root / "sub" / "deep.parquet")
    return str(root)


def test_inspect_globs_follow_the_catalog(nested_folder, capsys):
    # A single `*` stays inside one folder (as Loader reads it); `**` crosses folders.
    for pattern, files in (("*.parquet", ["top.parquet"]),
                           ("**.parquet", ["deep.parquet", "top.parquet"])):
        source = os.path.join(nested_folder, pattern)
        assert main(["inspect", source, "--json"]) == 0
        report = json.loads(capsys.readouterr().out)
        assert sorted(os.path.basename(f) for f in report["files"]) == files
        with stoker.Loader(source, batch_size=1) as loader:
            assert loader.dataset_rows == report["rows"] == 10 * len(files)
