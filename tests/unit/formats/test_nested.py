"""Nested types: struct leaves as ``parent.child``, structs in lists, maps as ``<name>.keys`` /
``<name>.values``, lists of strings and lists of lists (ragged, one offsets tensor per level),
``list<null>`` declined, and the legacy list encodings of older writers (files from Apache
parquet-testing, tests/data/parquet-testing/README.md).

The reference is pyarrow's read of the same file: each flattened column is found by walking
``to_pylist()`` (struct child, list elements, map keys or values).
"""

from __future__ import annotations

import os
from typing import Any, Dict, List

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import Ragged
from stoker.errors import NullValueError, UnsupportedTypeError

from stoker_testdata import PARQUET_TESTING as DATA
from stoker_testdata import batch_bytes
from stoker_testdata import load_in_order as load


def delivered(batches: List[Dict[str, Any]], name: str) -> list:
    """A column as Python values; None where its mask (if any) says null."""
    out: list = []
    for batch in batches:
        values = batch[name].tolist()
        mask = batch.get(name + "_mask")
        if mask is not None:
            values = [v if m else None for v, m in zip(values, np.asarray(mask).tolist())]
        out.extend(values)
    return out


def walk(value: Any, path: List[str]) -> Any:
    """pyarrow's Python value of a flattened column: `.name` struct child, `[]` list
    elements, `keys`/`values` of a map (a list of (key, value) tuples)."""
    if not path or value is None:
        return value
    step, rest = path[0], path[1:]
    if step == "[]":
        return [walk(v, rest) for v in value]
    if step in ("keys", "values") and isinstance(value, list):
        index = 0 if step == "keys" else 1
        return [walk(pair[index], rest) for pair in value]
    return walk(value[step], rest)


def expected(path: str, column: str, steps: List[str]) -> list:
    return [walk(v, steps) for v in pq.read_table(path, columns=[column])[column].to_pylist()]


# ----------------------------------------------------------------------------------- structs

STRUCT = pa.struct([("a", pa.int32()),
                    ("b", pa.struct([("c", pa.float64()), ("d", pa.string())]))])


@pytest.fixture
def struct_file(tmp_path) -> str:
    rows = [{"a": i, "b": {"c": i / 4, "d": f"s{i}"}} if i % 5 else None for i in range(23)]
    rows[3] = {"a": 3, "b": None}
    path = os.fspath(tmp_path / "structs.parquet")
    pq.write_table(pa.table({"s": pa.array(rows, STRUCT),
                             "id": pa.array(range(23), pa.int64())}), path, row_group_size=8)
    return path


def test_struct_parent_expands_to_its_leaves(struct_file):
    with stoker.Loader(struct_file, columns=["s", "id"], null_mask=True, shuffle=False,
                       batch_size=4, drop_last=False) as loader:
        assert list(loader.columns) == ["s.a", "s.b.c", "s.b.d", "id"]
        assert loader.columns["s.b.c"].arrow_type == "double"
        batches = list(loader)
    assert delivered(batches, "s.a") == expected(struct_file, "s", ["a"])
    assert delivered(batches, "s.b.c") == expected(struct_file, "s", ["b", "c"])
    assert delivered(batches, "s.b.d") == expected(struct_file, "s", ["b", "d"])


def test_struct_leaves_by_name_as_columns_features_and_options(struct_file):
    batches = load(struct_file, columns=["s.b.d"], features=["s.a", "s.b.c"],
                   features_dtype="float64", fill_null={"s.a": -1, "s.b": 0.5},
                   null_mask=["s.b.d"])
    want_a = [-1 if v is None else v for v in expected(struct_file, "s", ["a"])]
    want_c = [0.5 if v is None else v for v in expected(struct_file, "s", ["b", "c"])]
    features = np.concatenate([b["features"] for b in batches])
    assert features.dtype == np.float64
    np.testing.assert_array_equal(features, np.array([want_a, want_c], np.float64).T)
    assert delivered(batches, "s.b.d") == expected(struct_file, "s", ["b", "d"])


