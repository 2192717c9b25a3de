"""The keys a column adds beside its own in every batch are named once, by the engine at open
(``ColumnInfo.added_keys``, cpp/src/util/output_keys.h): the batches carry exactly those keys,
and clashes are refused when the loader is created."""

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import _stoker
from stoker.errors import InvalidOptionError


@pytest.fixture
def path(tmp_path):
    path = os.fspath(tmp_path / "keys.parquet")
    pq.write_table(pa.table({
        "ll": pa.array([[[1, 2], [3]], [[4]], None, []], pa.list_(pa.list_(pa.int8()))),
        "l": pa.array([[1], [2, 3], [], [4]], pa.list_(pa.int8())),
        "x": pa.array([1.0, 2.0, 3.0, 4.0], pa.float32()),
        "y": pa.array([1, None, 3, 4], pa.int64()),
    }), path)
    return path


def test_naming_functions():
    assert _stoker.lengths_key("a") == "a_lengths"
    assert _stoker.lengths_key("a", 2) == "a_lengths_2"
    assert _stoker.mask_key("a") == "a_mask"
    assert _stoker.mask_key("a", level=1) == "a_mask_1"
    assert _stoker.valid_key("a") == "a_valid"


def _batch(path, **kwargs):
    with stoker.Loader(path, batch_size=4, shuffle=False, **kwargs) as loader:
        return loader.columns, next(iter(loader))


def test_batches_carry_the_keys_loader_columns_name(path):
    columns, batch = _batch(path, columns=["ll", "l", "x"], lists="padded", null_mask=["ll"])
    assert columns["ll"].added_keys == ["ll_lengths", "ll_lengths_1", "ll_mask", "ll_mask_1",
                                        "ll_mask_2"]
    assert columns["l"].added_keys == ["l_lengths"]
    assert columns["x"].added_keys == []
    # In batch order: each column, then the keys it adds.
    assert list(batch) == [key for name, info in columns.items()
                           for key in [name, *info.added_keys]]
    assert batch["ll_lengths"].tolist() == [2, 1, 0, 0]
    assert batch["ll_lengths_1"].tolist() == [[2, 1], [1, 0], [0, 0], [0, 0]]
    assert batch["ll_mask"].tolist() == [True, True, False, True]

    columns, batch = _batch(path, columns=["ll", "y"], lists="ragged", null_mask=True)
    assert columns["ll"].added_keys == ["ll_mask", "ll_mask_1", "ll_mask_2"]
    assert columns["y"].added_keys == ["y_mask"]
    assert batch["y_mask"].tolist() == [True, False, True, True]


def test_valid_flags_and_feature_group_masks(path):
    columns, batch = _batch(path, columns=["x"], transforms={"x": [stoker.ops.cast("float64")]},
                            on_error={"x": "zero"})
    assert columns["x"].added_keys == ["x_valid"]
    assert batch["x_valid"].tolist() == [True] * 4
    columns, batch = _batch(path, columns=["l"], lists="ragged", features={"g": ["y"]},
                            null_mask=["g"], fill_null={"y": 0})
    assert columns["g"].added_keys == ["g_mask"]
    assert batch["g_mask"].tolist() == [[True], [False], [True], [True]]


def test_clashes_are_refused_at_open(tmp_path):
    clash = os.fspath(tmp_path / "clash.parquet")
    pq.write_table(pa.table({"x": np.arange(4), "__padding__": np.arange(4),
                             "l": pa.array([[1], [2], [3], [4]]), "l_lengths": np.arange(4)}),
                   clash)
    # (With columns=, Python names the option itself; reading every column, the engine does.)
    with pytest.raises(InvalidOptionError,
                       match="a per-column option names column 'nope', which the loader does "
                             "not read"):
        stoker.Loader(clash, lists="ragged", fill_null={"nope": 0})
    with pytest.raises(InvalidOptionError,
                       match="padding_mask=True adds '__padding__', which is also a column"):
        stoker.Loader(clash, columns=["x", "__padding__"], padding_mask=True)
    with pytest.raises(InvalidOptionError,
                       match=r"output key 'l_lengths' for column 'l' clashes with a column of "
                             r"that name; leave 'l_lengths' out of columns, or "
                             r"lists=\{'l': 'ragged'\}"):
        stoker.Loader(clash, columns=["l", "l_lengths"], lists="padded")
