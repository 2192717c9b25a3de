"""``loader.columns`` describes the batches the loader yields: for every type the conformance
suites cover (tests/unit/formats/test_conformance.py, tests/unit/formats/test_formats*.py) and
every Petastorm codec field, each batch entry has the column's ``dtype`` and per-row
``inner_shape`` (issue 22, item 4: a grayscale CompressedImageCodec field said ``(H, W, 1)`` for
``[B, H, W]`` batches), and every other key of a batch is one of the documented companions
(``_lengths``, ``_mask``, ``_valid``, ``__padding__``) with its documented dtype.

How an entry is compared, per ``kind`` (docs/user-guide.md, "What each Arrow type becomes"):
``dense``: the array's dtype and ``shape[1:]``; ``padded``: the dtype and the shape after the
batch and the padded list dimensions (one per ``_lengths`` array); ``ragged``: the innermost
``values`` (through nested ``Ragged``) and their ``shape[1:]``; ``strings``: a ``Ragged`` of
``uint8`` bytes.
"""

from __future__ import annotations

import datetime
import decimal
import io
import os
import re
from typing import Any, Dict

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import ops

import petastorm_fixtures as pf
import test_conformance as conformance
import test_formats

N = 150
BATCH = 37  # does not divide the row groups: batches cross them and the last one is short


def _facts(batch: Dict[str, Any], name: str, info: Any) -> tuple:
    """(dtype name, per-row shape) of a batch entry, read the way its kind is documented."""
    entry = batch[name]
    kind = info.kind.name
    if kind == "dense":
        assert isinstance(entry, np.ndarray), (name, type(entry))
        return entry.dtype.name, entry.shape[1:]
    if kind == "padded":
        assert isinstance(entry, np.ndarray), (name, type(entry))
        depth = 1 + sum(1 for k in batch if re.fullmatch(re.escape(name) + r"_lengths_\d+", k))
        return entry.dtype.name, entry.shape[1 + depth:]
    assert isinstance(entry, stoker.Ragged), (name, type(entry))
    values = entry.values
    while isinstance(values, stoker.Ragged):
        values = values.values
    values = np.asarray(values)
    return values.dtype.name, values.shape[1:]


_COMPANION = re.compile(r"(?P<column>.+?)_(?P<what>lengths|mask|valid)(?:_(?P<level>\d+))?")


def _check_batches(loader: stoker.Loader, expect: Dict[str, tuple] = None) -> int:
    columns = loader.columns
    batches = 0
    for batch in loader:
        batches += 1
        rows = len(batch["__padding__"]) if "__padding__" in batch else None
        for key, entry in batch.items():
            if key in columns:
                info = columns[key]
                got = _facts(batch, key, info)
                assert got == (info.dtype, tuple(info.inner_shape)), (key, got, info)
                if expect and key in expect:
                    assert got == expect[key], (key, got, expect[key])
                continue
            if key == "__padding__":
                assert entry.dtype == np.bool_ and entry.ndim == 1
                continue
            match = _COMPANION.fullmatch(key)
            assert match and match["column"] in columns, f"undocumented batch key {key!r}"
            if match["what"] == "lengths":
                assert entry.dtype == np.int64, key
            else:
                assert entry.dtype == np.bool_, key
            if match["level"] is None and rows is not None:
                assert entry.shape[0] == rows, key
        assert set(columns) <= set(batch), set(columns) - set(batch)
    assert batches > 1
    return batches


def _write(table: pa.Table, folder, name="part-0.parquet", row_group_size=40) -> str:
    os.makedirs(folder, exist_ok=True)
    pq.write_table(table, os.path.join(str(folder), name), row_group_size=row_group_size)
    return str(folder)


@pytest.fixture(scope="module")
def types_file(tmp_path_factory):
    """tests/unit/formats/test_formats.py's table: every plain type stoker converts."""
    return _write(test_formats.pyarrow_table(N), tmp_path_factory.mktemp("types"))


@pytest.fixture(scope="module")
def conformance_file(tmp_path_factory):
    """tests/unit/formats/test_conformance.py's "all" table (nulls in most columns) and float16."""
    table = conformance._all(N)
    table = table.append_column("float16", conformance._float16(N).column("float16"))
    return _write(table, tmp_path_factory.mktemp("conformance"))


@pytest.mark.parametrize("lists", ["padded", "ragged"])
def test_columns_describe_every_plain_type(types_file, lists):
    loader = stoker.Loader(types_file, columns=test_formats.PA_COLUMNS, batch_size=BATCH,
                           shuffle=False,
                           drop_last=False, lists=lists)
    _check_batches(loader)


@pytest.mark.parametrize("lists", ["padded", "ragged"])
def test_columns_describe_nulls_masks_and_lengths(conformance_file, lists):
    loader = stoker.Loader(conformance_file, batch_size=BATCH, shuffle=False, drop_last=False,
                           lists=lists, null_mask=True, pad_value=-3)
    _check_batches(loader)


