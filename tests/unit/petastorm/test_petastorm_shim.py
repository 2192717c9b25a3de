"""stoker.petastorm (make_reader, make_batch_reader, the PyTorch loaders) and the Loader's
Petastorm detection, on a store in Petastorm's on-disk format written by Petastorm's own Python
helpers (no Spark: tests/system/test_petastorm_spark.py covers materialize_dataset). Every
comparison is against Petastorm 0.13.1's own readers."""

from __future__ import annotations

import inspect
import os
import warnings

import numpy as np
import pytest

import stoker
from stoker import errors

import petastorm_fixtures as pf

pytestmark = pytest.mark.skipif(bool(pf.missing()), reason=pf.missing() or "ok")

ROWS = 40


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("petastorm") / "everything")
    url = pf.write_with_helpers(path, pf.everything_schema(), pf.everything_rows(ROWS),
                                row_group_rows=8, files=2)
    return url


@pytest.fixture(scope="module")
def reference(store):
    """Petastorm's make_reader rows, by id."""
    return {int(row.id): row for row in pf.petastorm_rows(store, shuffle_row_groups=False)}


def _rows(url, **kwargs):
    from stoker.petastorm import make_reader

    kwargs.setdefault("seed", 1)
    with make_reader(url, **kwargs) as reader:
        return list(reader)


def _assert_row_equal(got, want, skip=()):
    assert set(got._fields) == set(want._fields)
    for name in got._fields:
        if name in skip:
            continue
        a, b = getattr(got, name), getattr(want, name)
        if a is None and isinstance(b, np.str_) and b == "nan":
            continue  # Petastorm 0.13.1 on pandas 3 turns a null string into 'nan'; stoker: None
        assert pf.value_key(a) == pf.value_key(b), (name, a, b)


# ------------------------------------------------------------------------------- make_reader


def test_make_reader_returns_petastorms_rows_value_for_value(store, reference):
    rows = _rows(store)
    assert sorted(int(r.id) for r in rows) == list(range(ROWS))
    for row in rows:
        _assert_row_equal(row, reference[int(row.id)])
    # Types as Petastorm gives them: numpy scalars of the field's dtype; a null float is NaN
    # (Petastorm reads through pandas), other nulls None.
    row = next(r for r in rows if int(r.id) == 3)
    assert type(row.id) is np.int32 and type(row.name) is np.str_ and np.isnan(row.score)
    assert next(r for r in rows if int(r.id) == 1).maybe is None
    assert next(r for r in rows if int(r.id) == 4).name is None


def test_schema_fields_take_names_patterns_and_unischema_fields(store):
    pf.apply_compat()
    schema = pf.everything_schema()
    rows = _rows(store, schema_fields=["id", "png_.*", schema.fields["mat"]])
    assert rows[0]._fields == ("id", "png_rgb", "png_gray", "mat")
    with pytest.raises(errors.InvalidOptionError, match="'nope'"):
        _rows(store, schema_fields=["id", "nope"])


def test_order_is_a_function_of_the_seed_not_of_workers_count(store):
    ids = lambda **kw: [int(r.id) for r in _rows(store, schema_fields=["id"], **kw)]  # noqa: E731
    first = ids(seed=7, workers_count=1)
    assert first == ids(seed=7, workers_count=4)
    assert sorted(first) == list(range(ROWS))
    assert first != ids(seed=8, workers_count=4)
    # Row-group shuffle only (Petastorm's default): rows inside a row group keep their order.
    # (two files of 20 rows, row groups of 8, 8 and 4 rows)
    groups = {start: list(range(start, start + size)) for start, size in
              ((0, 8), (8, 8), (16, 4), (20, 8), (28, 8), (36, 4))}
    position, order = 0, []
    while position < ROWS:
        group = groups[first[position]]
        assert first[position:position + len(group)] == group
        order.append(group[0])
        position += len(group)
    assert order != sorted(order)
    shuffled = ids(seed=7, shuffle_rows=True)
    assert sorted(shuffled) == list(range(ROWS)) and shuffled != first
    assert ids(shuffle_row_groups=False) == list(range(ROWS))


def test_shards_deliver_every_row_exactly_once(store):
    seen = []
    for shard in range(3):
        rows = _rows(store, schema_fields=["id"], cur_shard=shard, shard_count=3, seed=5)
        again = _rows(store, schema_fields=["id"], cur_shard=shard, shard_count=3, seed=5)
        assert [r.id for r in rows] == [r.id for r in again]
        seen += [int(r.id) for r in rows]
    assert sorted(seen) == list(range(ROWS))