def test_struct_leaf_nulls_name_the_leaf(struct_file):
    with pytest.raises(NullValueError, match=r"'s\.a'.*structs\.parquet"):
        load(struct_file, columns=["s.a"])


def test_unknown_leaf_is_reported(struct_file):
    with pytest.raises(stoker.errors.ColumnNotFoundError, match="s.b.zz"):
        load(struct_file, columns=["s.b.zz"])


# --------------------------------------------------------------------------- structs in lists

@pytest.fixture
def list_of_structs(tmp_path) -> str:
    item = pa.struct([("x", pa.int64()), ("y", pa.float32()), ("tag", pa.string())])
    rng = np.random.default_rng(0)
    rows = []
    for i in range(30):
        n = int(rng.integers(0, 5))
        rows.append(None if i % 7 == 3 else
                    [{"x": i * 10 + k, "y": k / 2, "tag": f"t{k}"} for k in range(n)])
    path = os.fspath(tmp_path / "items.parquet")
    pq.write_table(pa.table({"items": pa.array(rows, pa.list_(item))}), path, row_group_size=9)
    return path


@pytest.mark.parametrize("mode", ["ragged", "padded"])
def test_struct_in_list_gives_a_list_per_leaf(list_of_structs, mode):
    batches = load(list_of_structs, columns=["items.x", "items.y"], lists=mode, null_mask=True,
                   pad_value=-1)
    for leaf in ("x", "y"):
        want = expected(list_of_structs, "items", ["[]", leaf])
        if mode == "ragged":
            assert delivered(batches, "items." + leaf) == want
        else:
            got = []
            for b in batches:
                values, lengths = b["items." + leaf], b["items." + leaf + "_lengths"]
                for row, n, valid in zip(values.tolist(), lengths.tolist(),
                                         b["items." + leaf + "_mask"].tolist()):
                    assert all(v == -1 for v in row[n:])
                    got.append(row[:n] if valid else None)
            assert got == want


def test_strings_in_a_list_of_structs(list_of_structs):
    batches = load(list_of_structs, columns=["items"], lists="ragged", null_mask=True)
    assert set(batches[0]) >= {"items.x", "items.y", "items.tag"}
    assert delivered(batches, "items.tag") == expected(list_of_structs, "items", ["[]", "tag"])


# ---------------------------------------------------------------------- lists of lists, strings

@pytest.fixture
def lists_file(tmp_path) -> str:
    rng = np.random.default_rng(1)
    strings, nested, deep = [], [], []
    for i in range(40):
        strings.append([f"w{i}-{k}" * int(rng.integers(0, 3)) for k in range(i % 4)])
        nested.append([list(range(k, k + int(rng.integers(0, 4)))) for k in range(i % 3)])
        deep.append([[["ab"[: k % 3]] * (k % 2) for k in range(i % 3)]])
    strings[5] = None
    table = pa.table({"words": pa.array(strings, pa.list_(pa.string())),
                      "grid": pa.array(nested, pa.large_list(pa.list_(pa.int16()))),
                      "deep": pa.array(deep, pa.list_(pa.list_(pa.list_(pa.large_string()))))})
    path = os.fspath(tmp_path / "lists.parquet")
    pq.write_table(table, path, row_group_size=11)
    return path


def test_list_of_strings_ragged(lists_file):
    batches = load(lists_file, columns=["words"], lists="ragged", null_mask=True)
    value = batches[0]["words"]
    assert isinstance(value, Ragged) and isinstance(value.values, Ragged)
    assert value.values.kind == "utf8" and value.flat_values.dtype == np.uint8
    assert len(value.nested_offsets) == 2
    assert delivered(batches, "words") == expected(lists_file, "words", [])


