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


# ------------------------------------------------------------------------------ pickle bombs
# The allowlist blocks code, but allowed classes are called with the pickle's arguments and
# pickle's opcodes grow containers: each bomb below is refused within the budget. They run in a
# child process under an address-space limit (so a bomb that is not refused cannot take the
# machine's memory) and a timeout (a hash or repr bomb hangs instead).

def _long(n):
    data = pickle.encode_long(n)
    return pickle.LONG1 + bytes([len(data)]) + data


def _global(module, name):
    return pickle.GLOBAL + f"{module}\n{name}\n".encode()


def _get(i):
    return pickle.LONG_BINGET + i.to_bytes(4, "little")


def _shared_tuples(depth, memo=0):
    """A tuple of two references to the previous level, ``depth`` levels (memo ``memo``...),
    left on the stack: str(), repr(), hash() and == walk 2**depth leaves."""
    out = pickle.EMPTY_TUPLE + pickle.MEMOIZE + pickle.POP
    for level in range(depth):
        out += _get(memo + level) + _get(memo + level) + pickle.TUPLE2 + pickle.MEMOIZE
        out += pickle.POP
    return out + _get(memo + depth)


def _nested_dtype_pickle(depth):
    d = np.dtype("u1")
    for _ in range(depth):
        new = np.dtype(f"V{2 * d.itemsize}")
        new.__setstate__((3, "|", None, ("a", "b"), {"a": (d, 0), "b": (d, d.itemsize)},
                          2 * d.itemsize, 1, 16))
        d = new
    return pickle.dumps(d, protocol=4)


def _bombs():
    P4 = pickle.PROTO + b"\x04"
    floats = pickle.MARK + pickle.BINFLOAT + b"\x3f\xf0" + b"\x00" * 6 + pickle.MEMOIZE
    floats += _get(0) * 1999 + pickle.LIST + pickle.MEMOIZE + pickle.POP  # memo 1: [1.0] * 2000
    floats += pickle.MARK + _get(1) * 2000 + pickle.LIST + pickle.MEMOIZE + pickle.POP  # 4M
    floats += pickle.MARK + _get(2) * 16 + pickle.LIST  # 64M floats: 512 MiB as float64
    return {
        # The 35-byte pickle: bytearray(2**31).
        "bytearray_2gib": b"\x80\x02" + _global("__builtin__", "bytearray") + _long(2 ** 31)
                          + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP,
        "bytes_new_2gib": b"\x80\x02" + _global("builtins", "bytes") + _long(2 ** 31)
                          + pickle.TUPLE1 + pickle.NEWOBJ + pickle.STOP,
        "numpy_void_2gib": b"\x80\x02" + _global("numpy", "void") + _long(2 ** 31)
                           + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP,
        "numpy_float64_of_a_shared_list": b"\x80\x02" + _global("numpy", "float64") + floats
                                          + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP,
        "str_of_a_shared_tuple": P4 + _global("builtins", "str") + pickle.MEMOIZE
                                 + _shared_tuples(26, memo=1) + pickle.TUPLE1 + pickle.REDUCE
                                 + pickle.STOP,
        "codec_of_a_shared_tuple": P4 + _global("petastorm.codecs", "CompressedImageCodec")
                                   + pickle.MEMOIZE + _shared_tuples(26, memo=1)
                                   + pickle.TUPLE1 + pickle.REDUCE + pickle.STOP,
        "dict_key_hash": P4 + pickle.EMPTY_DICT + _shared_tuples(64) + pickle.NONE
                         + pickle.SETITEM + pickle.STOP,
        "frozenset_member_hash": P4 + pickle.MARK + _shared_tuples(64) + pickle.FROZENSET
                                 + pickle.STOP,
        "nested_dtype_repr": _nested_dtype_pickle(24),
        "appends_of_empty_sets": P4 + pickle.EMPTY_LIST + pickle.MARK
                                 + pickle.EMPTY_SET * 3_000_000 + pickle.APPENDS + pickle.STOP,
        "memo_entries": P4 + (pickle.EMPTY_TUPLE + pickle.MEMOIZE + pickle.POP) * 3_000_000
                        + pickle.NONE + pickle.STOP,
    }


_BOMB_CHILD = r"""
import json, os, resource, sys, time
sys.path.insert(0, sys.argv[1])
folder, names = sys.argv[2], sys.argv[3:]
from stoker import errors
from stoker._unischema import loads_unischema

def status_kib(key):
    with open("/proc/self/status") as f:
        return [int(line.split()[1]) for line in f if line.startswith(key + ":")][0]

def reset_peak():
    try:  # Linux >= 4.0: "5" resets the peak RSS (VmHWM) to the current RSS
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass

limit = status_kib("VmSize") * 1024 + (1 << 30)  # 1 GiB beyond what is mapped now
resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
for name in names:
    print(json.dumps({"start": name}), flush=True)
    path = os.path.join(folder, name, "_common_metadata")
    with open(os.path.join(folder, name + ".pickle"), "rb") as f:
        data = f.read()
    reset_peak()
    base = status_kib("VmRSS")
    started = time.monotonic()
    try:
        loads_unischema(data, path)
        error, message = None, ""
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        error, message = type(e).__name__, str(e)
    print(json.dumps({"name": name, "error": error, "message": message[:500],
                      "peak_growth_mib": (status_kib("VmHWM") - base) / 1024,
                      "seconds": time.monotonic() - started}), flush=True)
"""


