"""Contract 5: every user mistake raises a typed exception naming what is wrong."""

import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import errors
from stoker_testdata import write_uneven_dataset


@pytest.fixture()
def good(tmp_path):
    root = tmp_path / "good"
    write_uneven_dataset(str(root), file_rows=(500, 500), row_group_size=100)
    return root


def test_missing_path(tmp_path):
    missing = tmp_path / "nope"
    with pytest.raises(FileNotFoundError, match="nope") as info:
        stoker.Loader(str(missing))
    assert isinstance(info.value, errors.DatasetNotFoundError)


def test_folder_without_parquet_files(tmp_path):
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(ValueError, match="no Parquet files") as info:
        stoker.Loader(str(tmp_path))
    assert isinstance(info.value, errors.EmptyDatasetError)


def test_glob_matching_nothing(good):
    with pytest.raises(errors.EmptyDatasetError, match=r"\*\.nothing"):
        stoker.Loader(str(good / "*.nothing"))


def test_unknown_column_lists_available(good):
    with pytest.raises(KeyError) as info:
        stoker.Loader(str(good), columns=["id", "bogus"])
    message = str(info.value)
    assert isinstance(info.value, errors.ColumnNotFoundError)
    assert "'bogus'" in message
    for name in ("id", "x", "emb", "flag"):
        assert name in message


def test_unknown_feature_column(good):
    with pytest.raises(errors.ColumnNotFoundError, match="nope"):
        stoker.Loader(str(good), features=["x", "nope"])


def test_corrupt_footer_names_file(good):
    path = good / "part-1.parquet"
    data = bytearray(path.read_bytes())
    data[-12:-8] = b"\xff\xff\xff\x7f"  # footer length far beyond the file
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptFileError, match="part-1.parquet") as info:
        stoker.Loader(str(good))
    assert isinstance(info.value, OSError)


def test_truncated_file_names_file(good):
    path = good / "part-0.parquet"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(errors.CorruptFileError, match="part-0.parquet"):
        stoker.Loader(str(good))


def test_corrupt_data_page_names_file_row_group_and_column(tmp_path):
    path = tmp_path / "one.parquet"
    values = np.arange(10000, dtype=np.int64)
    pq.write_table(pa.table({"v": values}), path, row_group_size=10000, compression="snappy")
    meta = pq.ParquetFile(path).metadata.row_group(0).column(0)
    start = meta.data_page_offset
    data = bytearray(path.read_bytes())
    for i in range(start + 40, start + 400):  # garble the compressed page body
        data[i] ^= 0x5A
    path.write_bytes(bytes(data))
    with pytest.raises(errors.CorruptFileError) as info:
        list(stoker.Loader(str(path), batch_size=1000, shuffle=False))
    message = str(info.value)
    assert "one.parquet" in message and "row group 0" in message and "'v'" in message


def _zigzag_varint(n):  # a thrift compact-protocol integer
    z, out = (n << 1) ^ (n >> 63), b""
    while True:
        byte, z = z & 0x7F, z >> 7
        if not z:
            return out + bytes([byte])
        out += bytes([byte | 0x80])


@pytest.mark.parametrize("batch_size", [32, 256])
@pytest.mark.parametrize("shuffle", [True, False])
def test_a_row_group_shorter_than_its_footer_names_file_row_group_and_column(
        tmp_path, batch_size, shuffle):
    """The footer says 1,000 rows, the pages hold 100: the epoch's head (its first batch, read
    only up to its end) and the whole-row-group read both raise, naming where."""
    buffer = pa.BufferOutputStream()
    pq.write_table(pa.table({"x": np.arange(100, dtype=np.int64)}), buffer,
                   use_dictionary=False, write_statistics=False)
    data = bytearray(buffer.getvalue().to_pybytes())
    size = int.from_bytes(data[-8:-4], "little")
    footer = bytes(data[-8 - size:-8])
    assert footer.count(_zigzag_varint(100)) >= 3  # values, the row group's rows, the file's
    data[-8 - size:-8] = footer.replace(_zigzag_varint(100), _zigzag_varint(1000))
    path = tmp_path / "short.parquet"
    path.write_bytes(bytes(data))
    assert pq.ParquetFile(path).metadata.num_rows == 1000
    with pytest.raises(errors.CorruptFileError) as info:
        list(stoker.Loader(str(path), batch_size=batch_size, shuffle=shuffle))
    message = str(info.value)
    assert "short.parquet" in message and "row group 0" in message and "'x'" in message