def test_lists_of_lists_ragged(lists_file):
    batches = load(lists_file, columns=["grid", "deep"], lists="ragged")
    assert batches[0]["grid"].flat_values.dtype == np.int16
    assert delivered(batches, "grid") == expected(lists_file, "grid", [])
    assert delivered(batches, "deep") == expected(lists_file, "deep", [])
    # Row i of the Ragged is its inner lists.
    assert batches[1]["grid"][0] == [np.asarray(v).tolist() for v in batches[1]["grid"][0]]


def unpad(values, lengths, inner) -> list:
    """Nested lists back from a padded [B, L0, ..., Lk] array and its per-level lengths."""
    def cut(block, n, level, index):
        if level == len(inner):
            return block[:n].tolist()
        return [cut(block[j], int(inner[level][index + (j,)]), level + 1, index + (j,))
                for j in range(n)]
    return [cut(values[i], int(lengths[i]), 0, (i,)) for i in range(len(lengths))]


def test_lists_of_lists_padded(lists_file):
    batches = load(lists_file, columns=["grid"], lists="padded", pad_value=-7, null_mask=True)
    got = []
    for b in batches:
        values = b["grid"]
        assert values.dtype == np.int16 and values.ndim == 3
        inner = [b["grid_lengths_1"]]
        assert inner[0].shape == values.shape[:2]
        rows = unpad(values, b["grid_lengths"], inner)
        # Everything outside the lengths is pad_value.
        filled = sum(len(inner_row) for row in rows for inner_row in row)
        assert (values == -7).sum() == values.size - filled
        got.extend(rows)
    assert got == expected(lists_file, "grid", [])


def test_strings_padded_are_declined_with_the_option_that_works(lists_file):
    for name in ("deep", "words"):
        with pytest.raises(UnsupportedTypeError, match=f"lists=\\{{'{name}': 'ragged'\\}}"):
            load(lists_file, columns=[name], lists="padded")


def test_old_list_structure_padded():
    path = os.path.join(DATA, "old_list_structure.parquet")
    batch = load(path, columns=["a"], lists="padded")[0]
    np.testing.assert_array_equal(batch["a"], [[[1, 2], [3, 4]]])
    np.testing.assert_array_equal(batch["a_lengths_1"], [[2, 2]])


def test_list_of_null_is_declined(tmp_path):
    path = os.fspath(tmp_path / "nulls.parquet")
    pq.write_table(pa.table({"e": pa.array([[], [None]], pa.list_(pa.null()))}), path)
    with pytest.raises(UnsupportedTypeError, match="list<null>|leave it out"):
        load(path, columns=["e"], lists="ragged")


# -------------------------------------------------------------------------------------- maps

def test_map_keys_and_values_are_aligned_ragged_columns(tmp_path):
    rows = [[(k, k * 1.5) for k in range(i % 4)] for i in range(25)]
    names = [[(f"k{k}", k) for k in range(i % 3)] for i in range(25)]
    path = os.fspath(tmp_path / "maps.parquet")
    pq.write_table(pa.table({"m": pa.array(rows, pa.map_(pa.int32(), pa.float64())),
                             "n": pa.array(names, pa.map_(pa.string(), pa.int64()))}), path,
                   row_group_size=10)
    batches = load(path, columns=["m", "n"], lists="ragged")
    assert set(batches[0]) == {"m.keys", "m.values", "n.keys", "n.values"}
    for name in ("m", "n"):
        keys = delivered(batches, name + ".keys")
        values = delivered(batches, name + ".values")
        assert keys == expected(path, name, ["keys"])
        assert values == expected(path, name, ["values"])
        assert [len(k) for k in keys] == [len(v) for v in values]
    for b in batches:
        np.testing.assert_array_equal(b["m.keys"].offsets, b["m.values"].offsets)


# ---------------------------------------------------------------------- parquet-testing files

def test_old_list_structure_two_level_lists():
    path = os.path.join(DATA, "old_list_structure.parquet")
    batches = load(path, columns=["a"], lists="ragged")
    assert delivered(batches, "a") == expected(path, "a", []) == [[[1, 2], [3, 4]]]


