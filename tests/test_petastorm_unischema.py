"""The restricted Unischema reader: Petastorm's real pickles load, anything else is refused
before it runs, and plain Parquet is not affected."""

from __future__ import annotations

import os
import pickle

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import errors
from stoker._unischema import ROW_GROUPS_KEY, UNISCHEMA_KEY, loads_unischema

import petastorm_fixtures as pf

needs_petastorm = pytest.mark.skipif(bool(pf.missing()), reason=pf.missing() or "ok")


def _plain_dataset(folder, metadata=None):
    os.makedirs(folder, exist_ok=True)
    table = pa.table({"id": pa.array(np.arange(8, dtype=np.int32)),
                      "blob": pa.array([b"x"] * 8, pa.binary())})
    pq.write_table(table, os.path.join(folder, "part-0.parquet"))
    if metadata is not None:
        pq.write_metadata(table.schema.with_metadata(metadata),
                          os.path.join(folder, "_common_metadata"))
    return folder


class _System:
    """Pickles as a call of os.system (``posix.system``)."""

    def __init__(self, command):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


class _Eval:
    def __reduce__(self):
        return (eval, ("__import__('os').system('true')",))


def test_a_planted_os_system_pickle_is_refused_and_never_runs(tmp_path):
    marker = tmp_path / "marker"
    evil = pickle.dumps(_System(f"touch {marker}"))
    folder = _plain_dataset(str(tmp_path / "ds"), {UNISCHEMA_KEY: evil})
    with pytest.raises(errors.UnsafeMetadataError, match=r"posix\.system") as info:
        stoker.Loader(folder, batch_size=4)
    assert "_common_metadata" in str(info.value)
    assert isinstance(info.value, ValueError)
    assert not marker.exists()
    # The shim reads the same metadata and refuses it the same way.
    from stoker.petastorm import make_reader

    with pytest.raises(errors.UnsafeMetadataError, match=r"posix\.system"):
        make_reader("file://" + folder)
    assert not marker.exists()


@pytest.mark.parametrize("payload, name", [
    (_Eval(), "builtins.eval"),  # Petastorm's own restricted unpickler allows every builtin
    (np.load, "numpy.load"),  # numpy functions are not dtypes
    (pickle.loads, "_pickle.loads"),
])
def test_only_the_unischema_classes_are_allowed(payload, name):
    with pytest.raises(errors.UnsafeMetadataError, match=name.replace(".", r"\.")):
        loads_unischema(pickle.dumps(payload))


def test_a_malformed_pickle_is_a_corrupt_file_naming_the_key():
    with pytest.raises(errors.CorruptFileError, match="dataset-toolkit.unischema.v1"):
        loads_unischema(b"\x80\x04not a pickle")
    with pytest.raises(errors.CorruptFileError, match="not a Unischema"):
        loads_unischema(pickle.dumps({"a": 1}))


def test_plain_parquet_with_other_common_metadata_is_read_as_today(tmp_path):
    folder = _plain_dataset(str(tmp_path / "ds"), {b"pandas": b"{}"})
    loader = stoker.Loader(folder, batch_size=8, shuffle=False)
    batch = next(iter(loader))
    assert batch["id"].tolist() == list(range(8))
    assert batch["blob"].tolist() == [b"x"] * 8  # bytes stay bytes: nothing is decoded


