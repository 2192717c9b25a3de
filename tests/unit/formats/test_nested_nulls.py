"""Nulls below the rows of list columns (issue 14): null inner lists, null strings in lists,
null bool and number elements, null elements of fixed-size lists.

With the column in ``null_mask`` the batch carries ``<name>_mask`` (rows) plus one mask per level
below the rows, ``<name>_mask_1``, ``<name>_mask_2``...; null inner lists and strings arrive
empty, null elements as 0 (or ``fill_null``). Without the option, ``NullValueError`` names it.
Every delivered value, length and mask is compared with pyarrow's read of the same file.
"""

from __future__ import annotations

import os
from typing import Any, Dict, List, Optional

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import Ragged
from stoker.errors import InvalidOptionError, NullValueError

from stoker_testdata import PARQUET_TESTING as DATA
from stoker_testdata import batch_bytes
from stoker_testdata import load_in_order as load


def expected(path: str, column: str) -> list:
    return pq.read_table(path, columns=[column])[column].to_pylist()


# ------------------------------------------------------------------------------ reconstruction

def ragged_rows(batch: Dict[str, Any], name: str, fill: Any = 0) -> list:
    """A ragged column with its masks as Python values, None where a mask says null; checks
    that null items hold what the guide says (empty lists and strings, `fill` elements)."""
    entry = batch[name]
    assert isinstance(entry, Ragged)
    offsets = [np.asarray(o) for o in entry.nested_offsets]
    flat = np.asarray(entry.flat_values)
    masks = []
    level = 1
    while f"{name}_mask_{level}" in batch:
        masks.append(np.asarray(batch[f"{name}_mask_{level}"]))
        level += 1
    strings = entry.flat_values is not None and _innermost_kind(entry) in ("utf8", "binary")
    if strings:
        bytes_offsets = offsets.pop()
        data = flat.tobytes()
        items: list = [data[b:e].decode() for b, e in zip(bytes_offsets, bytes_offsets[1:])]
    else:
        items = flat.tolist()
    assert len(masks) == len(offsets), (name, len(masks), len(offsets))
    leaf_mask = masks[-1]
    assert leaf_mask.dtype == np.bool_ and len(leaf_mask) == len(items)
    for item, valid in zip(items, leaf_mask.tolist()):
        if not valid:
            assert item == ("" if strings else fill)
    items = [v if m else None for v, m in zip(items, leaf_mask.tolist())]
    # Group upwards: offsets[d] groups the items of level d + 1 into those of level d.
    for depth in range(len(offsets) - 1, -1, -1):
        o = offsets[depth].tolist()
        grouped = [items[b:e] for b, e in zip(o, o[1:])]
        if depth == 0:
            row_mask = batch.get(name + "_mask")
            if row_mask is not None:
                for g, m in zip(grouped, np.asarray(row_mask).tolist()):
                    assert m or g == []
                grouped = [g if m else None for g, m in zip(grouped, np.asarray(row_mask).tolist())]
            return grouped
        mask = masks[depth - 1]
        assert len(mask) == len(grouped)
        for g, m in zip(grouped, mask.tolist()):
            assert m or g == []  # a null inner list is empty
        items = [g if m else None for g, m in zip(grouped, mask.tolist())]
    raise AssertionError("unreachable")


def _innermost_kind(entry: Ragged) -> str:
    while isinstance(entry.values, Ragged):
        entry = entry.values
    return entry.kind