def test_repeated_fields_without_list_annotation():
    path = os.path.join(DATA, "repeated_primitive_no_list.parquet")
    batches = load(path, lists="ragged")
    assert set(batches[0]) == {"Int32_list", "String_list", "group_of_lists.Int32_list_in_group",
                               "group_of_lists.String_list_in_group"}
    assert delivered(batches, "Int32_list") == expected(path, "Int32_list", [])
    assert delivered(batches, "String_list") == expected(path, "String_list", [])
    assert delivered(batches, "group_of_lists.String_list_in_group") == expected(
        path, "group_of_lists", ["String_list_in_group"])


def test_repeated_group_without_annotation():
    path = os.path.join(DATA, "repeated_no_annotation.parquet")
    batches = load(path, columns=["id", "phoneNumbers.phone.number"], lists="ragged",
                   null_mask=["phoneNumbers"])
    assert delivered(batches, "phoneNumbers.phone.number") == expected(
        path, "phoneNumbers", ["phone", "[]", "number"])
    # `kind` has null strings inside the lists: refused without null_mask, naming the leaf and
    # the option (tests/unit/formats/test_nested_nulls.py checks what null_mask delivers).
    with pytest.raises(NullValueError,
                       match=r"'phoneNumbers\.phone\.kind'.*null_mask=\['phoneNumbers\.phone\.kind'\]"):
        load(path, columns=["id", "phoneNumbers.phone.kind"], lists="ragged", null_mask=["id"])
    batches = load(path, columns=["phoneNumbers.phone.kind"], lists="ragged", null_mask=True)
    # A null string arrives empty, False in the strings' mask.
    want = expected(path, "phoneNumbers", ["phone", "[]", "kind"])
    assert delivered(batches, "phoneNumbers.phone.kind") == [
        None if row is None else ["" if s is None else s for s in row] for row in want]
    assert [m for b in batches for m in b["phoneNumbers.phone.kind_mask_1"].tolist()] == [
        s is not None for row in want if row for s in row]


def test_nested_structs_rust():
    path = os.path.join(DATA, "nested_structs.rust.parquet")
    table = pq.read_table(path)
    batches = load(path, columns=["roll_num", "ACTUAL_DEPTH.mean"], batch_size=1)
    assert [k for k in batches[0] if k.startswith("roll_num.")] == [
        "roll_num." + f.name for f in table.schema.field("roll_num").type]
    for name in ("roll_num.min", "roll_num.count", "roll_num.variance", "ACTUAL_DEPTH.mean"):
        parent, child = name.split(".")
        assert delivered(batches, name) == expected(path, parent, [child])


def test_nested_maps_and_lists_of_strings():
    path = os.path.join(DATA, "nested_maps.snappy.parquet")
    batches = load(path, columns=["a.keys", "b", "c"], lists="ragged")
    assert delivered(batches, "a.keys") == expected(path, "a", ["keys"])
    # The inner maps hold a null one: refused without null_mask, which delivers it
    # (tests/unit/formats/test_nested_nulls.py).
    with pytest.raises(NullValueError,
                       match=r"'a\.values\.keys'.*null inner list.*null_mask=\['a\.values\.keys'\]"):
        load(path, columns=["a.values.keys"], lists="ragged")
    path = os.path.join(DATA, "nested_lists.snappy.parquet")
    with pytest.raises(NullValueError, match=r"'a'.*null inner list.*level 2.*null_mask=\['a'\]"):
        load(path, columns=["a"], lists="ragged")


def test_null_elements_inside_lists_name_the_options():
    path = os.path.join(DATA, "list_columns.parquet")
    with pytest.raises(NullValueError, match=r"'int64_list'.*null element.*fill_null=\{'int64_list': "
                                             r"value\}.*null_mask=\['int64_list'\]"):
        load(path, columns=["int64_list"], lists="ragged")
    with pytest.raises(NullValueError, match=r"'utf8_list'.*null_mask=\['utf8_list'\]"):
        load(path, columns=["utf8_list"], lists="ragged")
    # null_mask delivers both (tests/unit/formats/test_nested_nulls.py compares them with pyarrow).
    batch = load(path, columns=["int64_list", "utf8_list"], lists="ragged", null_mask=True)[0]
    assert batch["int64_list_mask_1"].tolist() == [True, True, True, False, True, True]
    assert batch["utf8_list_mask_1"].tolist() == [True, True, True, True, False, True, True]