def test_num_epochs_reset_stop_and_with(store):
    from stoker.petastorm import make_reader

    reader = make_reader(store, schema_fields=["id"], num_epochs=2, seed=3)
    ids = [int(r.id) for r in reader]
    assert sorted(ids) == sorted(list(range(ROWS)) * 2)
    assert ids[:ROWS] != ids[ROWS:]  # each epoch shuffled anew
    assert reader.last_row_consumed
    reader.reset()
    assert len([r for r in reader]) == 2 * ROWS
    reader.stop()
    reader.join()
    assert list(reader) == []
    forever = make_reader(store, schema_fields=["id"], num_epochs=None, seed=3)
    taken = [next(forever) for _ in range(3 * ROWS + 5)]
    assert sorted(int(r.id) for r in taken[:3 * ROWS]) == sorted(list(range(ROWS)) * 3)
    forever.stop()
    with make_reader(store, schema_fields=["id"], seed=3) as reader:
        assert next(reader).id in range(ROWS)


def test_predicate_is_honoured_like_petastorm(store):
    pf.apply_compat()
    from petastorm.predicates import in_lambda

    predicate = in_lambda(["id", "flag"], lambda i, f: bool(f) and i < 20)
    rows = _rows(store, predicate=predicate, schema_fields=["id", "flag", "mat"])
    # The reference: Petastorm's rows, filtered by the same predicate object. (Petastorm's own
    # predicate path intermittently returns no rows at all here, so it is not the reference.)
    want = [r for r in pf.petastorm_rows(store, schema_fields=["id", "flag", "mat"])
            if predicate.do_include({"id": r.id, "flag": r.flag})]
    assert sorted(pf.row_key(r) for r in rows) == sorted(pf.row_key(r) for r in want)
    assert sorted(int(r.id) for r in rows) == list(range(1, 20, 2))


def test_local_disk_cache_maps_to_stokers_cache(store, tmp_path):
    cache = tmp_path / "cache"
    first = _rows(store, cache_type="local-disk", cache_location=str(cache),
                  cache_size_limit=10**8, schema_fields=["id", "mat", "png_rgb"])
    assert any(cache.iterdir())
    second = _rows(store, cache_type="local-disk", cache_location=str(cache),
                   cache_size_limit=10**8, schema_fields=["id", "mat", "png_rgb"])
    assert [pf.row_key(r) for r in first] == [pf.row_key(r) for r in second]


@pytest.mark.parametrize("kwargs, needle", [
    ({"rowgroup_selector": object()}, "rowgroup_selector"),
    ({"filters": [("id", "<", 3)]}, "filters"),
    ({"cache_type": "memory"}, "cache_type"),
    ({"cache_type": "local-disk"}, "cache_location"),
    ({"cur_shard": 0}, "cur_shard"),
    ({"cur_shard": 3, "shard_count": 3}, "cur_shard"),
    ({"cur_shard": 0, "shard_count": 2, "seed": None}, "seed="),
    ({"num_epochs": 0}, "num_epochs"),
    ({"predicate": lambda row: True}, "predicate"),
    ({"schema_fields": "id"}, "schema_fields"),
])
def test_arguments_that_would_change_results_are_refused(store, kwargs, needle):
    from stoker.petastorm import make_reader

    kwargs.setdefault("seed", 1)
    with pytest.raises(errors.InvalidOptionError, match=needle):
        make_reader(store, **kwargs)


def test_filesystem_objects_and_hdfs_are_refused_with_the_alternative(store):
    import pyarrow.fs as pafs

    from stoker.petastorm import make_reader

    with pytest.raises(errors.InvalidOptionError, match="storage_options"):
        make_reader(store, filesystem=pafs.S3FileSystem(anonymous=True, region="us-east-1"))
    with pytest.raises(errors.InvalidOptionError, match="HDFS"):
        make_reader("hdfs://namenode/data")
    assert len(_rows(store, filesystem=pafs.LocalFileSystem(), schema_fields=["id"])) == ROWS


def test_arguments_without_effect_warn_once_naming_them(store):
    import stoker.petastorm as shim

    shim._WARNED.clear()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _rows(store, reader_pool_type="process", results_queue_size=5, schema_fields=["id"])
        _rows(store, reader_pool_type="process", results_queue_size=5, schema_fields=["id"])
        _rows(store, convert_early_to_numpy=True, schema_fields=["id"])
    texts = [str(w.message) for w in caught if "stoker.petastorm ignores" in str(w.message)]
    assert len(texts) == 2
    assert any("reader_pool_type" in t for t in texts)
    assert any("results_queue_size" in t for t in texts)


# ------------------------------------------------------------------------- make_batch_reader