@needs_petastorm
def test_petastorms_own_pickle_of_every_codec_and_spark_type_loads():
    pf.apply_compat()
    from petastorm.codecs import (CompressedImageCodec, CompressedNdarrayCodec, NdarrayCodec,
                                  ScalarCodec)
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql import types as T

    schema = Unischema("Everything", [
        UnischemaField("i8", np.int8, (), ScalarCodec(T.ByteType()), False),
        UnischemaField("i16", np.int16, (), ScalarCodec(T.ShortType()), False),
        UnischemaField("i32", np.int32, (), ScalarCodec(T.IntegerType()), True),
        UnischemaField("i64", np.int64, (), ScalarCodec(T.LongType()), False),
        UnischemaField("f32", np.float32, (), ScalarCodec(T.FloatType()), False),
        UnischemaField("f64", np.float64, (), ScalarCodec(T.DoubleType()), False),
        UnischemaField("b", np.bool_, (), ScalarCodec(T.BooleanType()), False),
        UnischemaField("s", np.str_, (), ScalarCodec(T.StringType()), True),
        UnischemaField("d", np.dtype("datetime64[ns]").type, (), ScalarCodec(T.TimestampType()),
                       False),
        UnischemaField("dec", __import__("decimal").Decimal, (), ScalarCodec(T.DecimalType(10, 2)),
                       False),
        UnischemaField("arr", np.float32, (None, 3), NdarrayCodec(), False),
        UnischemaField("zarr", np.int16, (4, 5), CompressedNdarrayCodec(), True),
        UnischemaField("png", np.uint8, (8, 9, 3), CompressedImageCodec("png"), False),
        UnischemaField("jpg", np.uint8, (8, 9), CompressedImageCodec("jpeg", 90), False),
    ])
    for protocol in (2, pickle.DEFAULT_PROTOCOL, pickle.HIGHEST_PROTOCOL):
        loaded = loads_unischema(pickle.dumps(schema, protocol=protocol))
        assert loaded.name == "Everything"
        assert list(loaded.fields) == list(schema.fields)
        for name, field in schema.fields.items():
            got = loaded.fields[name]
            assert (got.name, got.numpy_dtype, got.shape, got.nullable) == (
                field.name, field.numpy_dtype, field.shape, field.nullable)
            assert got.codec.kind == type(field.codec).__name__
        assert loaded.fields["png"].codec.image_codec == "png"
        assert loaded.fields["jpg"].codec.image_codec == "jpeg"
        assert loaded.fields["i32"].codec.spark_type == "IntegerType"


def test_row_group_counts_are_read_and_checked(tmp_path):
    from stoker._unischema import read_unischema

    schema, counts = read_unischema({ROW_GROUPS_KEY: b'{"part-0.parquet": 3}'}, "x")
    assert schema is None and counts == {"part-0.parquet": 3}
    with pytest.raises(errors.CorruptFileError, match="num_row_groups_per_file"):
        read_unischema({ROW_GROUPS_KEY: b"[1, 2"}, "x")


def _field(name, dtype, shape, codec_kind, **state):
    from stoker._unischema import _CODEC_CLASSES, Field

    codec = _CODEC_CLASSES[codec_kind]()
    codec.__dict__.update(state)
    return Field(name, dtype, shape, codec, False)


@pytest.mark.parametrize("field, needle", [
    (_field("img", np.uint16, (8, 8, 3), "CompressedImageCodec", _image_codec=".png"),
     r"'img'.*uint16"),
    (_field("img", np.uint8, (8, 8, 4), "CompressedImageCodec", _image_codec=".png"),
     r"'img'.*\(8, 8, 4\)"),
    (_field("img", np.uint8, (8, 8, 3), "CompressedImageCodec", _image_codec=".bmp"),
     r"'img'.*'bmp'"),
    (_field("arr", np.float32, (None, 3), "NdarrayCodec"), r"'arr'.*\(None, 3\).*petastorm=False"),
    (_field("obj", object, (3,), "NdarrayCodec"), r"'obj'.*numpy_dtype"),
])
def test_fields_stoker_cannot_decode_are_typed_errors_naming_them(field, needle):
    from stoker._petastorm import field_chain

    with pytest.raises(errors.UnsupportedTypeError, match=needle):
        field_chain(field)


def test_each_codec_maps_to_its_op():
    from stoker._petastorm import field_chain

    chain, shape = field_chain(_field("g", np.uint8, (4, 5), "CompressedImageCodec",
                                      _image_codec=".jpeg"))
    assert chain == [{"op": "decode_image", "mode": "L", "exif": False, "shape": [4, 5],
                     "dct_scaling": True}]
    assert shape == (4, 5)
    chain, _ = field_chain(_field("z", np.int16, (2, 5), "CompressedNdarrayCodec"))
    assert chain == [{"op": "decode_npz", "dtype": "int16", "shape": [2, 5], "key": "arr"}]
    chain, _ = field_chain(_field("n", np.float64, (3,), "NdarrayCodec"))
    assert chain == [{"op": "decode_npy", "dtype": "float64", "shape": [3]}]
    assert field_chain(_field("s", np.int32, (), "ScalarCodec")) == ([], None)


def test_an_unreadable_common_metadata_warns_and_the_dataset_reads_as_plain(tmp_path):
    folder = _plain_dataset(str(tmp_path / "ds"))
    with open(os.path.join(folder, "_common_metadata"), "wb") as f:
        f.write(b"not parquet at all")
    with pytest.warns(UserWarning, match="_common_metadata is not Parquet metadata"):
        loader = stoker.Loader(folder, batch_size=8, shuffle=False)
    assert next(iter(loader))["id"].tolist() == list(range(8))