def test_null_list_and_map_without_values():
    with pytest.raises(UnsupportedTypeError, match="emptylist"):
        load(os.path.join(DATA, "null_list.parquet"), lists="ragged")
    path = os.path.join(DATA, "map_no_value.parquet")
    batches = load(path, columns=["my_map.keys", "my_map_no_v", "my_list"], lists="ragged")
    for name, column, steps in (("my_map.keys", "my_map", ["keys"]),
                                ("my_map_no_v", "my_map_no_v", []), ("my_list", "my_list", [])):
        assert delivered(batches, name) == expected(path, column, steps)


# ------------------------------------------------------------------------------- determinism

def _digest(batches) -> bytes:
    return batch_bytes(batches, keys=False)


@pytest.mark.parametrize("threads", [1, 3])
def test_nested_columns_are_deterministic(tmp_path, list_of_structs, lists_file, threads):
    kwargs = dict(columns=["items", "words", "grid", "deep"], lists="ragged", null_mask=True,
                  shuffle=True, seed=11, batch_size=7)
    files = [list_of_structs, lists_file]
    # Two files with different columns: each is null where the other has it.
    reference = _digest(load(files, num_threads=1, **kwargs))
    assert _digest(load(files, num_threads=threads, **kwargs)) == reference
    cache = os.fspath(tmp_path / "cache")
    assert _digest(load(files, num_threads=threads, cache_dir=cache, **kwargs)) == reference
    assert _digest(load(files, num_threads=threads, cache_dir=cache, **kwargs)) == reference


def test_nested_ragged_as_torch_and_parent_options(tmp_path, lists_file):
    torch = pytest.importorskip("torch")
    batches = load(lists_file, columns=["grid"], lists={"grid": "ragged"}, output="torch")
    value = batches[0]["grid"]
    assert isinstance(value.flat_values, torch.Tensor) and value.flat_values.dtype == torch.int16
    assert all(isinstance(o, torch.Tensor) and o.dtype == torch.int64
               for o in value.nested_offsets)
    assert [row for b in batches for row in b["grid"].tolist()] == expected(lists_file, "grid", [])
    # lists= given for a map applies to its keys and values.
    path = os.fspath(tmp_path / "map.parquet")
    pq.write_table(pa.table({"m": pa.array([[(1, 2)], []], pa.map_(pa.int8(), pa.int8()))}), path)
    batches = load(path, columns=["m"], lists={"m": "padded"})
    assert batches[0]["m.keys"].tolist() == [[1], [0]]
    assert batches[0]["m.values_lengths"].tolist() == [1, 0]


def test_describe_names_each_leaf(struct_file):
    description = stoker.describe(struct_file, columns=["s"], null_mask=True)
    columns = {c.name: c for c in description.columns}
    assert list(columns) == ["s.a", "s.b.c", "s.b.d"]
    assert columns["s.a"].arrow_type == "int32" and columns["s.a"].ok
    assert columns["s.b.d"].arrow_type == "string" and columns["s.b.d"].uncompressed_bytes > 0
    assert [c.name for c in stoker.describe(struct_file).columns] == ["s.a", "s.b.c", "s.b.d",
                                                                      "id"]


def test_transform_receives_flattened_leaves(struct_file):
    def fn(cols):
        assert set(cols) == {"s.a", "id"}
        return {"a2": np.ma.filled(cols["s.a"], -1).astype(np.int64) * 2}

    batches = load(struct_file, transform=fn, transform_columns=["s.a", "id"], columns=["a2"])
    want = [-2 if v is None else 2 * v for v in expected(struct_file, "s", ["a"])]
    assert [v for b in batches for v in b["a2"].tolist()] == want