def test_make_batch_reader_matches_petastorms_columns(store, reference):
    from stoker.petastorm import make_batch_reader

    scalars = ["id", "big", "score", "flag", "name"]
    with make_batch_reader(store, seed=2) as reader:
        batches = list(reader)
    want = pf.petastorm_batches(store, schema_fields=scalars, shuffle_row_groups=False)
    got = {name: np.concatenate([getattr(b, name) for b in batches]) for name in batches[0]._fields}
    ref = {name: np.concatenate([getattr(b, name) for b in want]) for name in scalars}
    order, ref_order = np.argsort(got["id"]), np.argsort(ref["id"])
    # A null string: None in stoker, 'nan' in Petastorm 0.13.1 on pandas 3.
    assert got["name"].dtype == object and sum(v is None for v in got["name"]) == 6
    got["name"] = np.array(["nan" if v is None else v for v in got["name"]])
    for name in scalars:
        a, b = got[name][order], ref[name][ref_order]
        assert a.dtype == b.dtype, name
        np.testing.assert_array_equal(a, b)
    # Codec fields arrive decoded (Petastorm's batch reader hands out the encoded bytes).
    for position, i in enumerate(order[:5]):
        row = reference[int(got["id"][i])]
        assert got["png_rgb"][i].tobytes() == row.png_rgb.tobytes()
        assert pf.value_key(got["var"][i]) == pf.value_key(row.var)
        del position


# ---------------------------------------------------------------------- the Loader's detection


def test_loader_decodes_a_petastorm_store_automatically(store, reference):
    fixed = ["id", "png_rgb", "png_gray", "jpg_rgb", "jpg_gray", "mat", "zmat"]
    loader = stoker.Loader(store[len("file://"):], columns=fixed, batch_size=8, shuffle=False)
    assert loader.columns["mat"].dtype == "float32"
    seen = 0
    for batch in loader:
        assert batch["png_gray"].shape == (8, 12, 16)  # Petastorm's [H, W] for gray images
        for j, i in enumerate(batch["id"]):
            want = reference[int(i)]
            for name in fixed[1:]:
                assert batch[name][j].tobytes() == getattr(want, name).tobytes(), name
            seen += 1
    assert seen == ROWS


def test_loader_names_the_choice_for_a_variable_shape(store):
    with pytest.raises(errors.UnsupportedTypeError, match=r"'var'.*\(None,\).*petastorm=False"):
        stoker.Loader(store, columns=["id", "var"], batch_size=8)
    raw = stoker.Loader(store, columns=["id", "var"], batch_size=8, shuffle=False,
                        petastorm=False)
    assert next(iter(raw))["var"].kind == "binary"
    # A user chain after the decode makes it fixed: decode_npy(-1) + the user's ops.
    from stoker import ops

    loader = stoker.Loader(store, columns=["jpg_rgb"], batch_size=8, shuffle=False,
                           transforms={"jpg_rgb": [ops.center_crop(8)]})
    assert next(iter(loader))["jpg_rgb"].shape == (8, 8, 8, 3)


# ------------------------------------------------------------------------------- PyTorch


def test_pytorch_dataloader_batches_rows_like_petastorm(store):
    import torch

    from stoker.petastorm import make_reader
    from stoker.petastorm.pytorch import DataLoader

    fields = ["id", "flag", "png_rgb", "mat"]
    with make_reader(store, schema_fields=fields, seed=4) as reader:
        rows = list(reader)
    with DataLoader(make_reader(store, schema_fields=fields, seed=4), batch_size=16) as loader:
        batches = list(loader)
        assert [len(b["id"]) for b in batches] == [16, 16, 8]
        assert batches[0]["flag"].dtype == torch.uint8  # Petastorm's bool -> uint8
        np.testing.assert_array_equal(torch.cat([b["id"] for b in batches]).numpy(),
                                      [r.id for r in rows])
        np.testing.assert_array_equal(torch.cat([b["png_rgb"] for b in batches]).numpy(),
                                      np.stack([r.png_rgb for r in rows]))
        # A second pass resets the reader (Petastorm does the same).
        assert sum(len(b["id"]) for b in loader) == ROWS
    # A custom collate_fn sees a list of row dicts.
    loader = DataLoader(make_reader(store, schema_fields=["id", "name"], seed=4), batch_size=8,
                        collate_fn=lambda rows: [r["id"] for r in rows])
    with pytest.raises(TypeError, match="None in name"):
        list(loader)