def padded_rows(batch: Dict[str, Any], name: str, pad: Any, fill: Any = 0) -> list:
    """A padded column with its lengths and masks as Python values (None where null); checks
    padding holds `pad` with False masks, and null elements `fill`."""
    values = np.asarray(batch[name])
    depth = values.ndim - 1  # levels below the rows
    lengths = [np.asarray(batch[name + "_lengths"])] + [
        np.asarray(batch[f"{name}_lengths_{k}"]) for k in range(1, depth)]
    masks = [np.asarray(batch[f"{name}_mask_{k}"]) for k in range(1, depth + 1)]
    assert f"{name}_mask_{depth + 1}" not in batch
    for k, mask in enumerate(masks):
        assert mask.dtype == np.bool_
        assert mask.shape == values.shape[:k + 2]
    row_mask = np.asarray(batch[name + "_mask"]).tolist()

    def cut(index: tuple, n: int, level: int) -> list:
        # Items past n are padding: masked out.
        mask = masks[level][index]
        assert not mask[n:].any()
        out = []
        for j in range(n):
            at = index + (j,)
            if level == depth - 1:
                value = values[at].item()
                if not mask[j]:
                    assert value == fill
                out.append(value if mask[j] else None)
            elif mask[j]:
                out.append(cut(at, int(lengths[level + 1][at]), level + 1))
            else:
                assert lengths[level + 1][at] == 0
                out.append(None)
        return out

    rows = []
    for i in range(values.shape[0]):
        if not row_mask[i]:
            assert lengths[0][i] == 0 and not masks[0][i].any()
            rows.append(None)
            continue
        rows.append(cut((i,), int(lengths[0][i]), 0))
    # Everything that no length reaches is pad_value.
    reached = np.zeros(values.shape, dtype=bool)

    def mark(index: tuple, n: int, level: int) -> None:
        for j in range(n):
            at = index + (j,)
            if level == depth - 1:
                reached[at] = True
            else:
                mark(at, int(lengths[level + 1][at]), level + 1)
    for i in range(values.shape[0]):
        mark((i,), int(lengths[0][i]), 0)
    assert (values[~reached] == pad).all()
    return rows


def by_id(batches: List[Dict[str, Any]], rows_of) -> Dict[int, Any]:
    out = {}
    for batch in batches:
        for key, row in zip(np.asarray(batch["id"]).tolist(), rows_of(batch)):
            out[key] = row
    return out


# --------------------------------------------------------------------------------- fixtures

@pytest.fixture
def nulls_file(tmp_path) -> str:
    rng = np.random.default_rng(14)
    grid, words, flags, fixed, maps = [], [], [], [], []
    for i in range(37):
        row = []
        for _ in range(int(rng.integers(0, 4))):
            if rng.random() < 0.25:
                row.append(None)
            else:
                row.append([None if rng.random() < 0.2 else int(rng.integers(-9, 9))
                            for _ in range(int(rng.integers(0, 4)))])
        grid.append(None if i % 9 == 4 else row)
        words.append(None if i % 11 == 6 else
                     [None if rng.random() < 0.3 else f"w{i}.{k}" * int(rng.integers(0, 3))
                      for k in range(int(rng.integers(0, 4)))])
        flags.append(None if i % 8 == 2 else
                     [None if rng.random() < 0.3 else bool(rng.integers(0, 2))
                      for _ in range(int(rng.integers(0, 4)))])
        # No null rows: Arrow's Parquet reader cannot read a null fixed_size_list row back.
        fixed.append([None if rng.random() < 0.25 else float(rng.integers(0, 50)) / 4
                      for _ in range(3)])
        maps.append(None if i % 10 == 7 else
                    [(f"k{k}", None if rng.random() < 0.3 else
                      [int(rng.integers(0, 99)) for _ in range(int(rng.integers(0, 3)))])
                     for k in range(int(rng.integers(0, 3)))])
    table = pa.table({
        "id": pa.array(range(37), pa.int64()),
        "grid": pa.array(grid, pa.list_(pa.list_(pa.int64()))),
        "words": pa.array(words, pa.list_(pa.string())),
        "flags": pa.array(flags, pa.list_(pa.bool_())),
        "fixed": pa.array(fixed, pa.list_(pa.float32(), 3)),
        "m": pa.array(maps, pa.map_(pa.string(), pa.list_(pa.int32()))),
    })
    path = os.fspath(tmp_path / "nulls.parquet")
    pq.write_table(table, path, row_group_size=10)
    # The file really holds each kind of null.
    assert pa.compute.sum(table["grid"].combine_chunks().flatten().is_null()).as_py() > 0
    return path


def _want(path: str, column: str) -> Dict[int, Any]:
    ids = expected(path, "id")
    return dict(zip(ids, expected(path, column)))


# ---------------------------------------------------------------- delivered with null_mask

@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("batch_size", [3, 8])
def test_list_of_lists_ragged(nulls_file, shuffle, batch_size):
    batches = load(nulls_file, columns=["id", "grid"], lists="ragged", null_mask=["grid"],
                   shuffle=shuffle, batch_size=batch_size, seed=3)
    assert {"grid", "grid_mask", "grid_mask_1", "grid_mask_2"} <= set(batches[0])
    assert "grid_mask_3" not in batches[0]
    got = by_id(batches, lambda b: ragged_rows(b, "grid"))
    assert got == _want(nulls_file, "grid")