def test_dictionary_leaf_of_a_struct(tmp_path):
    codes = pa.array(["red", "green", None, "red"]).dictionary_encode()
    s = pa.StructArray.from_arrays([codes, pa.array([1, 2, 3, 4], pa.int8())], ["color", "n"])
    path = os.fspath(tmp_path / "dict.parquet")
    pq.write_table(pa.table({"s": s}), path)
    batches = load(path, columns=["s"], null_mask=["s.color"], batch_size=4)
    assert delivered(batches, "s.color") == ["red", "green", None, "red"]
    assert delivered(batches, "s.n") == [1, 2, 3, 4]


@pytest.mark.parametrize("mode", ["ragged", "padded"])
def test_three_levels_of_numbers(tmp_path, mode):
    rng = np.random.default_rng(5)
    rows = [[[[float(rng.integers(0, 9)) for _ in range(int(rng.integers(0, 3)))]
              for _ in range(int(rng.integers(0, 3)))] for _ in range(int(rng.integers(0, 3)))]
            for _ in range(17)]
    rows[4] = None
    path = os.fspath(tmp_path / "cube.parquet")
    pq.write_table(pa.table({"c": pa.array(rows, pa.list_(pa.list_(pa.list_(pa.float32()))))}),
                   path, row_group_size=6)
    batches = load(path, columns=["c"], lists=mode, null_mask=True, batch_size=5, pad_value=-1)
    if mode == "ragged":
        assert delivered(batches, "c") == expected(path, "c", [])
        return
    got = []
    for b in batches:
        assert b["c"].ndim == 4 and b["c_lengths_2"].ndim == 3
        cut = unpad(b["c"], b["c_lengths"], [b["c_lengths_1"], b["c_lengths_2"]])
        got.extend(r if m else None for r, m in zip(cut, b["c_mask"].tolist()))
    assert got == expected(path, "c", [])


def test_null_elements_of_number_lists_take_fill_null(tmp_path):
    """A null element inside a list: an error naming fill_null and null_mask; fill_null replaces
    such elements, null_mask delivers them (0, or fill_null) with `l_mask_1` (null rows still
    take null_mask, as for every list column)."""
    path = str(tmp_path / "elements.parquet")
    pq.write_table(pa.table({"l": pa.array([[1, None, 3], [], None, [None]],
                                           pa.list_(pa.int64()))}), path)
    with pytest.raises(NullValueError, match=r"null_mask=\['l'\]"):  # the null row
        list(stoker.Loader(path, columns=["l"], lists="ragged", fill_null={"l": 0},
                           shuffle=False, batch_size=4))
    with stoker.Loader(path, columns=["l"], lists="ragged", null_mask=True, shuffle=False,
                       batch_size=4) as loader:
        batch = next(iter(loader))
    assert np.asarray(batch["l"].values).tolist() == [1, 0, 3, 0]
    assert batch["l_mask_1"].tolist() == [True, False, True, False]
    with stoker.Loader(path, columns=["l"], lists="padded", pad_value=-1, fill_null={"l": 0},
                       null_mask=True, shuffle=False, batch_size=4) as loader:
        batch = next(iter(loader))
    assert batch["l"].tolist() == [[1, 0, 3], [-1, -1, -1], [-1, -1, -1], [0, -1, -1]]
    assert batch["l_lengths"].tolist() == [3, 0, 0, 1]
    assert batch["l_mask"].tolist() == [True, True, False, True]
    assert batch["l_mask_1"].tolist() == [[True, False, True], [False] * 3, [False] * 3,
                                          [False] * 3]
    with stoker.Loader(path, columns=["l"], lists="ragged", fill_null={"l": 7}, null_mask=True,
                       shuffle=False, batch_size=4) as loader:
        ragged = next(iter(loader))["l"]
    assert np.asarray(ragged.values).tolist() == [1, 7, 3, 7]
    assert np.asarray(ragged.offsets).tolist() == [0, 3, 3, 3, 4]