def test_shuffling_queue_is_reproducible(store):
    from stoker.petastorm import make_batch_reader
    from stoker.petastorm.pytorch import BatchedDataLoader

    def ids():
        reader = make_batch_reader(store, schema_fields=["id", "mat"], seed=9)
        loader = BatchedDataLoader(reader, batch_size=5, shuffling_queue_capacity=12,
                                   transform_fn=lambda b: {**b, "twice": b["id"] * 2})
        out = []
        for batch in loader:
            assert batch["mat"].shape[1:] == (3, 4)
            assert (batch["twice"] == batch["id"] * 2).all()
            out += batch["id"].tolist()
        return out

    first = ids()
    assert sorted(first) == list(range(ROWS)) and first == ids()


@pytest.mark.skipif("transform" not in inspect.signature(stoker.Loader.__init__).parameters,
                    reason="needs Loader(transform=...) from the TransformSpec branch")
def test_transform_spec_runs_through_loader_transform(store):
    from stoker.petastorm import TransformSpec, make_reader

    def add_one(row):
        row["id"] = row["id"] + 1
        return row

    with make_reader(store, schema_fields=["id"], seed=1, shuffle_row_groups=False,
                     transform_spec=TransformSpec(add_one)) as reader:
        assert sorted(int(r.id) for r in reader) == list(range(1, ROWS + 1))