def test_schema_mismatch_type(good):
    pq.write_table(pa.table({"id": pa.array(["a"]), "x": pa.array([1.0], pa.float32()),
                             "emb": pa.array([[1.0] * 4], pa.list_(pa.float32(), 4)),
                             "flag": [True]}), good / "part-9.parquet")
    with pytest.raises(errors.SchemaMismatchError) as info:
        stoker.Loader(str(good))
    message = str(info.value)
    assert "'id'" in message and "part-0.parquet" in message and "part-9.parquet" in message


def test_missing_column_is_null_in_that_file(good):
    # Schemas evolve: a file without a column holds nulls for it, then the null rules apply.
    pq.write_table(pa.table({"id": pa.array([1], pa.int64())}), good / "part-9.parquet")
    with pytest.raises(errors.NullValueError, match="part-9.parquet"):
        stoker.Loader(str(good))


def test_unsupported_type_names_column(tmp_path):
    pq.write_table(pa.table({"s": pa.array([[], [None]], pa.list_(pa.null()))}),
                   tmp_path / "s.parquet")
    with pytest.raises(TypeError, match="'s'") as info:
        stoker.Loader(str(tmp_path))
    assert isinstance(info.value, errors.UnsupportedTypeError)


def test_nulls_without_option_name_column_file_and_row_group(tmp_path):
    pq.write_table(pa.table({"v": pa.array([1.0, None, 3.0] * 10)}), tmp_path / "n.parquet",
                   row_group_size=10)
    with pytest.raises(errors.NullValueError) as info:
        list(stoker.Loader(str(tmp_path), batch_size=5, shuffle=False))
    message = str(info.value)
    assert "'v'" in message and "n.parquet" in message and "row group 0" in message
    assert "fill_null" in message and "null_mask" in message


@pytest.mark.parametrize("kwargs, needle", [
    (dict(batch_size=0), "batch_size"),
    (dict(batch_size="8"), "batch_size"),
    (dict(num_threads=-1), "num_threads"),
    (dict(prefetch_bytes="lots"), "prefetch_bytes"),
    (dict(prefetch_bytes=0), "prefetch_bytes"),
    (dict(shuffle_window=-5), "shuffle_window"),
    (dict(output="jax"), "output"),
    (dict(seed=-1), "seed"),
    (dict(features_dtype="complex64"), "features_dtype"),
    (dict(features_dtype="float16", features=["x"]), "features_dtype"),
    (dict(columns="id"), "list of names"),
    (dict(lists="zigzag"), "padded"),
    (dict(fill_null={"nope": 0}, columns=["id"]), "fill_null"),
])
def test_bad_options(good, kwargs, needle):
    with pytest.raises(errors.InvalidOptionError, match=needle):
        stoker.Loader(str(good), **kwargs)


def test_lossy_feature_cast_needs_option(good):
    # float32 -> int32 is lossy by type ("id", int64 below 1000 by its footer statistics, would
    # stack into float32 exactly).
    with pytest.raises(errors.LossyCastError, match="allow_lossy_cast"):
        stoker.Loader(str(good), features=["x", "id"], features_dtype="int32")
    loader = stoker.Loader(str(good), features=["x", "id"], features_dtype="int32",
                           allow_lossy_cast=True, batch_size=10)
    assert next(iter(loader))["features"].shape == (10, 2)
    exact = stoker.Loader(str(good), features=["x", "id"], batch_size=10)
    assert next(iter(exact))["features"].dtype == np.float32


def test_duplicate_column(good):
    with pytest.raises(errors.InvalidOptionError, match="twice"):
        stoker.Loader(str(good), columns=["id", "id"])


def test_closed_loader(good):
    loader = stoker.Loader(str(good), batch_size=10)
    loader.close()
    with pytest.raises(errors.LoaderClosedError, match="closed"):
        iter(loader).__next__()
    with pytest.raises(errors.LoaderClosedError, match="closed"):
        loader.state_dict()
    assert isinstance(errors.LoaderClosedError("x"), RuntimeError)


def test_file_deleted_after_open(good):
    loader = stoker.Loader(str(good), batch_size=50, shuffle=False)
    shutil.rmtree(good)
    with pytest.raises(errors.StorageError, match="part-0.parquet"):
        list(loader)