@pytest.mark.parametrize("shuffle", [False, True])
def test_list_of_lists_padded(nulls_file, shuffle):
    batches = load(nulls_file, columns=["id", "grid"], lists="padded", pad_value=-100,
                   null_mask=["grid"], shuffle=shuffle, batch_size=4, seed=5)
    got = by_id(batches, lambda b: padded_rows(b, "grid", pad=-100))
    assert got == _want(nulls_file, "grid")


def test_list_of_lists_fill_null_sets_null_elements(nulls_file):
    batches = load(nulls_file, columns=["id", "grid"], lists="ragged", null_mask=["grid"],
                   fill_null={"grid": 77})
    got = by_id(batches, lambda b: ragged_rows(b, "grid", fill=77))
    assert got == _want(nulls_file, "grid")


@pytest.mark.parametrize("shuffle", [False, True])
def test_list_of_strings_ragged(nulls_file, shuffle):
    batches = load(nulls_file, columns=["id", "words"], lists="ragged", null_mask=True,
                   shuffle=shuffle, batch_size=4, seed=9)
    assert {"words_mask", "words_mask_1"} <= set(batches[0])
    assert "words_mask_2" not in batches[0]
    entry = batches[0]["words"]
    assert len(batches[0]["words_mask_1"]) == int(entry.offsets[-1])
    got = by_id(batches, lambda b: ragged_rows(b, "words"))
    assert got == _want(nulls_file, "words")


@pytest.mark.parametrize("mode", ["ragged", "padded"])
def test_bool_lists(nulls_file, mode):
    batches = load(nulls_file, columns=["id", "flags"], lists=mode, null_mask=["flags"],
                   batch_size=5, shuffle=True, seed=1)
    if mode == "ragged":
        got = by_id(batches, lambda b: ragged_rows(b, "flags", fill=False))
    else:
        got = by_id(batches, lambda b: padded_rows(b, "flags", pad=False, fill=False))
    assert got == _want(nulls_file, "flags")


def test_bool_lists_take_fill_null_0_or_1(nulls_file):
    want = _want(nulls_file, "flags")
    batches = load(nulls_file, columns=["id", "flags"], lists="ragged", null_mask=["flags"],
                   fill_null={"flags": 1})
    assert by_id(batches, lambda b: ragged_rows(b, "flags", fill=True)) == want
    # Without null_mask, fill_null alone delivers them (no element mask; null rows still
    # need null_mask, so this file's rows are checked against a file without null rows).
    with pytest.raises(NullValueError, match=r"null_mask=\['flags'\]"):
        load(nulls_file, columns=["flags"], lists="ragged", fill_null={"flags": 1})
    with pytest.raises(InvalidOptionError, match=r"fill_null"):
        load(nulls_file, columns=["flags"], lists="ragged", null_mask=True, fill_null={"flags": 2})


def test_bool_list_fill_null_without_mask(tmp_path):
    path = os.fspath(tmp_path / "b.parquet")
    pq.write_table(pa.table({"b": pa.array([[True, None], [None], []], pa.list_(pa.bool_()))}),
                   path)
    batch = load(path, columns=["b"], lists="ragged", fill_null={"b": 1})[0]
    assert set(batch) == {"b"}
    assert batch["b"].tolist() == [[True, True], [True], []]


@pytest.mark.parametrize("shuffle", [False, True])
def test_fixed_size_lists(nulls_file, shuffle):
    batches = load(nulls_file, columns=["id", "fixed"], null_mask=["fixed"], shuffle=shuffle,
                   batch_size=4, seed=2)
    want = _want(nulls_file, "fixed")
    got = {}
    for b in batches:
        values, mask = np.asarray(b["fixed"]), np.asarray(b["fixed_mask_1"])
        assert values.shape == mask.shape == (len(b["id"]), 3) and mask.dtype == np.bool_
        assert (values[~mask] == 0).all()
        for key, row, m, valid in zip(b["id"].tolist(), values.tolist(), mask.tolist(),
                                      b["fixed_mask"].tolist()):
            assert valid or not any(m)
            got[key] = [v if ok else None for v, ok in zip(row, m)] if valid else None
    assert got == want


