"""Several stacked feature groups, per-group dtypes and masks, and the cast rules that use the
footer statistics (issue 14, "Several feature groups" and "Casting rules that fit pandas").

Every expected value is computed from pyarrow's reading of the same file."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import InvalidOptionError, LossyCastError, NullValueError

N = 500
RG = 64


def _table(n: int = N) -> pa.Table:
    rng = np.random.default_rng(3)
    cols = {f"d{i}": rng.normal(size=n).astype(np.float32) for i in range(12)}
    cols.update({f"c{i}": rng.integers(0, 1000, n, dtype=np.int64) for i in range(5)})
    cols["label"] = np.arange(n, dtype=np.int64)
    return pa.table(cols)


DENSE = [f"d{i}" for i in range(12)]
IDS = [f"c{i}" for i in range(5)]


def _by_label(batches, key):
    labels = np.concatenate([b["label"] for b in batches])
    values = np.concatenate([b[key] for b in batches])
    return values[np.argsort(labels)]


def test_two_groups_each_with_its_dtype(write_parquet, load_batches):
    table = _table()
    path = write_parquet(table, row_group_size=RG)
    batches = load_batches(path, columns=["label"], features={"dense": DENSE, "ids": IDS},
                           features_dtype={"dense": "float32", "ids": "int64"}, batch_size=50,
                           seed=1)
    first = batches[0]
    assert list(first) == ["label", "dense", "ids"]
    assert first["dense"].dtype == np.float32 and first["dense"].shape == (50, 12)
    assert first["ids"].dtype == np.int64 and first["ids"].shape == (50, 5)
    dense = np.stack([table.column(c).to_numpy() for c in DENSE], axis=1).astype(np.float32)
    ids = np.stack([table.column(c).to_numpy() for c in IDS], axis=1)
    rows = len(np.concatenate([b["label"] for b in batches]))
    order = np.sort(np.concatenate([b["label"] for b in batches]))
    assert np.array_equal(_by_label(batches, "dense"), dense[order])
    assert np.array_equal(_by_label(batches, "ids"), ids[order])
    assert rows == N - N % 50


def test_columns_info_and_describe_know_every_group(write_parquet):
    path = write_parquet(_table(), row_group_size=RG)
    with stoker.Loader(path, features={"dense": DENSE, "ids": IDS},
                       features_dtype={"ids": "int64"}, batch_size=10) as loader:
        info = loader.columns
        assert info["dense"].arrow_type == "stacked features"
        assert info["dense"].dtype == "float32" and list(info["dense"].inner_shape) == [12]
        assert info["ids"].dtype == "int64" and list(info["ids"].inner_shape) == [5]
    described = stoker.describe(path, features={"dense": DENSE[:2], "ids": IDS[:1]},
                                features_dtype={"dense": "float64", "ids": "int64"})
    got = {c.name: (c.ok, c.dtype, c.feature_group) for c in described.columns}
    assert got == {"d0": (True, "float64", "dense"), "d1": (True, "float64", "dense"),
                   "c0": (True, "int64", "ids")}


def test_a_str_dtype_applies_to_every_group(write_parquet, load_batches):
    path = write_parquet(_table(), row_group_size=RG)
    batch = load_batches(path, features={"a": DENSE[:3], "b": IDS}, features_dtype="float64",
                         batch_size=10)[0]
    assert batch["a"].dtype == np.float64 and batch["b"].dtype == np.float64


def test_a_list_keeps_meaning_one_group(write_parquet, load_batches):
    path = write_parquet(_table(), row_group_size=RG)
    one = load_batches(path, features=DENSE, batch_size=25, seed=4)
    grouped = load_batches(path, features={"features": DENSE}, batch_size=25, seed=4)
    assert [list(b) for b in one] == [list(b) for b in grouped]
    for a, b in zip(one, grouped):
        assert a["features"].tobytes() == b["features"].tobytes()


@pytest.mark.parametrize("kwargs, match", [
    (dict(features={"label": DENSE}), "clashes with a column"),
    (dict(features={"dense": DENSE, "more": ["d0"]}), "listed twice in features"),
    (dict(features={"dense": DENSE}, features_dtype={"nope": "int64"}), "does not define"),
    (dict(features={"dense": []}), "names no columns"),
    (dict(features={"dense": DENSE}, features_name="x"), "keys name the groups"),
    (dict(features={"dense": DENSE}, null_mask=["d0"]), "name the group"),
    (dict(features={"dense": DENSE}, features_dtype={"dense": "bool"}), "not supported"),
])
def test_group_mistakes_are_typed_errors(write_parquet, kwargs, match):
    path = write_parquet(_table(), row_group_size=RG)
    with pytest.raises(InvalidOptionError, match=match):
        stoker.Loader(path, batch_size=10, **kwargs)


def _with_nulls(n: int = 200) -> pa.Table:
    a = pa.array([None if i % 7 == 3 else float(i) for i in range(n)])
    b = pa.array([None if i % 5 == 1 else i for i in range(n)], pa.int64())
    c = pa.array(np.arange(n, dtype=np.int32))
    return pa.table({"a": a, "b": b, "c": c, "label": np.arange(n, dtype=np.int64)})


def test_group_null_mask_zero_fills_and_marks(write_parquet, load_batches):
    table = _with_nulls()
    path = write_parquet(table, row_group_size=32)
    batches = load_batches(path, columns=["label"], features={"g": ["a", "b"], "h": ["c"]},
                           features_dtype={"g": "float64", "h": "int64"}, null_mask=["g"],
                           fill_null={"b": -1}, batch_size=40, shuffle=False)
    out = np.concatenate([b["g"] for b in batches])
    mask = np.concatenate([b["g_mask"] for b in batches])
    assert mask.dtype == np.bool_ and mask.shape == (len(out), 2)
    assert "h_mask" not in batches[0]
    a = table.column("a").to_pylist()[:len(out)]
    b = table.column("b").to_pylist()[:len(out)]
    assert mask[:, 0].tolist() == [v is not None for v in a]
    assert mask[:, 1].tolist() == [v is not None for v in b]
    assert out[:, 0].tolist() == [0.0 if v is None else v for v in a]
    assert out[:, 1].tolist() == [-1.0 if v is None else v for v in b]  # fill_null wins over 0


def test_null_mask_true_masks_the_list_group(write_parquet, load_batches):
    path = write_parquet(_with_nulls(), row_group_size=32)
    batch = load_batches(path, features=["a", "c"], features_dtype="float64", null_mask=True,
                         batch_size=50, shuffle=False)[0]
    assert batch["features_mask"].shape == (50, 2)
    assert not batch["features_mask"][3, 0] and batch["features_mask"][3, 1]
    named = load_batches(path, features=["a", "c"], features_dtype="float64",
                         null_mask=["features"], batch_size=50, shuffle=False)[0]
    assert named["features_mask"].tobytes() == batch["features_mask"].tobytes()
    assert named["features"].tobytes() == batch["features"].tobytes()


def test_nulls_in_an_unmasked_group_raise(write_parquet):
    path = write_parquet(_with_nulls(), row_group_size=32)
    with stoker.Loader(path, features={"g": ["a"]}, features_dtype="float64",
                       batch_size=10) as loader:
        with pytest.raises(NullValueError, match="'a'"):
            list(loader)


# ------------------------------------------------------------------------------------- casts

def _ints(values, dtype=pa.int64()):
    return pa.table({"x": pa.array(values, dtype),
                     "y": pa.array([0.5] * len(values), pa.float32())})


def test_int64_to_float64_is_exact_within_2_53(write_parquet, load_batches):
    values = [0, 2**53, -(2**53), 12345] * 10
    path = write_parquet(_ints(values), row_group_size=8)
    batch = load_batches(path, features=["x"], features_dtype="float64", batch_size=40,
                         shuffle=False)[0]
    assert batch["features"][:, 0].tolist() == [float(v) for v in values]


def test_int64_beyond_2_53_is_lossy_and_the_suggested_fix_works(write_parquet, load_batches):
    values = [0, 2**53 + 1, 7] * 10
    path = write_parquet(_ints(values), row_group_size=8)
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(path, features=["x"], features_dtype="float64", batch_size=4)
    message = str(err.value)
    assert "'x'" in message and "statistics reach" in message
    assert "features_dtype='int64'" in message and "allow_lossy_cast=True" in message
    # Following either suggestion succeeds.
    exact = load_batches(path, features=["x"], features_dtype="int64", batch_size=30,
                         shuffle=False)[0]
    assert exact["features"][:, 0].tolist() == values
    lossy = load_batches(path, features=["x"], features_dtype="float64", allow_lossy_cast=True,
                         batch_size=30, shuffle=False)[0]
    assert lossy["features"].dtype == np.float64


def test_int_to_float32_uses_2_24(write_parquet):
    small = write_parquet(_ints([2**24, -5] * 4), name="small.parquet")
    with stoker.Loader(small, features=["x", "y"], batch_size=4) as loader:  # float32
        assert loader.columns["features"].dtype == "float32"
    big = write_parquet(_ints([2**24 + 1, -5] * 4), name="big.parquet")
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(big, features=["x", "y"], batch_size=4)
    # float64 holds every column of the group exactly: that is the suggestion, and it works.
    assert "features_dtype='float64'" in str(err.value)
    with stoker.Loader(big, features=["x", "y"], features_dtype="float64",
                       batch_size=4) as loader:
        assert next(iter(loader))["features"].dtype == np.float64


def test_without_statistics_the_cast_needs_allow_lossy_cast(write_parquet, load_batches):
    path = write_parquet(_ints([1, 2, 3] * 4), write_statistics=False)
    with pytest.raises(LossyCastError, match="no min/max statistics"):
        stoker.Loader(path, features=["x"], features_dtype="float64", batch_size=4)
    batch = load_batches(path, features=["x"], features_dtype="float64", allow_lossy_cast=True,
                         batch_size=12, shuffle=False)[0]
    assert batch["features"][:, 0].tolist() == [1.0, 2.0, 3.0] * 4


def test_lossy_group_suggestion_spells_every_group(write_parquet):
    table = pa.table({"x": pa.array([2**60, 1], pa.int64()), "f": pa.array([0.5, 1.5]),
                      "i": pa.array([1, 2], pa.int32())})
    path = write_parquet(table)
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(path, features={"a": ["x"], "b": ["f"], "c": ["i"]},
                      features_dtype={"a": "float64", "b": "float64", "c": "int64"},
                      batch_size=2)
    message = str(err.value)
    assert "features_dtype={'a': 'int64', 'b': 'float64', 'c': 'int64'}" in message
    with stoker.Loader(path, features={"a": ["x"], "b": ["f"], "c": ["i"]},
                       features_dtype={'a': 'int64', 'b': 'float64', 'c': 'int64'},
                       batch_size=2) as loader:
        batch = next(iter(loader))
        assert sorted(batch["a"][:, 0].tolist()) == [1, 2**60]


def test_a_float_group_with_a_big_int_suggests_only_allow_lossy_cast(write_parquet):
    table = pa.table({"x": pa.array([2**60, 1], pa.int64()), "f": pa.array([0.5, 1.5])})
    path = write_parquet(table)
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(path, features=["x", "f"], features_dtype="float64", batch_size=2)
    message = str(err.value)
    assert "features_dtype=" not in message.split("pass", 1)[1]
    assert "allow_lossy_cast=True" in message
    with stoker.Loader(path, features=["x", "f"], features_dtype="float64",
                       allow_lossy_cast=True, batch_size=2) as loader:
        assert next(iter(loader))["features"].shape == (2, 2)


def test_groups_and_resume_fingerprint(write_parquet):
    path = write_parquet(_table(), row_group_size=RG)
    kwargs = dict(features={"dense": DENSE, "ids": IDS}, features_dtype={"ids": "int64"},
                  batch_size=30, seed=2)
    with stoker.Loader(path, **kwargs) as loader:
        it = iter(loader)
        next(it)
        state = loader.state_dict()
        rest = [b["ids"].tobytes() for b in it]
    with stoker.Loader(path, **kwargs) as again:
        again.load_state_dict(state)
        assert [b["ids"].tobytes() for b in again] == rest
    other = dict(kwargs, features_dtype={"ids": "int64", "dense": "float64"})
    with stoker.Loader(path, **other) as changed:
        with pytest.raises(Exception, match="features"):
            changed.load_state_dict(state)


def test_partition_numbers_are_features(tmp_path, load_batches):
    for day in (3, 11):
        folder = tmp_path / f"day={day}"
        folder.mkdir()
        pq.write_table(pa.table({"v": np.arange(5, dtype=np.float64) + day,
                                 "label": np.arange(5, dtype=np.int64) + 100 * day}),
                       folder / "part.parquet")
    batches = load_batches(str(tmp_path), columns=["label"], features=["day", "v"],
                           features_dtype="float64", batch_size=10, shuffle=False)
    feats = np.concatenate([b["features"] for b in batches])
    labels = np.concatenate([b["label"] for b in batches])
    assert feats[:, 0].tolist() == [float(l // 100) for l in labels]
    assert feats[:, 1].tolist() == [float(l % 100 + l // 100) for l in labels]


def test_partition_values_bound_the_cast(tmp_path):
    for day in (1, 2**24 + 1):
        folder = tmp_path / f"id={day}"
        folder.mkdir()
        pq.write_table(pa.table({"v": np.ones(4, dtype=np.float32)}), folder / "p.parquet")
    with pytest.raises(LossyCastError, match="partition values reach") as err:
        stoker.Loader(str(tmp_path), features=["id", "v"], batch_size=4)
    assert "features_dtype='float64'" in str(err.value)
    with stoker.Loader(str(tmp_path), features=["id", "v"], features_dtype="float64",
                       batch_size=8, shuffle=False) as loader:
        assert sorted(next(iter(loader))["features"][:, 0].tolist()) == \
            [1.0] * 4 + [float(2**24 + 1)] * 4


def test_every_lossy_group_at_once_and_one_fix_for_all(write_parquet):
    table = pa.table({"big": pa.array([2**60, 1, None], pa.int64()),
                      "wide": pa.array([2**40, 2, 3], pa.int64()),
                      "f": pa.array([0.5, 1.5, 2.5], pa.float32())})
    path = write_parquet(table)
    kwargs = dict(features={"a": ["big"], "b": ["wide", "f"]},
                  features_dtype={"a": "float64", "b": "float32"}, batch_size=3)
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(path, fill_null={"big": -1}, **kwargs)
    lines = str(err.value).splitlines()
    assert any("'big'" in line for line in lines) and any("'wide'" in line for line in lines)
    assert "features_dtype={'a': 'int64', 'b': 'float64'}" in lines[-1]
    fixed = dict(kwargs, features_dtype={'a': 'int64', 'b': 'float64'})
    with stoker.Loader(path, fill_null={"big": -1}, shuffle=False, **fixed) as loader:
        batch = next(iter(loader))
    assert batch["a"][:, 0].tolist() == [2**60, 1, -1]
    assert batch["b"].tolist() == [[2.0**40, 0.5], [2.0, 1.5], [3.0, 2.5]]
    # A fill value int64 cannot hold rules int64 out: then only allow_lossy_cast is suggested.
    with pytest.raises(LossyCastError) as err:
        stoker.Loader(path, fill_null={"big": 0.5}, **kwargs)
    assert "features_dtype=" not in str(err.value).splitlines()[-1]