def test_make_batch_reader_on_plain_parquet_matches_petastorm(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stoker.petastorm import make_batch_reader

    table = pa.table({
        "id": pa.array(np.arange(10, dtype=np.int64)),
        "x": pa.array([1.5, None, 2.5, 3, 4, 5, 6, 7, 8, 9], pa.float32()),
        "k": pa.array([1, 2, None, 4, 5, 6, 7, 8, 9, 10], pa.int32()),
        "tags": pa.array([[i, i + 1] for i in range(10)], pa.list_(pa.int64())),
    })
    pq.write_table(table, str(tmp_path / "a.parquet"), row_group_size=5)
    url = "file://" + str(tmp_path)
    want = pf.petastorm_batches(url, shuffle_row_groups=False)
    with make_batch_reader(url, shuffle_row_groups=False) as reader:
        got = list(reader)
    for name in ("id", "x", "k", "tags"):
        a = np.concatenate([getattr(b, name) for b in got])
        b = np.concatenate([getattr(b, name) for b in want])
        assert a.dtype == b.dtype and a.shape == b.shape, name  # ints with nulls: float64 NaN
        np.testing.assert_array_equal(a, b)


def test_nulls_inside_lists_are_refused_not_zeroed(tmp_path):
    """The reader masks nullable columns for None rows; a null element inside a list has no
    Petastorm form, so it is refused (as before element masks existed), never delivered as 0."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from stoker.petastorm import make_batch_reader

    pq.write_table(pa.table({
        "id": pa.array(np.arange(4, dtype=np.int64)),
        "tags": pa.array([[1, 2], None, [3, None], []], pa.list_(pa.int64())),
    }), str(tmp_path / "a.parquet"))
    url = "file://" + str(tmp_path)
    with make_batch_reader(url, shuffle_row_groups=False) as reader:
        with pytest.raises(errors.NullValueError, match=r"'tags'.*null_mask=\['tags'\]"):
            list(reader)
    pq.write_table(pa.table({
        "id": pa.array(np.arange(4, dtype=np.int64)),
        "tags": pa.array([[1, 2], None, [3], []], pa.list_(pa.int64())),
    }), str(tmp_path / "a.parquet"))
    with make_batch_reader(url, shuffle_row_groups=False) as reader:
        batches = list(reader)
    assert set(batches[0]._fields) == {"id", "tags"}


def test_stop_from_another_thread_ends_the_iteration(store):
    import threading

    from stoker.petastorm import make_reader

    reader = make_reader(store, schema_fields=["id", "png_rgb"], num_epochs=None, seed=1)
    next(reader)
    stopper = threading.Timer(0.2, reader.stop)
    stopper.start()
    count = sum(1 for _ in reader)  # would never end without stop()
    stopper.join()
    assert count > 0


def test_dataloader_over_a_batch_reader_cuts_rows_like_petastorm(store):
    from stoker.petastorm import make_batch_reader
    from stoker.petastorm.pytorch import DataLoader

    loader = DataLoader(make_batch_reader(store, schema_fields=["id", "zmat"], seed=2),
                        batch_size=7)
    sizes, ids = [], []
    for batch in loader:
        sizes.append(len(batch["id"]))
        ids += batch["id"].tolist()
        assert tuple(batch["zmat"].shape[1:]) == (2, 5)
    assert sizes == [7] * 5 + [5] and sorted(ids) == list(range(ROWS))


def test_describe_shows_the_decoded_fields(store):
    described = {c.name: c for c in stoker.describe(store[len("file://"):]).columns}
    assert list(described["mat"].inner_shape) == [3, 4] and described["mat"].dtype == "float32"
    assert list(described["png_rgb"].inner_shape) == [12, 16, 3]
    raw = {c.name: c for c in stoker.describe(store[len("file://"):], petastorm=False).columns}
    assert raw["mat"].annotation == "binary"


def test_lists_makes_a_varying_first_dimension_ragged_or_padded(store, reference):
    path = store[len("file://"):]
    ragged = stoker.Loader(path, columns=["id", "var", "cloud"], batch_size=8, shuffle=False,
                           lists={"var": "ragged", "cloud": "ragged"})
    padded = stoker.Loader(path, columns=["id", "var", "cloud"], batch_size=8, shuffle=False,
                           lists="padded", pad_value={"var": -1, "cloud": 0})
    for a, b in zip(ragged, padded):
        for j, i in enumerate(a["id"].tolist()):
            want = reference[i]
            np.testing.assert_array_equal(a["var"][j], want.var)
            np.testing.assert_array_equal(a["cloud"][j], want.cloud)
            n = len(want.var)
            assert b["var_lengths"][j] == n and (b["var"][j, n:] == -1).all()
            np.testing.assert_array_equal(b["var"][j, :n], want.var)
            np.testing.assert_array_equal(b["cloud"][j, :len(want.cloud)], want.cloud)
        assert a["cloud"].values.shape[1:] == (3,) and b["cloud"].shape[2:] == (3,)
    torch_batch = next(iter(stoker.Loader(path, columns=["var"], batch_size=8, shuffle=False,
                                          lists="padded", output="torch")))
    assert str(torch_batch["var"].dtype) == "torch.int64" and "var_lengths" in torch_batch


def test_unreadable_columns_are_left_out_with_a_warning_unless_named(tmp_path):
    import decimal

    import pyarrow as pa
    import pyarrow.parquet as pq

    from stoker.petastorm import make_batch_reader

    table = pa.table({"id": pa.array(np.arange(6, dtype=np.int64)),
                      "price": pa.array([decimal.Decimal("1.25")] * 6, pa.decimal128(5, 2))})
    pq.write_table(table, str(tmp_path / "a.parquet"))
    with pytest.warns(UserWarning, match="ignores price"):
        with make_batch_reader("file://" + str(tmp_path), seed=1) as reader:
            assert next(reader)._fields == ("id",)
    with pytest.raises(errors.UnsupportedTypeError, match="price"):
        make_batch_reader("file://" + str(tmp_path), schema_fields=["id", "price"], seed=1)


def _double_mat(row):
    row["mat"] = row["mat"] * 2
    return row


def test_transform_spec_sees_decoded_fields_as_in_petastorm(store, reference):
    """Petastorm decodes the codec fields before a TransformSpec's function; so does stoker."""
    from stoker.petastorm import TransformSpec

    rows = _rows(store, schema_fields=["id", "mat", "jpg_rgb"], shuffle_row_groups=False,
                 transform_spec=TransformSpec(_double_mat))
    assert sorted(int(r.id) for r in rows) == sorted(reference)
    for row in rows:
        want = reference[int(row.id)]
        assert row.mat.dtype == np.float32 and row.mat.shape == (3, 4)
        np.testing.assert_array_equal(row.mat, want.mat * 2)
        np.testing.assert_array_equal(row.jpg_rgb, want.jpg_rgb)


# ------------------------------------------------- TransformSpec and predicates, per reader


def _petastorm_spec(*args, **kwargs):
    pf.apply_compat()
    from petastorm.transform import TransformSpec

    return TransformSpec(*args, **kwargs)


def _row_function(row):
    """Petastorm's make_reader contract: one row as a dict of decoded values, edited in place.
    (On a DataFrame, ``row["mat"] @ ...`` or ``len(row["var"])`` would compute something else.)"""
    row["mat_sum"] = np.float64(row["mat"].sum())
    row["var_len"] = len(row["var"])
    row["mat"] = row["mat"] @ np.ones((4, 2), np.float32)
    row["label"] = None if row["name"] is None or row["name"] == "nan" else row["name"].upper()
    del row["png_rgb"]
    return row


_ROW_EDITS = [("mat_sum", np.float64, (), False), ("var_len", np.int64, (), False),
              ("mat", np.float32, (3, 2), False), ("label", np.str_, (), True)]
_ROW_FIELDS = ["id", "big", "score", "name", "png_rgb", "png_gray", "mat", "var", "maybe"]


def test_make_reader_calls_the_transform_once_per_row_with_a_dict_like_petastorm(store):
    """The same TransformSpec through Petastorm's make_reader and stoker's: the same rows,
    value for value and type for type (issue 22, item 3: stoker passed a DataFrame)."""
    from stoker.petastorm import make_reader

    kwargs = dict(schema_fields=_ROW_FIELDS, shuffle_row_groups=False)
    want = pf.petastorm_rows(store, transform_spec=_petastorm_spec(
        _row_function, edit_fields=_ROW_EDITS, removed_fields=["big", "png_rgb"]), **kwargs)
    with make_reader(store, seed=1, transform_spec=_petastorm_spec(
            _row_function, edit_fields=_ROW_EDITS, removed_fields=["big", "png_rgb"]),
            **kwargs) as reader:
        got = list(reader)
        schema = reader.schema
    assert len(got) == len(want) == ROWS
    # Petastorm's transformed schema: the view less removed and edited fields, then the edits.
    assert list(schema.fields) == ["id", "score", "name", "png_gray", "var", "maybe", "mat_sum",
                                   "var_len", "mat", "label"]
    assert got[0]._fields == tuple(schema.fields)
    assert schema.fields["mat"].shape == (3, 2) and schema.fields["mat_sum"].codec is None
    by_id = {int(r.id): r for r in want}
    for row in got:
        _assert_row_equal(row, by_id[int(row.id)])
    row = next(r for r in got if int(r.id) == 3)
    assert type(row.mat_sum) is np.float64 and type(row.var_len) is int
    assert row.mat.shape == (3, 2) and np.isnan(row.score)


def test_make_reader_transform_and_predicate_in_petastorms_order(store):
    """The predicate sees the stored values of its fields (before the transform), the function
    only the rows it kept; removed_fields go even when the function leaves them."""
    from stoker.petastorm import make_reader
    from stoker.petastorm.predicates import in_lambda

    seen = []

    def fn(row):
        seen.append(int(row["id"]))
        row["id"] = row["id"] * 100
        return row

    spec = _petastorm_spec(fn, removed_fields=["flag"])
    with make_reader(store, schema_fields=["id", "flag"], seed=3, transform_spec=spec,
                     predicate=in_lambda(["id", "flag"], lambda i, f: bool(f) and i < 20)) as r:
        ids = sorted(int(row.id) for row in r)
    assert ids == [i * 100 for i in range(1, 20, 2)]
    assert sorted(seen) == list(range(1, 20, 2))


@pytest.mark.parametrize("returned, needle", [
    (lambda row: {**row, "extra": 1}, "extra extra"),
    (lambda row: {"id": row["id"]}, "missing flag"),
    (lambda row: None, "returned NoneType"),
])
def test_make_reader_transform_output_must_be_the_schema(store, returned, needle):
    from stoker.petastorm import TransformSpec, make_reader

    with make_reader(store, schema_fields=["id", "flag"], seed=1,
                     transform_spec=TransformSpec(returned)) as reader:
        with pytest.raises(errors.TransformError, match=needle):
            next(reader)


def _plain_store(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    n = 40
    table = pa.table({
        "id": pa.array(np.arange(n, dtype=np.int64)),
        "k": pa.array(np.arange(n, dtype=np.int32) * 3),
        "i": pa.array([None if i % 6 == 1 else i for i in range(n)], pa.int32()),
        "f": pa.array([None if i % 5 == 2 else i / 4 for i in range(n)], pa.float32()),
        "s": pa.array([None if i % 7 == 3 else f"s{i}" for i in range(n)]),
        "t": pa.array([f"t{i % 3}" for i in range(n)]),
        "b": pa.array([None if i % 8 == 5 else i % 2 == 0 for i in range(n)]),
        "bin": pa.array([None if i % 9 == 6 else bytes([i]) * 2 for i in range(n)]),
        "fix": pa.array([[i, -i] for i in range(n)], pa.list_(pa.int16())),
    })
    pq.write_table(table, str(tmp_path / "a.parquet"), row_group_size=10)
    return "file://" + str(tmp_path)


def _frame_function(df):
    """Petastorm's make_batch_reader contract: one DataFrame per row group (here per batch)."""
    df["ratio"] = df["k"] / (df["id"] + 1)
    df["k"] = df["k"] * 2
    df["i2"] = df["i"] * 2  # float64 with NaN, as the nulls make it in pandas
    df["upper"] = df["t"].str.upper()
    df["fix_sum"] = df["fix"].map(lambda v: int(v.sum()))
    return df


def test_make_batch_reader_transform_gets_a_dataframe_like_petastorm(tmp_path):
    from stoker.petastorm import make_batch_reader

    url = _plain_store(tmp_path)
    edits = [("ratio", np.float64, (), False), ("k", np.float32, (), False),
             ("i2", np.float64, (), True), ("upper", np.str_, (), False),
             ("fix_sum", np.int64, (), False)]
    fields = ["id", "k", "i", "f", "t", "fix"]
    want = pf.petastorm_batches(url, schema_fields=fields, shuffle_row_groups=False,
                                transform_spec=_petastorm_spec(_frame_function, edits, ["t"]))
    with make_batch_reader(url, schema_fields=fields, seed=2, transform_spec=_petastorm_spec(
            _frame_function, edits, ["t"])) as reader:
        got = list(reader)
        schema = reader.schema
    assert schema is None  # plain Parquet: no Unischema, as before
    assert set(got[0]._fields) == set(want[0]._fields) == {
        "id", "k", "i", "f", "fix", "ratio", "i2", "upper", "fix_sum"}
    a = {n: np.concatenate([getattr(b, n) for b in got]) for n in got[0]._fields}
    b = {n: np.concatenate([np.asarray(getattr(x, n)) for x in want]) for n in got[0]._fields}
    order, ref = np.argsort(a["id"]), np.argsort(b["id"])
    for name in a:
        x, y = a[name][order], b[name][ref]
        if name == "upper":  # Petastorm 0.13.1 on pandas 3 returns a pandas string array here
            assert x.dtype.kind == "U"
            y = y.astype(str)
        # No cast to edit_fields' numpy_dtype, as in Petastorm: k stays what pandas made it.
        assert x.dtype == y.dtype, (name, x.dtype, y.dtype)
        np.testing.assert_array_equal(x, y, err_msg=name)


def test_make_batch_reader_transform_output_must_be_the_schema(tmp_path):
    from stoker.petastorm import TransformSpec, make_batch_reader

    url = _plain_store(tmp_path)
    with make_batch_reader(url, schema_fields=["id", "k"], seed=1, transform_spec=TransformSpec(
            lambda df: df.assign(extra=1))) as reader:
        with pytest.raises(errors.TransformError, match="extra extra"):
            next(reader)
    with make_batch_reader(url, schema_fields=["id", "k"], seed=1, transform_spec=TransformSpec(
            lambda df: df.to_dict())) as reader:
        with pytest.raises(errors.TransformError, match="returned dict"):
            next(reader)


def test_make_batch_reader_predicate_gets_a_dataframe_like_petastorm(tmp_path):
    """Petastorm's batch reader passes the predicate a DataFrame; a vectorized in_lambda
    works, and stoker's own predicates evaluate it row by row."""
    from stoker.petastorm import make_batch_reader, make_reader
    from stoker.petastorm.predicates import in_lambda, in_negate, in_reduce, in_set

    url = _plain_store(tmp_path)
    seen = []

    def vectorized(ids):
        seen.append(type(ids).__name__)
        return ids.isin([1, 4, 9, 16, 25, 36])

    with make_batch_reader(url, schema_fields=["id", "t"], seed=1,
                           predicate=in_lambda(["id"], vectorized)) as reader:
        ids = sorted(np.concatenate([b.id for b in reader]).tolist())
    assert ids == [1, 4, 9, 16, 25, 36] and set(seen) == {"Series"}
    predicate = in_reduce([in_set(["t1"], "t"), in_negate(in_set([4, 7], "id"))], all)
    with make_batch_reader(url, schema_fields=["id", "t"], seed=1, predicate=predicate) as r:
        batch_ids = sorted(np.concatenate([b.id for b in r]).tolist())
    with make_reader(url, schema_fields=["id", "t"], seed=1, predicate=predicate) as r:
        row_ids = sorted(int(row.id) for row in r)
    assert batch_ids == row_ids == [i for i in range(40) if i % 3 == 1 and i not in (4, 7)]
    with make_batch_reader(url, schema_fields=["id"], seed=1,
                           predicate=in_lambda(["id"], lambda ids: True)) as reader:
        with pytest.raises(errors.TransformError, match="one bool per row"):
            next(reader)


def test_stokers_predicates_keep_the_rows_petastorms_keep(store):
    """Each of Petastorm's predicates, Petastorm's class in Petastorm's make_reader and
    stoker's in stoker's: the same rows (in_pseudorandom_split hashes like Petastorm)."""
    pf.apply_compat()
    import petastorm.predicates as theirs

    import stoker.petastorm.predicates as ours

    def cases(p):
        return {
            "in_set": p.in_set({3, 5, 11, 12}, "id"),
            "in_intersection": p.in_intersection([0, 12, 36], "var"),
            "in_lambda": p.in_lambda(["id", "score"], lambda i, s: i % 3 == 0 or s > 0.5),
            "in_negate": p.in_negate(p.in_set({3, 5}, "id")),
            "in_reduce": p.in_reduce([p.in_set({1, 2, 3, 4}, "id"),
                                      p.in_lambda(["flag"], lambda f: bool(f))], all),
            "split_id": p.in_pseudorandom_split([0.3, 0.3, 0.4], 1, "id"),
            "split_name": p.in_pseudorandom_split([0.5, 0.5], 0, "name"),
            "split_score": p.in_pseudorandom_split([0.6, 0.4], 1, "score"),
        }

    fields = ["id", "score", "flag", "name", "var"]
    for name, predicate in cases(ours).items():
        got = sorted(int(r.id) for r in _rows(store, schema_fields=fields, predicate=predicate))
        want = sorted(int(r.id) for r in pf.petastorm_rows(
            store, schema_fields=fields, shuffle_row_groups=False,
            predicate=cases(theirs)[name]))
        if name == "split_name":  # Petastorm hashes its null strings as 'nan'; stoker's are None
            want = [i for i in want if i % 7 != 4]
            got = [i for i in got if i % 7 != 4]
        assert got == want, name
        assert 0 < len(got) < ROWS, name
    for text in ["", "row-1", "nan", "None", "日本語", str(np.float32(0.1)), str(2 ** 70)]:
        assert ours._string_to_bucket(text, 2 ** 63 - 1) == \
            theirs._string_to_bucket(text, 2 ** 63 - 1)


def test_loader_transform_on_a_petastorm_store_gets_arrays(store, reference):
    seen = []

    def fn(arrays):
        seen.append(type(arrays["mat"][0]))
        return {"id": arrays["id"], "mat_sum": np.array([m.sum() for m in arrays["mat"]],
                                                        dtype=np.float32)}

    with stoker.Loader(store, transform=fn, transform_columns=["id", "mat"], batch_size=8,
                       shuffle=False, drop_last=False) as loader:
        got = {int(i): float(s) for b in loader for i, s in zip(b["id"], b["mat_sum"])}
    assert set(seen) == {np.ndarray}
    assert got == pytest.approx({i: float(r.mat.sum()) for i, r in reference.items()})


def test_strings_and_nulls_are_what_the_migration_doc_says(tmp_path):
    """docs/migrating-from-petastorm.md, "Strings and nulls": each case as Petastorm 0.13.1
    gives it, but for one deliberate difference: a null string is None (Petastorm: 'nan')."""
    from stoker.petastorm import make_batch_reader, make_reader

    url = _plain_store(tmp_path)
    fields = ["id", "i", "f", "s", "t", "b", "bin"]
    with make_reader(url, schema_fields=fields, seed=0) as reader:
        ours = {int(r.id): r for r in reader}
    theirs = {int(r.id): r for r in pf.petastorm_rows(url, schema_fields=fields,
                                                       shuffle_row_groups=False)}
    for i, row in ours.items():
        want = theirs[i]
        for name in fields:
            a, b = getattr(row, name), getattr(want, name)
            if name == "s" and i % 7 == 3:
                assert a is None and b == "nan"  # the one difference
                continue
            assert type(a) is type(b), (i, name, a, b)
            assert pf.value_key(a) == pf.value_key(b), (i, name, a, b)
    assert type(ours[0].s) is np.str_ and type(ours[0].bin) is np.bytes_  # numpy_dtype(value)
    assert ours[1].i is None and ours[5].b is None and ours[6].bin is None  # null int/bool/bytes
    assert type(ours[2].f) is np.float32 and np.isnan(ours[2].f)  # null float: NaN of its type

    with make_batch_reader(url, schema_fields=fields, seed=0, shuffle_row_groups=False) as r:
        got = list(r)
    want = pf.petastorm_batches(url, schema_fields=fields, shuffle_row_groups=False)
    a = {n: np.concatenate([getattr(x, n) for x in got]) for n in fields}
    b = {n: np.concatenate([getattr(x, n) for x in want]) for n in fields}
    order, ref = np.argsort(a["id"]), np.argsort(b["id"])
    for name in fields:
        x, y = a[name][order], b[name][ref]
        if name == "s":  # with nulls: object with None (Petastorm: '<U' with 'nan')
            assert x.dtype == object and [v is None for v in x] == [i % 7 == 3 for i in range(40)]
            x = np.array(["nan" if v is None else v for v in x])
        assert x.dtype == y.dtype, (name, x.dtype, y.dtype)
        assert [pf.value_key(v) for v in x] == [pf.value_key(v) for v in y], name
    assert a["t"].dtype.kind == "U" and a["i"].dtype == np.float64  # ints with nulls: NaN
    assert a["b"].dtype == object and a["bin"].dtype == object