def test_fixed_size_lists_fill_null_without_mask(nulls_file):
    batches = load(nulls_file, columns=["id", "fixed"], fill_null={"fixed": -1})
    want = _want(nulls_file, "fixed")
    for b in batches:
        assert set(b) == {"id", "fixed"}
        for key, row in zip(b["id"].tolist(), np.asarray(b["fixed"]).tolist()):
            w = want[key]
            assert row == ([-1.0] * 3 if w is None else [-1.0 if v is None else v for v in w])


def test_nested_fixed_size_lists(tmp_path):
    # (A null inner fixed_size_list does not survive Arrow's Parquet reader: not tested here;
    # the decoder masks every element under one.)
    inner = pa.list_(pa.int16(), 2)
    rows = [[[1, None], [None, 2]], [[3, 4], [5, 6]]]
    path = os.fspath(tmp_path / "fsl.parquet")
    pq.write_table(pa.table({"t": pa.array(rows, pa.list_(inner, 2))}), path)
    batch = load(path, columns=["t"], null_mask=True)[0]
    assert batch["t"].shape == batch["t_mask_1"].shape == (2, 2, 2)
    assert batch["t_mask_1"].tolist() == [[[True, False], [False, True]],
                                          [[True, True], [True, True]]]
    assert batch["t"].tolist() == [[[1, 0], [0, 2]], [[3, 4], [5, 6]]]
    assert batch["t_mask"].tolist() == [True, True]
    filled = load(path, columns=["t"], fill_null={"t": -5})[0]
    assert set(filled) == {"t"}
    assert filled["t"].tolist() == [[[1, -5], [-5, 2]], [[3, 4], [5, 6]]]


def test_map_with_null_value_lists(nulls_file):
    batches = load(nulls_file, columns=["id", "m"], lists="ragged", null_mask=["m"],
                   batch_size=6, shuffle=True, seed=4)
    assert {"m.keys_mask_1", "m.values_mask_1", "m.values_mask_2"} <= set(batches[0])
    want = _want(nulls_file, "m")
    got_keys = by_id(batches, lambda b: ragged_rows(b, "m.keys"))
    got_values = by_id(batches, lambda b: ragged_rows(b, "m.values"))
    assert got_keys == {k: None if v is None else [p[0] for p in v] for k, v in want.items()}
    assert got_values == {k: None if v is None else [p[1] for p in v] for k, v in want.items()}


def test_masks_are_there_without_nulls(tmp_path):
    """Batch keys never depend on the data: a list column in null_mask always gets them."""
    path = os.fspath(tmp_path / "clean.parquet")
    pq.write_table(pa.table({"g": pa.array([[[1], []], []], pa.list_(pa.list_(pa.int8()))),
                             "f": pa.array([[1, 2], [3, 4]], pa.list_(pa.int8(), 2))}), path)
    ragged = load(path, lists="ragged", null_mask=True, batch_size=2)[0]
    assert set(ragged) == {"g", "g_mask", "g_mask_1", "g_mask_2", "f", "f_mask", "f_mask_1"}
    assert ragged["g_mask_1"].tolist() == [True, True] and ragged["g_mask_2"].tolist() == [True]
    padded = load(path, lists="padded", null_mask=["g"], batch_size=2)[0]
    assert set(padded) == {"g", "g_lengths", "g_lengths_1", "g_mask", "g_mask_1", "g_mask_2", "f"}
    assert padded["g_mask_1"].tolist() == [[True, True], [False, False]]
    assert padded["g_mask_2"].tolist() == [[[True], [False]], [[False], [False]]]
    with stoker.Loader(path, lists="ragged", null_mask=True, batch_size=2) as loader:
        assert loader.columns["g"].mask_levels == 2
        assert loader.columns["f"].mask_levels == 1


def test_mask_keys_clash_with_a_column(tmp_path):
    path = os.fspath(tmp_path / "clash.parquet")
    pq.write_table(pa.table({"l": pa.array([[1]], pa.list_(pa.int8())),
                             "l_mask_1": pa.array([1], pa.int8())}), path)
    with pytest.raises(InvalidOptionError, match="l_mask_1"):
        stoker.Loader(path, lists="ragged", null_mask=["l"], batch_size=1)


def test_torch_masks(nulls_file):
    torch = pytest.importorskip("torch")
    batch = load(nulls_file, columns=["grid"], lists="ragged", null_mask=True,
                 output="torch")[0]
    assert batch["grid_mask_2"].dtype == torch.bool
    assert isinstance(batch["grid"].flat_values, torch.Tensor)