def test_columns_describe_fill_null_and_time_units_and_decimals(tmp_path):
    rng = np.random.default_rng(4)
    valid = rng.random(N) > 0.2
    table = pa.table({
        "x": pa.array(rng.standard_normal(N), mask=~valid),
        "k": pa.array(np.arange(N, dtype=np.int16), mask=~np.roll(valid, 3)),
        "ts": pa.array(np.arange(N, dtype=np.int64) * 10**6, pa.timestamp("us")),
        "d": pa.array([datetime.date(2026, 1, 1) + datetime.timedelta(days=i) for i in range(N)]),
        "dec": pa.array([decimal.Decimal(i).scaleb(-2) for i in range(N)], pa.decimal128(9, 2)),
        "nested": pa.array([[[j] * (j % 3) for j in range(i % 4)] for i in range(N)],
                           pa.list_(pa.list_(pa.float32()))),
        "words": pa.array([["a", "bc"][: i % 3] for i in range(N)], pa.list_(pa.string())),
        "s": pa.StructArray.from_arrays([pa.array(np.arange(N, dtype=np.int32)),
                                         pa.array([f"v{i}" for i in range(N)])], ["a", "b"]),
        "cat": pa.array([["red", "green", "blue"][i % 3] for i in range(N)]),
    })
    path = _write(table, tmp_path)
    _check_batches(stoker.Loader(
        path, columns=["x", "k", "ts", "d", "dec", "nested", "s.a", "s.b", "cat"],
        batch_size=BATCH, shuffle=False, drop_last=False, fill_null={"x": 0.5, "k": 7},
        time_unit={"ts": "ms", "d": "D"}, decimals="float64", lists="padded",
        categories={"cat": "auto"}), expect={"ts": ("float64", ()), "cat": ("int64", ())})
    _check_batches(stoker.Loader(
        path, columns=["nested", "words", "dec"], batch_size=BATCH, shuffle=False,
        drop_last=False, lists="ragged", decimals="scaled_int64"))


def test_columns_describe_feature_groups(conformance_file):
    loader = stoker.Loader(
        conformance_file, columns=["int64_nonnull"],
        features={"a": ["int8_nonnull", "int16_nonnull", "float32_nonnull"],
                  "b": ["float64", "int32", "bool"]},
        null_mask=["b"], fill_null={"float64": 0.0, "int32": 0, "bool": False},
        allow_lossy_cast=True, batch_size=BATCH, shuffle=False, drop_last=False)
    _check_batches(loader, expect={"a": ("float32", (3,)), "b": ("float32", (3,))})


def _png(image: np.ndarray) -> bytes:
    from PIL import Image

    out = io.BytesIO()
    Image.fromarray(image).save(out, format="PNG")
    return out.getvalue()


def test_columns_describe_transform_outputs(tmp_path):
    rng = np.random.default_rng(5)
    images = [_png(rng.integers(0, 256, (10 + i % 5, 12, 3), dtype=np.uint8)) for i in range(N)]
    images[7] = b"not an image"
    arrays = []
    for i in range(N):
        out = io.BytesIO()
        np.save(out, np.full((2, 3), i, np.int32))
        arrays.append(out.getvalue())
    path = _write(pa.table({"img": pa.array(images, pa.binary()),
                            "arr": pa.array(arrays, pa.binary()),
                            "x": pa.array(np.arange(N, dtype=np.float64))}), tmp_path)
    loader = stoker.Loader(path, batch_size=BATCH, shuffle=False, drop_last=False,
                           on_error="zero", transforms={
                               "img": [ops.decode_image(mode="L"), ops.resize([8, 6])],
                               "arr": [ops.decode_npy("int32", [2, 3]), ops.cast("float32")],
                               "x": [ops.standardize(1.0, 2.0)]})
    _check_batches(loader, expect={"img": ("uint8", (8, 6, 1)), "arr": ("float32", (2, 3))})


@pytest.fixture(scope="module")
def petastorm_store(tmp_path_factory):
    missing = pf.missing()
    if missing:
        pytest.skip(missing)
    path = str(tmp_path_factory.mktemp("petastorm") / "everything")
    pf.write_with_helpers(path, pf.everything_schema(), pf.everything_rows(40),
                          row_group_rows=8, files=2)
    return path


@pytest.mark.parametrize("lists", [{"var": "ragged", "cloud": "padded"},
                                   {"var": "padded", "cloud": "ragged"}])
def test_columns_describe_petastorm_codec_fields(petastorm_store, lists):
    """Every codec: gray and RGB images (PNG, JPEG), NdarrayCodec, CompressedNdarrayCodec,
    ScalarCodec scalars and strings with their masks, and arrays whose first dimension varies
    made ragged or padded by ``lists`` (decoded in the consumer)."""
    columns = ["id", "big", "score", "flag", "name", "png_rgb", "png_gray", "jpg_rgb",
               "jpg_gray", "mat", "var", "cloud", "zmat"]
    loader = stoker.Loader(petastorm_store, columns=columns, batch_size=7, shuffle=False,
                           drop_last=False, lists=lists, null_mask=["score", "name"])
    _check_batches(loader, expect={
        "png_gray": ("uint8", (12, 16)), "jpg_gray": ("uint8", (16, 16)),
        "png_rgb": ("uint8", (12, 16, 3)), "jpg_rgb": ("uint8", (16, 24, 3)),
        "mat": ("float32", (3, 4)), "zmat": ("int16", (2, 5)),
        "var": ("int64", ()), "cloud": ("float32", (3,)), "name": ("uint8", ())})
    kinds = {name: loader.columns[name].kind.name for name in ("var", "cloud", "png_gray")}
    assert kinds == {"var": lists["var"], "cloud": lists["cloud"], "png_gray": "dense"}
    assert repr(loader.columns["png_gray"]).startswith(
        "ColumnInfo(name='png_gray', kind='dense', dtype='uint8', shape=(12, 16),")