@pytest.fixture(scope="module")
def bomb_results(tmp_path_factory):
    """Each bomb loaded in a child process; a hung child is recorded and the rest rerun."""
    import json
    import subprocess
    import sys

    folder = tmp_path_factory.mktemp("bombs")
    bombs = _bombs()
    for name, data in bombs.items():
        (folder / f"{name}.pickle").write_bytes(data)
    src = os.path.join(pf.REPO, "python")
    results, todo = {}, list(bombs)
    while todo:
        try:
            out = subprocess.run([sys.executable, "-c", _BOMB_CHILD, src, str(folder), *todo],
                                 capture_output=True, text=True, timeout=120).stdout
            hung = None
        except subprocess.TimeoutExpired as expired:
            out = (expired.stdout or b"").decode() if isinstance(expired.stdout, bytes) \
                else (expired.stdout or "")
            hung = "timeout"
        started = None
        for line in out.splitlines():
            record = json.loads(line)
            if "start" in record:
                started = record["start"]
            else:
                results[record["name"]] = record
                started = None
        if started is None and hung is None:
            missing = [n for n in todo if n not in results]
            for name in missing:
                results[name] = {"name": name, "error": "child died", "message": out[-500:]}
            break
        if started is not None:
            results[started] = {"name": started, "error": hung or "child died",
                                "message": "no answer (hung or killed)"}
            todo = todo[todo.index(started) + 1:]
        else:
            todo = []
    return results


@pytest.mark.parametrize("name", list(_bombs()))
def test_pickle_bombs_are_refused_within_the_budget(bomb_results, name):
    result = bomb_results[name]
    assert result["error"] == "UnsafeMetadataError", result
    assert f"bombs/{name}/_common_metadata" in result["message"] or \
        f"{name}/_common_metadata" in result["message"], result
    # The budget is 64 MiB of estimated objects (a bomb stopped at it grows RSS by ~85 MiB).
    assert result["peak_growth_mib"] < 160, result


def test_a_big_real_unischema_fits_the_budget():
    """Petastorm's own pickle of a 2,000-field schema loads (the budget is far above it)."""
    pf_missing = pf.missing()
    if pf_missing:
        pytest.skip(pf_missing)
    pf.apply_compat()
    from petastorm.codecs import CompressedImageCodec, NdarrayCodec, ScalarCodec
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql import types as T

    fields = []
    for i in range(2000):
        kind = i % 3
        fields.append(
            UnischemaField(f"f{i}", np.float32, (), ScalarCodec(T.FloatType()), False) if kind == 0
            else UnischemaField(f"f{i}", np.int16, (4, i % 7 + 1), NdarrayCodec(), True)
            if kind == 1 else
            UnischemaField(f"f{i}", np.uint8, (8, 8, 3), CompressedImageCodec("jpeg", 90), False))
    loaded = loads_unischema(pickle.dumps(Unischema("Wide", fields)))
    assert list(loaded.fields) == [f.name for f in fields]
    assert loaded.fields["f1"].shape == (4, 2) and loaded.fields["f2"].codec.image_codec == "jpeg"


@pytest.mark.parametrize("payload, needle", [
    # A class's state set through BUILD would change it for the whole process.
    (b"\x80\x02" + _global("collections", "OrderedDict") + pickle.NONE + pickle.EMPTY_DICT
     + pickle.BINUNICODE + b"\x01\x00\x00\x00x" + pickle.NONE + pickle.SETITEM + pickle.TUPLE2
     + pickle.BUILD + pickle.STOP, "sets the state of collections.OrderedDict"),
    # Stand-ins keep their own names: a pickle cannot replace a codec's kind.
    (pickle.PROTO + b"\x04" + _global("petastorm.codecs", "NdarrayCodec") + pickle.EMPTY_TUPLE
     + pickle.NEWOBJ + pickle.EMPTY_DICT + pickle.SHORT_BINUNICODE + b"\x04kind"
     + pickle.SHORT_BINUNICODE + b"\x03npz" + pickle.SETITEM + pickle.BUILD + pickle.STOP,
     "NdarrayCodec sets 'kind'"),
    (b"\x80\x03" + _global("builtins", "str") + pickle.SHORT_BINBYTES + b"\x01x"
     + pickle.BINUNICODE + b"\x08\x00\x00\x00punycode" + pickle.TUPLE2 + pickle.REDUCE
     + pickle.STOP, "encoding 'punycode'"),
])
def test_odd_but_small_pickles_are_refused_by_name(payload, needle):
    with pytest.raises((errors.UnsafeMetadataError, errors.CorruptFileError), match=needle):
        loads_unischema(payload, "ds/_common_metadata")