# ------------------------------------------------------------------- transforms on strings

def test_vocabulary_on_list_of_strings_with_nulls(nulls_file):
    ops = stoker.ops
    transforms = {"words": [ops.vocabulary(["w3.0", "w5.1"])]}
    with pytest.raises(NullValueError, match=r"null_mask=\['words'\]"):
        load(nulls_file, columns=["id", "words"], lists="ragged", transforms=transforms,
             null_mask=["id"])
    batches = load(nulls_file, columns=["id", "words"], lists="ragged", transforms=transforms,
                   null_mask=True, fill_null={"words": 2})
    want = _want(nulls_file, "words")
    vocab = {"w3.0": 0, "w5.1": 1}
    got = by_id(batches, lambda b: ragged_rows(b, "words", fill=2))
    assert got == {k: None if v is None else [None if s is None else vocab.get(s, 2) for s in v]
                   for k, v in want.items()}


# --------------------------------------------------------------- refused without the option

def test_errors_name_the_option(tmp_path):
    """Without null_mask (no null rows here), each kind of null below the rows is refused by a
    NullValueError naming the column, file and row group and the option that delivers it."""
    path = os.fspath(tmp_path / "elements.parquet")
    pq.write_table(pa.table({
        "g": pa.array([[[1], None]], pa.list_(pa.list_(pa.int8()))),
        "e": pa.array([[[1, None]]], pa.list_(pa.list_(pa.int8()))),
        "w": pa.array([["a", None]], pa.list_(pa.string())),
        "b": pa.array([[True, None]], pa.list_(pa.bool_())),
        "f": pa.array([[1.0, None]], pa.list_(pa.float32(), 2)),
    }), path)
    where = r"elements\.parquet', row group 0"
    cases = {
        "g": r"null inner list\(s\) at level 1 in .*" + where + r".*null_mask=\['g'\]",
        "e": where + r".*fill_null=\{'e': value\}.*null_mask=\['e'\].*'e_mask_2'",
        "w": r"null string\(s\).*" + where + r".*null_mask=\['w'\]",
        "b": where + r".*fill_null=\{'b': 0 or 1\}.*null_mask=\['b'\].*'b_mask_1'",
        "f": where + r".*fill_null=\{'f': value\}.*null_mask=\['f'\].*'f_mask_1'",
    }
    for name, pattern in cases.items():
        with pytest.raises(NullValueError, match=rf"column '{name}' .*{pattern}"):
            load(path, columns=[name], lists="ragged")
        assert load(path, columns=[name], lists="ragged", null_mask=[name])


def test_inner_list_nulls_need_null_mask_even_with_fill_null(tmp_path):
    path = os.fspath(tmp_path / "inner.parquet")
    pq.write_table(pa.table({"g": pa.array([[[1], None]], pa.list_(pa.list_(pa.int8())))}), path)
    with pytest.raises(NullValueError, match=r"null inner list.*level 1.*null_mask=\['g'\]"):
        load(path, lists="ragged", fill_null={"g": 0})


# ------------------------------------------------------------------ parquet-testing files

def test_parquet_testing_nested_lists_of_strings():
    path = os.path.join(DATA, "nested_lists.snappy.parquet")
    batches = load(path, columns=["a"], lists="ragged", null_mask=True, batch_size=2)
    assert {"a_mask_1", "a_mask_2", "a_mask_3"} <= set(batches[0])
    assert [r for b in batches for r in ragged_rows(b, "a")] == expected(path, "a")


def test_parquet_testing_nested_maps():
    path = os.path.join(DATA, "nested_maps.snappy.parquet")
    want = expected(path, "a")
    for mode in ("ragged", "padded"):
        batches = load(path, columns=["a.values.keys", "a.values.values"], lists=mode,
                       null_mask=True, batch_size=4,
                       pad_value={"a.values.keys": -1, "a.values.values": False})
        for leaf, index in (("keys", 0), ("values", 1)):
            name = "a.values." + leaf
            if mode == "ragged":
                got = [r for b in batches for r in ragged_rows(b, name, fill=False)]
            else:
                pad = -1 if leaf == "keys" else False
                got = [r for b in batches for r in padded_rows(b, name, pad=pad, fill=False)]
            assert got == [None if row is None else
                           [None if inner is None else [p[index] for p in inner]
                            for _, inner in row] for row in want]


def test_parquet_testing_list_columns():
    path = os.path.join(DATA, "list_columns.parquet")
    batches = load(path, columns=["int64_list", "utf8_list"], lists="ragged", null_mask=True)
    assert [r for b in batches for r in ragged_rows(b, "int64_list")] == expected(
        path, "int64_list")
    assert [r for b in batches for r in ragged_rows(b, "utf8_list")] == expected(
        path, "utf8_list")


def test_parquet_testing_repeated_no_annotation():
    path = os.path.join(DATA, "repeated_no_annotation.parquet")
    batches = load(path, columns=["phoneNumbers.phone.kind"], lists="ragged", null_mask=True)
    want = [None if row is None else [p["kind"] for p in row["phone"]]
            for row in expected(path, "phoneNumbers")]
    assert [r for b in batches for r in ragged_rows(b, "phoneNumbers.phone.kind")] == want


# ------------------------------------------------------------------ determinism and cache

_digest = batch_bytes


@pytest.mark.parametrize("mode", ["ragged", "padded"])
def test_same_bytes_across_threads_and_cache(tmp_path, nulls_file, mode):
    columns = ["id", "grid", "flags", "fixed"] + (["words", "m"] if mode == "ragged" else
                                                  ["m.values"])
    kwargs = dict(columns=columns, lists=mode, null_mask=True, shuffle=True, seed=21,
                  batch_size=7, pad_value=0)
    reference = _digest(load(nulls_file, num_threads=1, **kwargs))
    assert _digest(load(nulls_file, num_threads=2, **kwargs)) == reference
    cache = os.fspath(tmp_path / "cache")
    cold = _digest(load(nulls_file, num_threads=2, cache_dir=cache, **kwargs))
    warm = _digest(load(nulls_file, num_threads=2, cache_dir=cache, **kwargs))
    assert cold == warm == reference


def test_list_chain_with_null_strings_same_bytes_cold_and_warm(tmp_path, nulls_file):
    """A list chain's output (cached) keeps its null elements: a warm run delivers the same
    bytes and masks as an uncached one."""
    kwargs = dict(columns=["id", "words"], lists="ragged", null_mask=True, shuffle=True, seed=8,
                  batch_size=5, transforms={"words": [stoker.ops.hash_bucket(13)]})
    reference = load(nulls_file, num_threads=1, **kwargs)
    want = _want(nulls_file, "words")
    got = by_id(reference, lambda b: ragged_rows(b, "words"))
    assert {k: None if v is None else [s is None for s in v] for k, v in want.items()} == {
        k: None if v is None else [s is None for s in v] for k, v in got.items()}
    cache = os.fspath(tmp_path / "cache")
    cold = _digest(load(nulls_file, num_threads=2, cache_dir=cache, **kwargs))
    warm = _digest(load(nulls_file, num_threads=2, cache_dir=cache, **kwargs))
    assert cold == warm == _digest(reference)


@pytest.mark.parametrize("mode", ["ragged", "padded"])
def test_null_struct_in_a_list_is_a_null_inner_list_of_its_leaf(tmp_path, mode):
    item = pa.struct([("x", pa.list_(pa.int32())), ("y", pa.int8())])
    rows = [[{"x": [1, None], "y": 1}, None, {"x": None, "y": None}], None, [], [{"x": [], "y": 2}]]
    path = os.fspath(tmp_path / "structs.parquet")
    pq.write_table(pa.table({"id": pa.array(range(4), pa.int64()),
                             "items": pa.array(rows, pa.list_(item))}), path)
    batches = load(path, columns=["id", "items"], lists=mode, null_mask=["items"], batch_size=3,
                   pad_value=-1)
    want_x = [None if r is None else [None if e is None else e["x"] for e in r] for r in rows]
    want_y = [None if r is None else [None if e is None else e["y"] for e in r] for r in rows]
    if mode == "ragged":
        got_x = by_id(batches, lambda b: ragged_rows(b, "items.x"))
        got_y = by_id(batches, lambda b: ragged_rows(b, "items.y"))
    else:
        got_x = by_id(batches, lambda b: padded_rows(b, "items.x", pad=-1))
        got_y = by_id(batches, lambda b: padded_rows(b, "items.y", pad=-1))
    assert got_x == dict(enumerate(want_x))
    assert got_y == dict(enumerate(want_y))
