"""Every error that suggests a fix is a fix (issue 22.6).

Each test triggers one advising error, reads the advice out of the message (``advice()`` parses the
``option=literal`` it names, ``value`` standing for a value of the user's choosing), applies it
literally, and asserts that the loader then opens and delivers the right values, or that the next
error is about a different problem (which is then followed too). Where the advice is an action
rather than an option (rename, leave out, move), the test encodes it and quotes the message.

Inventory: the messages of the C++ core (cpp/src) and of python/stoker that advise an option or an
action, found by grepping for "pass ", "use ", "choose ", "give ", "add ", "set ", "rename",
"leave", "start the", "end the", "option=" in message text. Messages that only state a limit are
not listed. Where in the code: cs = column resolution (cpp/src/resolve/, the function named),
dec = the decoder (cpp/src/decode/: column_source.cc, cached_prefix.cc, decoder.cc), vc =
resolve/value_conversion.cc, uc = resolve/user_transform.cc; py = python/stoker.

message (where)                                                  test
---------------------------------------------------------------  ----------------------------------
list<null>: "leave it out of columns" (cs Classify)              test_list_of_null_leave_it_out
list<timestamp>: "pass time_unit={'c': 's'}" (cs Classify)       test_list_of_timestamps_time_unit
variable-length list: "choose lists={'c': 'padded'} ... or       test_variable_list_lists_padded_or_
  lists={'c': 'ragged'}" (cs Classify)                             ragged
list of lists of strings padded: "choose lists={'c': 'ragged'}"  test_list_of_lists_padded_advises_
  (cs Classify)                                                    ragged
list of strings padded: "choose lists={'c': 'ragged'} ..., or    test_list_of_strings_padded
  transforms ... such as hash_bucket or vocabulary" (cs)
fill_null / pad_value not representable: "pass fill_null={'c':   test_fill_null_not_representable,
  value} with a value it holds" (cs CheckOptionValues; dec)        test_pad_value_not_representable,
                                                                   test_global_fill_null_nan_on_int_
                                                                   column, test_list_element_fill_
                                                                   not_representable
transforms on a timestamp: "time_unit={'c': 's'} makes a         test_transforms_on_timestamp_time_
  timestamp or date a float64 number first" (cs ResolveChain)      unit
null_mask on several outputs: "start the chains with fill_null,  test_null_mask_on_several_outputs
  or use on_error='zero'" (cs ResolveOutputs)
categories and transforms: "use one" (cs MakeCategorical)        test_categories_and_transforms_use_one
categories='auto' on transform= output: "give the vocabulary"    test_categories_auto_on_transform_
                                                                   output
transform= returns a partition key: "rename it" (cs)             test_transform_returns_partition_key
column not found: "available columns: ..." (cs lookup)           test_column_not_found_lists_columns
time_unit names a hive partition column: "leave it out" (cs)     test_time_unit_on_partition_leave_
                                                                   it_out
on_error='zero' with a list chain: "give on_error per column,    test_on_error_zero_with_list_chain
  without 'l': on_error={'img': 'zero'}" (cs; named 'image'
  whatever the columns before)
on_error for a column without transforms / on a feature: "on_   test_on_error_without_transforms,
  error applies to columns with transforms" / "to the columns in   test_on_error_on_feature
  columns" (cs)
varying chain shape: "add a resize or crop to a fixed size"      test_varying_shape_add_resize,
  (transform/op.cc Chain::Make)                                    test_on_error_zero_varying_shape
features_dtype='bfloat16': "stack the features as float32 and    test_features_dtype_bfloat16
  cast on the device" (cs; advised float16, refused, before)
features_dtype bool/float16: "use a float32/float64 or integer   test_features_dtype_float16
  dtype" (util/options.cc)
features_name / feature group clash: "rename the group" (cs)      test_features_name_clash_rename,
                                                                   test_feature_group_mask_clash_rename
feature chain ends in bfloat16: "end the chain in another dtype"  test_feature_chain_bfloat16
string (or string partition) feature: "strings become ids with   test_string_feature_categories_auto,
  categories={'c': 'auto'}" (cs)                                   test_string_partition_feature_
                                                                   categories
list feature: "move 'c' from features to columns, with           test_list_feature_move_to_columns
  lists={'c': 'padded'}" (cs; advised lists= and then refused
  the list as a feature, before)
null_mask names a feature column: "null_mask=['features']" (cs)  test_null_mask_names_feature_column
lossy stacking: "pass features_dtype='float64', or               test_lossy_features_dtype_or_allow,
  allow_lossy_cast=True" (cs; one dtype as a string when the       test_lossy_feature_groups_dtype,
  groups agree)                                                    test_temporal_feature_time_unit
feature nulls (footer statistics at open; a row group's rows):   test_feature_nulls_fill_or_group_mask,
  "fill_null={'c': value} ... or null_mask=['features']" (cs       test_missing_column_as_feature,
  NullAdvice; advised null_mask=['c'], refused, before); the       test_feature_null_count_is_the_row_
  count names the rows it counts (dec PrepareSource)               groups
column nulls: "fill_null={'c': value} ... or null_mask=['c']";   test_column_nulls_fill_or_mask,
  strings and lists: "null_mask=['c']" (cs/dec NullAdvice)         test_string_nulls_mask
column missing in a file (schema evolution): NullAdvice (cs)     test_missing_column_fill_or_mask,
                                                                   test_missing_string_column_mask
null elements in lists: "fill_null={'c': value} ... or           test_list_element_nulls,
  null_mask=['c']" (dec CheckElementNulls)                         test_list_element_nulls_with_
                                                                   transforms
null elements of a fixed-size list with transforms: "leave the   test_fixed_list_element_nulls_with_
  transforms out and pass null_mask=['c']" (dec)                   transforms
null strings / inner lists inside lists: "null_mask=['c']" (dec)  test_null_items_inside_lists
null rows into a chain: "start its transforms with               test_null_into_chain_start_with_fill_
  ops.fill_null(value) ..., or pass on_error={'c': 'zero'}" (cs    null
  NullAdvice; advised fill_null=/null_mask=, which do not reach
  the ops, before); row-level "start the chain with fill_null"
  (dec, batch/column_writers.cc)
time_unit lossy: "pass allow_lossy_cast=True ..., or leave       test_time_unit_lossy
  time_unit unset" (vc)
decimal: "pass decimals={'c': 'float64'} ..., 'float32' ... or   test_decimal_choices
  'scaled_int64'" (vc)
decimal too wide for int64: "choose decimals={'c': 'float64'}    test_decimal_too_wide_for_scaled_int64
  with allow_lossy_cast=True" (vc)
decimal lossy as float: "pass allow_lossy_cast=True ..., or      test_decimal_float64_lossy,
  decimals={'c': 'float64'}, or decimals={'c': 'scaled_int64'}"    test_decimal_float32_lossy_choices
  (vc)
too few rows: "lower batch_size or set drop_last=False"          test_too_few_rows
  (exec/loader.cc)
not categorical: "categories= names 'c'" (exec/loader.cc)        test_vocabulary_of_a_column_not_
                                                                   categorical
cast op overflow: "set lossy=True" (transform/feature_ops.cc)    test_cast_overflow_lossy
unknown op "(ops: ...)", unknown parameter "(parameters: ...)"   test_unknown_op_and_parameter,
  (transform/op.cc; listed "parameters: none" when the op          test_unknown_parameter_lists_match_
  failed on another parameter first, before)                       stoker_ops
transform_columns with a conflicting column: "pass               test_transform_schema_conflict
  transform_columns without it" (uc)
transform_columns names a partition / missing column: "file      test_transform_columns_lists_file_
  columns: ..." (uc)                                               columns
rank out of range: "rank must be in [0, world_size=N)"           test_rank_out_of_range
  (util/options.cc)
storage_options: "give one of access_key/secret_key,             test_storage_options_give_one_way_of_
  anonymous=true or role_arn" (io/filesystem.cc)                   signing
storage_options on gs://, hdfs://: "give hdfs:// settings as     test_storage_options_on_other_schemes
  URI query parameters" (io/filesystem.cc)
pin_memory=True without CUDA: "leave pin_memory off"             test_pin_memory_without_cuda
  (util/cuda_host.cc)
op list entry not an op: "use stoker.ops ... or a dict" (py      test_not_an_op_use_ops
  _options)
empty features dict / categories list: "give ..." (py _options)  test_empty_features_and_categories
empty source: "give a file, folder, glob or URI" (py _options)   test_source_empty
storage_options on a local path: "drop storage_options" (py)     test_storage_options_on_local_path
rank/world_size: "give both", RANK env: "set both, or pass       test_rank_world_size_advice
  rank= and world_size=" (py _distributed)
seed=None with several ranks: "pass the same seed= on every      test_seed_none_with_several_ranks
  rank" (py _distributed)
python_workers: "nothing to run", "a module-level function"      test_python_workers_nothing_to_run,
  (py loader, _pyworkers)                                          test_python_workers_need_importable_
                                                                   functions
device=: "use device=None ...", "needs output='torch'" (py)       test_device_advice
bfloat16 with numpy: "pass output='torch' ..., or choose         test_bfloat16_numpy_output
  float16/float32" (py loader)
output key clash: "leave 'k' out of columns, or lists={'c':      test_output_key_clash
  'ragged'}" / "leave 'c' out of null_mask" (py loader; said
  "rename one of them", which no option does, before)
transform_columns: "need transform=", "or pass None" (py)         test_transform_columns_need_transform,
                                                                   test_transform_columns_empty
state_dict seed mismatch: "pass seed=N or seed=None" (py)        test_state_dict_seed_mismatch
IterableDataset: "needs seed=" (py _torch)                        test_iterable_dataset_needs_seed
Petastorm field of variable shape: "lists={'f': 'ragged'} or     test_petastorm_variable_field_choices,
  'padded', leave it out of columns=, ... petastorm=False, or      test_petastorm_inner_dimension_varies
  stoker.petastorm.make_reader()" (py _petastorm)
several problems: "fix them all, then open again" (cs)           test_combined_problems_fix_them_all
stoker bench: the advice in flag syntax (py __main__             test_cli_bench_advice_in_flags
  cli_advice; advised features_dtype={...}, which no flag takes,
  before)
stoker inspect warnings: "pass lists=... / fill_null / null_     test_cli_inspect_warnings_work
  mask / decimals=" (py _cli_inspect; advised fill_null for
  strings, before)

Not followed here: "output='torch' needs PyTorch: pip install torch" (torch is installed),
"features and feature_groups are both set; give the groups only" (util/options.cc; the Python front
never sets both), the daemonic-process advice "use python_workers=0 there" (py _pyworkers) and the
elastic-resume advice "start the next epoch with set_epoch()" (py loader).
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import ops
from stoker.errors import (ColumnNotFoundError, InvalidOptionError, LossyCastError, NullValueError,
                           SchemaMismatchError, StokerError, TransformError, UnsupportedTypeError)

from stoker_testdata import jpeg_bytes

ROWS = 80
RG = 40

# ----------------------------------------------------------------------------------- helpers

_LITERAL = r"(\{[^{}]*\}|\[[^\[\]]*\]|'[^']*'|True|False|None|-?\d+(?:\.\d+)?)"


def advice(message: str, option: str, value=0, nth: int = -1):
    """The literal the message advises for ``option`` (``option=literal``), as Python; ``value``
    replaces the placeholder ``value``. Messages state what was given before they advise, so the
    last mention is the advice (``nth`` picks another). Fails when the message has none."""
    found = re.findall(r"(?<![\w.])" + re.escape(option) + "=" + _LITERAL, message)
    assert len(found) > (nth if nth >= 0 else -nth - 1), f"no {option}= advice in: {message}"
    text = re.sub(r"(?<=: )value(?=[},])", repr(value), found[nth])
    return ast.literal_eval(text)


def raises(error_type, path, **kw) -> str:
    """Opens and reads every batch; returns the message of the ``error_type`` it raises."""
    with pytest.raises(error_type) as info:
        load(path, **kw)
    return str(info.value)


def load(path, **kw):
    """Every batch of one unshuffled epoch, each array concatenated over the batches."""
    kw.setdefault("batch_size", ROWS)
    kw.setdefault("shuffle", False)
    kw.setdefault("drop_last", False)
    kw.setdefault("num_threads", 1)
    with stoker.Loader(path, **kw) as loader:
        batches = list(loader)
    out = {}
    for key in batches[0]:
        parts = [b[key] for b in batches]
        if isinstance(parts[0], stoker.Ragged):
            out[key] = [row for part in parts for row in stoker.to_pylist(part)]
        else:
            out[key] = np.concatenate([np.asarray(p) for p in parts])
    return out


def column(ds, name):
    return ds["table"].column(name).to_pylist()


# ------------------------------------------------------------------------------------ data


@pytest.fixture(scope="module")
def ds(tmp_path_factory):
    root = tmp_path_factory.mktemp("advice")
    rng = np.random.default_rng(22)
    i = np.arange(ROWS)
    import decimal

    table = pa.table({
        "id": pa.array(i, pa.int64()),
        "x": pa.array(i * 0.5),
        "maybe": pa.array(i * 0.25, mask=i % 7 == 3),
        "i8": pa.array((i % 100).astype(np.int8), mask=i % 5 == 1),
        "s": pa.array([f"v{k % 4}" for k in i], mask=i % 6 == 2),
        "s_ok": pa.array([f"w{k % 3}" for k in i]),
        "l": pa.array([list(range(k, k + k % 3)) for k in i], pa.list_(pa.int64())),
        "ln": pa.array([[int(k), None] if k % 4 == 0 else [int(k)] for k in i],
                       pa.list_(pa.int64())),
        "ll": pa.array([[[int(k)], [int(k), int(k)]] for k in i], pa.list_(pa.list_(pa.int64()))),
        "ls": pa.array([[f"a{k % 3}", "b"] for k in i], pa.list_(pa.string())),
        "lls": pa.array([[["c"], [f"d{k % 2}", "e"]] for k in i], pa.list_(pa.list_(pa.string()))),
        "lnull": pa.array([[None]] * ROWS, pa.list_(pa.null())),
        "lts": pa.array([[int(k) * 60] for k in i], pa.list_(pa.timestamp("s"))),
        "ts": pa.array(i * 86400, pa.timestamp("s")),
        "tsns": pa.array(1_700_000_000_000_000_000 + i * 1_000_000_007, pa.timestamp("ns")),
        "dec": pa.array([decimal.Decimal(int(k)) / 4 for k in i], pa.decimal128(5, 2)),
        "dec30": pa.array([decimal.Decimal(int(k)) / 4 for k in i], pa.decimal128(30, 2)),
        "img": pa.array([jpeg_bytes(rng, 16 + k % 3 * 8, 12 + k % 2 * 8) for k in i], pa.binary()),
        "b": pa.array(i % 2 == 0),
        "big": pa.array(i * (1 << 34), pa.int64()),
        "i64": pa.array(i * 3, pa.int64()),
    })
    path = str(root / "data.parquet")
    pq.write_table(table, path, row_group_size=RG)
    return {"path": path, "table": table, "root": root}


@pytest.fixture(scope="module")
def hive(tmp_path_factory):
    """Hive partitions part=<str>/year=<int>, one file each."""
    root = tmp_path_factory.mktemp("hive")
    for part in ("a", "b"):
        for year in (2020, 2021):
            folder = root / f"part={part}" / f"year={year}"
            folder.mkdir(parents=True)
            pq.write_table(pa.table({"x": np.arange(10, dtype=np.float64),
                                     "id": np.arange(10, dtype=np.int64)}),
                           str(folder / "f.parquet"))
    return str(root)


@pytest.fixture(scope="module")
def evolved(tmp_path_factory):
    """Two files; the second lacks the float column 'late' and the string column 'tag'."""
    root = tmp_path_factory.mktemp("evolved")
    pq.write_table(pa.table({"id": np.arange(10, dtype=np.int64),
                             "late": np.arange(10, dtype=np.float64),
                             "tag": [f"t{k}" for k in range(10)]}), str(root / "a.parquet"))
    pq.write_table(pa.table({"id": np.arange(10, 20, dtype=np.int64)}), str(root / "b.parquet"))
    return str(root)


# ------------------------------------------------------------------------- list columns


def test_list_of_null_leave_it_out(ds):
    message = raises(UnsupportedTypeError, ds["path"], columns=["id", "lnull"])
    # "... list<null> ... leave it out of columns"
    assert "leave it out of columns" in message
    assert load(ds["path"], columns=["id"])["id"].tolist() == list(range(ROWS))


def test_list_of_timestamps_time_unit(ds):
    message = raises(UnsupportedTypeError, ds["path"], columns=["lts"])
    time_unit = advice(message, "time_unit")
    assert time_unit == {"lts": "s"}
    # The next error is another problem: a list needs lists=; follow it too.
    message = raises(UnsupportedTypeError, ds["path"], columns=["lts"], time_unit=time_unit)
    assert "variable-length list" in message
    lists = advice(message, "lists")
    got = load(ds["path"], columns=["lts"], time_unit=time_unit, lists=lists)
    assert got["lts"] == [[k * 60.0] for k in range(ROWS)]


@pytest.mark.parametrize("nth", [0, 1])
def test_variable_list_lists_padded_or_ragged(ds, nth):
    message = raises(UnsupportedTypeError, ds["path"], columns=["l"])
    lists = advice(message, "lists", nth=nth)
    got = load(ds["path"], columns=["l"], lists=lists)
    want = column(ds, "l")
    if lists["l"] == "padded":
        rows = [got["l"][k][:got["l_lengths"][k]].tolist() for k in range(ROWS)]
    else:
        rows = got["l"]
    assert rows == want


def test_list_of_lists_padded_advises_ragged(ds):
    message = raises(UnsupportedTypeError, ds["path"], columns=["lls"], lists={"lls": "padded"})
    lists = advice(message, "lists")
    assert lists == {"lls": "ragged"}
    assert load(ds["path"], columns=["lls"], lists=lists)["lls"] == column(ds, "lls")


def test_list_of_strings_padded(ds):
    message = raises(UnsupportedTypeError, ds["path"], columns=["ls"], lists={"ls": "padded"})
    lists = advice(message, "lists")
    assert load(ds["path"], columns=["ls"], lists=lists)["ls"] == column(ds, "ls")
    # "... or transforms that make numbers of the strings, such as hash_bucket or vocabulary"
    assert "hash_bucket or vocabulary" in message
    got = load(ds["path"], columns=["ls"], lists={"ls": "padded"},
               transforms={"ls": [ops.vocabulary(["a0", "a1", "a2", "b"])]})
    assert got["ls"][:4].tolist() == [[0, 3], [1, 3], [2, 3], [0, 3]]


# ---------------------------------------------------------------------- option values


def test_fill_null_not_representable(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["i8"], fill_null={"i8": 1e10})
    fill_null = advice(message, "fill_null", value=-1)
    got = load(ds["path"], columns=["i8"], fill_null=fill_null)
    want = [-1 if v is None else v for v in column(ds, "i8")]
    assert got["i8"].tolist() == want


def test_global_fill_null_nan_on_int_column(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["i8", "maybe"], fill_null=float("nan"))
    fill_null = advice(message, "fill_null", value=-1)
    assert fill_null == {"i8": -1}
    got = load(ds["path"], columns=["i8", "maybe"], fill_null={"maybe": float("nan"), **fill_null})
    assert got["i8"].tolist() == [-1 if v is None else v for v in column(ds, "i8")]


def test_pad_value_not_representable(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["l"], lists="padded", pad_value=0.5)
    pad_value = advice(message, "pad_value", value=-1)
    got = load(ds["path"], columns=["l"], lists="padded", pad_value=pad_value)
    assert got["l"][0].tolist() == [-1, -1]


# -------------------------------------------------------------------------- transforms


def test_transforms_on_timestamp_time_unit(ds):
    chain = {"ts": [ops.standardize(0.0, 86400.0)]}
    message = raises(UnsupportedTypeError, ds["path"], columns=["ts"], transforms=chain)
    time_unit = advice(message, "time_unit")
    got = load(ds["path"], columns=["ts"], transforms=chain, time_unit=time_unit)
    assert got["ts"].tolist() == [float(k) for k in range(ROWS)]


def test_null_mask_on_several_outputs(ds):
    outputs = {"maybe": {"m2": [ops.standardize(0.0, 0.5)], "m4": [ops.standardize(0.0, 0.25)]}}
    message = raises(InvalidOptionError, ds["path"], columns=["maybe"], transforms=outputs,
                     null_mask=["maybe"])
    # "start the chains with fill_null, or use on_error='zero'"
    assert "start the chains with fill_null" in message
    filled = {"maybe": {name: [ops.fill_null(0.0)] + chain
                        for name, chain in outputs["maybe"].items()}}
    got = load(ds["path"], columns=["maybe"], transforms=filled)
    want = [0.0 if v is None else v / 0.25 for v in column(ds, "maybe")]
    assert got["m4"].tolist() == want
    on_error = advice(message, "on_error")
    got = load(ds["path"], columns=["maybe"], transforms=outputs, on_error=on_error)
    assert got["m4"].tolist() == want


def test_categories_and_transforms_use_one(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["s_ok"],
                     categories={"s_ok": "auto"}, transforms={"s_ok": [ops.hash_bucket(4)]})
    # "... use one (the vocabulary op of transforms, or categories)"
    assert "use one" in message
    got = load(ds["path"], columns=["s_ok"], categories={"s_ok": "auto"})
    assert got["s_ok"].tolist() == [k % 3 + 1 for k in range(ROWS)]
    got = load(ds["path"], columns=["s_ok"], transforms={"s_ok": [ops.vocabulary(["w0", "w1", "w2"])]})
    assert got["s_ok"].tolist() == [k % 3 for k in range(ROWS)]


def doubled(batch):
    return {"y": np.asarray(batch["x"]) * 2}


def test_categories_auto_on_transform_output(ds):
    def words(batch):
        return {"word": np.array([f"w{int(v) % 2}" for v in batch["id"]])}

    message = raises(InvalidOptionError, ds["path"], transform=words, transform_columns=["id"],
                     categories={"word": "auto"})
    # "give the vocabulary (a list or a file)"
    assert "give the vocabulary" in message
    got = load(ds["path"], transform=words, transform_columns=["id"],
               categories={"word": ["w0", "w1"]})
    assert got["word"].tolist() == [k % 2 + 1 for k in range(ROWS)]


def test_transform_returns_partition_key(hive):
    def clash(batch):
        return {"year": np.asarray(batch["x"])}

    message = raises(TransformError, hive, transform=clash, transform_columns=["x"])
    # "transform= returns key 'year', which is also a partition column ...; rename it"
    assert "rename it" in message

    def renamed(batch):
        return {"year_x": np.asarray(batch["x"])}

    got = load(hive, transform=renamed, transform_columns=["x"], batch_size=40)
    assert sorted(got["year_x"].tolist()) == sorted(list(range(10)) * 4)


def test_column_not_found_lists_columns(ds):
    message = raises(ColumnNotFoundError, ds["path"], columns=["idd"])
    listed = message.split("available columns: ")[1].split(", ")
    assert "id" in listed
    assert load(ds["path"], columns=["id"])["id"].tolist() == list(range(ROWS))


def test_time_unit_on_partition_leave_it_out(hive):
    message = raises(InvalidOptionError, hive, columns=["x", "year"], time_unit={"year": "s"})
    assert "leave it out" in message
    got = load(hive, columns=["x", "year"], batch_size=40)
    assert sorted(set(got["year"].tolist())) == [2020, 2021]


def test_on_error_zero_with_list_chain(ds):
    chains = {"l": [ops.cast("float32")],
              "img": [ops.decode_image(), ops.resize([8, 8])]}
    message = raises(InvalidOptionError, ds["path"], columns=["l", "img"], lists={"l": "ragged"},
                     transforms=chains, on_error="zero")
    on_error = advice(message, "on_error")
    assert on_error == {"img": "zero"}
    got = load(ds["path"], columns=["l", "img"], lists={"l": "ragged"}, transforms=chains,
               on_error=on_error)
    assert got["img"].shape == (ROWS, 8, 8, 3) and got["img_valid"].all()


def test_on_error_without_transforms(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["x"], on_error={"x": "zero"})
    # "on_error applies to columns with transforms"
    assert "on_error applies to columns with transforms" in message
    assert load(ds["path"], columns=["x"])["x"].tolist() == [k * 0.5 for k in range(ROWS)]


def test_on_error_zero_varying_shape(ds):
    message = raises(UnsupportedTypeError, ds["path"], columns=["img"],
                     transforms={"img": [ops.decode_image()]}, on_error={"img": "zero"},
                     cache_dir=str(ds["root"] / "cache-varying"))
    # "... needs a fixed shape (add a resize or crop to a fixed size)"
    assert "add a resize or crop to a fixed size" in message
    got = load(ds["path"], columns=["img"], on_error={"img": "zero"},
               transforms={"img": [ops.decode_image(), ops.resize([8, 8])]})
    assert got["img"].shape == (ROWS, 8, 8, 3)


def test_varying_shape_add_resize(ds):
    message = raises(UnsupportedTypeError, ds["path"], columns=["img"],
                     transforms={"img": [ops.decode_image()]})
    assert "add a resize or crop to a fixed size" in message
    got = load(ds["path"], columns=["img"],
               transforms={"img": [ops.decode_image(), ops.center_crop(8)]})
    assert got["img"].shape == (ROWS, 8, 8, 3)


def test_cast_overflow_lossy(ds):
    message = raises(LossyCastError, ds["path"], columns=["big"], transforms={"big": [ops.cast("int8")]})
    # "value ... does not fit int8 (set lossy=True to saturate or round)"
    assert "set lossy=True" in message
    got = load(ds["path"], columns=["big"], transforms={"big": [ops.cast("int8", lossy=True)]})
    assert got["big"].dtype == np.int8 and got["big"][-1] == 127


def test_unknown_op_and_parameter(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["img"],
                     transforms={"img": [{"op": "decode_imag"}, ops.resize(8)]})
    names = message.split("(ops: ")[1].split(")")[0].split(", ")
    assert "decode_image" in names
    message = raises(InvalidOptionError, ds["path"], columns=["img"],
                     transforms={"img": [ops.decode_image(), {"op": "resize", "sizee": [8, 8]}]})
    listed = message.split("(parameters: ")[1].split(")")[0].split(", ")
    assert listed == ["size", "interpolation", "antialias"]
    got = load(ds["path"], columns=["img"],
               transforms={"img": [ops.decode_image(), {"op": "resize", "size": [8, 8]}]})
    assert got["img"].shape == (ROWS, 8, 8, 3)


def test_unknown_parameter_lists_match_stoker_ops(ds):
    """What an unknown parameter's error lists is what the stoker.ops function takes (each of
    them, whatever else is wrong with the op)."""
    import inspect

    for name in ops.__all__:
        with pytest.raises(InvalidOptionError) as info:
            stoker.Loader(ds["path"], columns=["x"], transforms={"x": [{"op": name, "zz": 1}]})
        message = str(info.value)
        python = list(inspect.signature(getattr(ops, name)).parameters)
        if not python:
            assert "unknown parameter 'zz' (it takes no parameters)" in message, message
            continue
        listed = message.split("(parameters: ")[1].split(")")[0].split(", ")
        # decode_image's max_pixels came to stoker.ops after the engine's: either way is in step.
        assert listed in (python, python + ["max_pixels"]), message


def test_not_an_op_use_ops(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["img"],
                     transforms={"img": ["decode_image"]})
    # "... not an op: use stoker.ops (e.g. stoker.ops.resize(224)) or a dict {'op': name, **params}"
    assert "use stoker.ops" in message
    got = load(ds["path"], columns=["img"],
               transforms={"img": [{"op": "decode_image"}, ops.resize([8, 8])]})
    assert got["img"].shape == (ROWS, 8, 8, 3)


# ---------------------------------------------------------------------------- features


I64 = [k * 3 for k in range(ROWS)]  # the column 'i64', exact in every float dtype


def test_features_dtype_bfloat16(ds):
    message = raises(InvalidOptionError, ds["path"], features=["i64"], features_dtype="bfloat16")
    # "stack the features as float32 and cast on the device"
    dtypes = re.findall(r"stack the features as (\w+)(?: \(or (\w+)\))?", message)[0]
    for dtype in filter(None, dtypes):
        got = load(ds["path"], features=["i64"], features_dtype=dtype)
        assert got["features"][:, 0].tolist() == I64, dtype


def test_features_dtype_float16(ds):
    message = raises(InvalidOptionError, ds["path"], features=["i64"], features_dtype="float16")
    # "use a float32/float64 or integer dtype"
    assert "use a float32/float64 or integer dtype" in message
    for dtype in ("float32", "float64", "int64"):
        got = load(ds["path"], features=["i64"], features_dtype=dtype)
        assert got["features"].dtype == dtype and got["features"][:, 0].tolist() == I64


def test_features_name_clash_rename(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["x"], features=["id"],
                     features_name="x")
    assert "rename the group" in message
    got = load(ds["path"], columns=["x"], features=["id"], features_name="ids")
    assert got["ids"][:, 0].tolist() == list(range(ROWS))


def test_feature_group_mask_clash_rename(tmp_path):
    path = str(tmp_path / "g.parquet")
    pq.write_table(pa.table({"g_mask": np.arange(10, dtype=np.int64),
                             "v": pa.array(np.arange(10, dtype=np.float32), mask=np.arange(10) == 3)}),
                   path)
    message = raises(InvalidOptionError, path, columns=["g_mask"], features={"g": ["v"]},
                     null_mask=["g"])
    # "feature group 'g' adds 'g_mask', which is also a column; rename the group"
    assert "rename the group" in message
    got = load(path, columns=["g_mask"], features={"h": ["v"]}, null_mask=["h"], batch_size=10)
    assert got["h_mask"][:, 0].tolist() == [k != 3 for k in range(10)]
    assert got["g_mask"].tolist() == list(range(10))


def test_on_error_on_feature(ds):
    chain = {"i64": [ops.standardize(0.0, 3.0)]}
    message = raises(InvalidOptionError, ds["path"], features=["i64"], transforms=chain,
                     on_error={"i64": "zero"})
    assert "on_error applies to the columns in columns" in message
    got = load(ds["path"], features=["i64"], transforms=chain)
    assert got["features"][:, 0].tolist() == list(range(ROWS))


def test_feature_chain_bfloat16(ds):
    message = raises(UnsupportedTypeError, ds["path"], features=["i64"],
                     transforms={"i64": [ops.cast("bfloat16")]})
    assert "end the chain in another dtype" in message
    got = load(ds["path"], features=["i64"], transforms={"i64": [ops.cast("float32")]})
    assert got["features"][:, 0].tolist() == I64


def test_string_feature_categories_auto(ds):
    message = raises(UnsupportedTypeError, ds["path"], features=["s_ok", "i64"])
    categories = advice(message, "categories")
    got = load(ds["path"], features=["s_ok", "i64"], categories=categories)
    assert got["features"][:, 0].tolist() == [k % 3 + 1 for k in range(ROWS)]


def test_string_partition_feature_categories(hive):
    message = raises(UnsupportedTypeError, hive, features=["part", "id"])
    categories = advice(message, "categories")
    got = load(hive, features=["part", "id"], categories=categories, batch_size=40)
    assert sorted(set(got["features"][:, 0].tolist())) == [1.0, 2.0]


def test_list_feature_move_to_columns(ds):
    message = raises(UnsupportedTypeError, ds["path"], features=["i64", "l"])
    # "... move 'l' from features to columns, with lists={'l': 'padded'} ..."
    assert "move 'l' from features to columns" in message
    lists = advice(message, "lists")
    got = load(ds["path"], features=["i64"], columns=["l"], lists=lists)
    assert [got["l"][k][:got["l_lengths"][k]].tolist() for k in range(ROWS)] == column(ds, "l")
    assert got["features"][:, 0].tolist() == I64


def test_null_mask_names_feature_column(ds):
    message = raises(InvalidOptionError, ds["path"], features=["maybe", "i64"], null_mask=["maybe"],
                     features_dtype="float64")
    null_mask = advice(message, "null_mask")
    got = load(ds["path"], features=["maybe", "i64"], null_mask=null_mask, features_dtype="float64")
    valid = [v is not None for v in column(ds, "maybe")]
    assert got["features_mask"][:, 0].tolist() == valid


def test_lossy_features_dtype_or_allow(ds):
    message = raises(LossyCastError, ds["path"], features=["x", "big"])
    features_dtype = advice(message, "features_dtype")
    got = load(ds["path"], features=["x", "big"], features_dtype=features_dtype)
    assert got["features"][:, 1].tolist() == [k * (1 << 34) for k in range(ROWS)]
    assert advice(message, "allow_lossy_cast") is True
    got = load(ds["path"], features=["x", "big"], allow_lossy_cast=True)
    assert got["features"].dtype == np.float32


def test_lossy_feature_groups_dtype(ds):
    """With null_mask naming the group, the group is one of the dict form: the advice must still be
    an option value that works."""
    groups = {"ga": ["big"], "gb": ["x"], "gc": ["i64"]}
    message = raises(LossyCastError, ds["path"], features=groups)
    features_dtype = advice(message, "features_dtype")
    got = load(ds["path"], features=groups, features_dtype=features_dtype)
    assert got["ga"][:, 0].tolist() == [k * (1 << 34) for k in range(ROWS)]
    assert got["gb"][:, 0].tolist() == [k * 0.5 for k in range(ROWS)]
    message = raises(LossyCastError, ds["path"], features=["big"], null_mask=["features"])
    features_dtype = advice(message, "features_dtype")
    got = load(ds["path"], features=["big"], null_mask=["features"], features_dtype=features_dtype)
    assert got["features"][:, 0].tolist() == [k * (1 << 34) for k in range(ROWS)]


@pytest.mark.parametrize("follow", ["fill_null", "null_mask"])
@pytest.mark.parametrize("at_open", [True, False], ids=["at_open", "in_row_group"])
def test_feature_nulls_fill_or_group_mask(ds, follow, at_open):
    # At open the footers' null counts are reported alongside another problem (a lossy cast);
    # otherwise the nulls are found in the first row group read.
    kw = dict(features=["maybe", "x"]) if at_open else dict(features=["maybe", "x"],
                                                              features_dtype="float64")
    message = raises((NullValueError, LossyCastError), ds["path"], **kw)
    line = next(line for line in message.splitlines() if "null(s)" in line)
    assert re.search(r"has (\d+) null", line)
    option = advice(line, follow, value=-1.0)
    kw.setdefault("features_dtype", "float64")
    got = load(ds["path"], **kw, **{follow: option})
    want = column(ds, "maybe")
    if follow == "fill_null":
        assert got["features"][:, 0].tolist() == [-1.0 if v is None else v for v in want]
    else:
        assert got["features_mask"][:, 0].tolist() == [v is not None for v in want]
        assert got["features"][:, 0].tolist() == [0.0 if v is None else v for v in want]


def test_feature_null_count_is_the_row_groups(ds):
    """The count is of the rows read, and the message says which: with three ranks a row group is
    split between two of them (it used to say 'row group 0' with the count of its part)."""
    message = raises(NullValueError, ds["path"], features=["maybe"], features_dtype="float64",
                     world_size=3, rank=1, batch_size=20)
    count, first, last, rg = map(int, re.search(
        r"has (\d+) null\(s\) in rows (\d+)-(\d+) of '.*', row group (\d+)", message).groups())
    nulls = [v is None for v in column(ds, "maybe")][rg * RG + first: rg * RG + last + 1]
    assert count == sum(nulls)


@pytest.mark.parametrize("follow", ["fill_null", "null_mask"])
def test_column_nulls_fill_or_mask(ds, follow):
    message = raises(NullValueError, ds["path"], columns=["maybe"])
    option = advice(message, follow, value=-1.0)
    got = load(ds["path"], columns=["maybe"], **{follow: option})
    want = column(ds, "maybe")
    if follow == "fill_null":
        assert got["maybe"].tolist() == [-1.0 if v is None else v for v in want]
    else:
        assert got["maybe_mask"].tolist() == [v is not None for v in want]


def test_string_nulls_mask(ds):
    message = raises(NullValueError, ds["path"], columns=["s"])
    assert "fill_null={" not in message  # fill_null does not apply to strings
    null_mask = advice(message, "null_mask")
    got = load(ds["path"], columns=["s"], null_mask=null_mask)
    assert got["s_mask"].tolist() == [v is not None for v in column(ds, "s")]


@pytest.mark.parametrize("follow", ["fill_null", "null_mask"])
def test_missing_column_fill_or_mask(evolved, follow):
    message = raises(NullValueError, evolved, columns=["id", "late"])
    option = advice(message, follow, value=-1.0)
    got = load(evolved, columns=["id", "late"], batch_size=20, **{follow: option})
    if follow == "fill_null":
        assert got["late"].tolist() == list(range(10)) + [-1.0] * 10
    else:
        assert got["late_mask"].tolist() == [True] * 10 + [False] * 10


def test_missing_column_as_feature(evolved):
    message = raises(NullValueError, evolved, features=["late"], features_dtype="float64")
    null_mask = advice(message, "null_mask")
    got = load(evolved, features=["late"], features_dtype="float64", null_mask=null_mask,
               batch_size=20)
    assert got["features_mask"][:, 0].tolist() == [True] * 10 + [False] * 10
    fill_null = advice(message, "fill_null", value=-1.0)
    got = load(evolved, features=["late"], features_dtype="float64", fill_null=fill_null,
               batch_size=20)
    assert got["features"][:, 0].tolist() == list(range(10)) + [-1.0] * 10


def test_missing_string_column_mask(evolved):
    message = raises(NullValueError, evolved, columns=["tag"])
    null_mask = advice(message, "null_mask")
    got = load(evolved, columns=["tag"], null_mask=null_mask, batch_size=20)
    assert got["tag_mask"].tolist() == [True] * 10 + [False] * 10


@pytest.mark.parametrize("follow", ["fill_null", "null_mask"])
def test_list_element_nulls(ds, follow):
    message = raises(NullValueError, ds["path"], columns=["ln"], lists="ragged")
    option = advice(message, follow, value=-1)
    got = load(ds["path"], columns=["ln"], lists="ragged", **{follow: option})
    flat = [v for row in column(ds, "ln") for v in row]
    if follow == "fill_null":
        assert [v for row in got["ln"] for v in row] == [-1 if v is None else v for v in flat]
    else:
        assert got["ln_mask_1"].tolist() == [v is not None for v in flat]


def test_list_element_nulls_with_transforms(ds):
    """A list column's chain runs on its elements after the element nulls are handled: the same
    advice as without transforms, followed with the transforms kept."""
    chain = {"ln": [ops.standardize(0.0, 0.5)]}
    message = raises(NullValueError, ds["path"], columns=["ln"], lists="ragged", transforms=chain)
    flat = [v for row in column(ds, "ln") for v in row]
    fill_null = advice(message, "fill_null", value=-1)
    got = load(ds["path"], columns=["ln"], lists="ragged", transforms=chain, fill_null=fill_null)
    # The chain runs on the values; the nulls are delivered as fill_null's value.
    assert [v for row in got["ln"] for v in row] == [-1.0 if v is None else v * 2.0 for v in flat]
    null_mask = advice(message, "null_mask")
    got = load(ds["path"], columns=["ln"], lists="ragged", transforms=chain, null_mask=null_mask)
    assert got["ln_mask_1"].tolist() == [v is not None for v in flat]


def test_null_into_chain_start_with_fill_null(ds):
    chain = [ops.standardize(0.0, 0.25)]
    message = raises(NullValueError, ds["path"], columns=["maybe"], transforms={"maybe": chain})
    want = [v * 4 for v in column(ds, "maybe") if v is not None]
    # "... start its transforms with ops.fill_null(value) to replace them, or pass
    # on_error={'maybe': 'zero'} to get zeros there, false in 'maybe_valid'"
    assert "start its transforms with ops.fill_null(value)" in message
    got = load(ds["path"], columns=["maybe"], transforms={"maybe": [ops.fill_null(-1.0)] + chain})
    assert got["maybe"].tolist() == [-4.0 if v is None else v * 4 for v in column(ds, "maybe")]
    on_error = advice(message, "on_error")
    got = load(ds["path"], columns=["maybe"], transforms={"maybe": chain}, on_error=on_error)
    assert got["maybe_valid"].tolist() == [v is not None for v in column(ds, "maybe")]
    assert got["maybe"][got["maybe_valid"]].tolist() == want
    assert not got["maybe"][~got["maybe_valid"]].any()
    # The several-outputs form takes neither; its advice: "start each of its transforms with
    # ops.fill_null(value)" (the row-level message of a chain: "start the chain with fill_null").
    outputs = {"maybe": {"m4": chain, "m2": [ops.standardize(0.0, 0.5)]}}
    message = raises(NullValueError, ds["path"], columns=["maybe"], transforms=outputs)
    assert "fill_null" in message
    filled = {"maybe": {k: [ops.fill_null(-1.0)] + v for k, v in outputs["maybe"].items()}}
    got = load(ds["path"], columns=["maybe"], transforms=filled)
    assert got["m4"].tolist() == [-4.0 if v is None else v * 4 for v in column(ds, "maybe")]
    on_error = advice(message, "on_error")
    got = load(ds["path"], columns=["maybe"], transforms=outputs, on_error=on_error)
    assert got["m4_valid"].tolist() == [v is not None for v in column(ds, "maybe")]
    assert got["m4"].tolist() == [0.0 if v is None else v * 4 for v in column(ds, "maybe")]


# ------------------------------------------------------------------- value conversions


def test_time_unit_lossy(ds):
    message = raises(LossyCastError, ds["path"], columns=["tsns"], time_unit={"tsns": "ns"})
    assert advice(message, "allow_lossy_cast") is True
    got = load(ds["path"], columns=["tsns"], time_unit={"tsns": "ns"}, allow_lossy_cast=True)
    assert got["tsns"].dtype == np.float64
    # "... or leave time_unit unset for the stored int64 counts"
    assert "leave time_unit unset" in message
    got = load(ds["path"], columns=["tsns"])
    assert got["tsns"].tolist() == [1_700_000_000_000_000_000 + k * 1_000_000_007
                                    for k in range(ROWS)]


@pytest.mark.parametrize("mode", ["float64", "float32", "scaled_int64"])
def test_decimal_choices(ds, mode):
    message = raises(UnsupportedTypeError, ds["path"], columns=["dec"])
    decimals = advice(message, "decimals")
    assert decimals == {"dec": "float64"}
    # "... 'float32' (exact up to precision 6) or 'scaled_int64' (...)": the same dict, another mode
    assert f"'{mode}'" in message
    got = load(ds["path"], columns=["dec"], decimals={"dec": mode})
    want = [k / 4 for k in range(ROWS)]
    if mode == "scaled_int64":
        assert got["dec"].tolist() == [k * 25 for k in range(ROWS)]
    else:
        assert got["dec"].tolist() == want


def test_decimal_too_wide_for_scaled_int64(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["dec30"],
                     decimals={"dec30": "scaled_int64"})
    decimals = advice(message, "decimals")
    # "choose decimals={'dec30': 'float64'} with allow_lossy_cast=True"
    assert "with allow_lossy_cast=True" in message
    got = load(ds["path"], columns=["dec30"], decimals=decimals, allow_lossy_cast=True)
    assert got["dec30"].tolist() == [k / 4 for k in range(ROWS)]


# ------------------------------------------------------------------------ loader options


def test_too_few_rows(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["id"], batch_size=50, world_size=2,
                     rank=0, drop_last=True)
    # "... lower batch_size or set drop_last=False"
    assert "lower batch_size" in message
    assert len(load(ds["path"], columns=["id"], batch_size=40, world_size=2, rank=0,
                    drop_last=True)["id"]) == 40
    drop_last = advice(message, "drop_last")
    got = load(ds["path"], columns=["id"], batch_size=50, world_size=2, rank=0,
               drop_last=drop_last)
    assert len(got["id"]) == 40  # this rank's half, one short batch


def test_transform_columns_lists_file_columns(hive):
    message = raises((InvalidOptionError, ColumnNotFoundError), hive, transform=doubled,
                     transform_columns=["x", "year"])
    listed = message.split("file columns: ")[1].split(", ")
    assert listed == ["x", "id"]
    got = load(hive, transform=doubled, transform_columns=["x"], batch_size=40)
    assert sorted(got["y"].tolist()) == sorted([2.0 * k for k in range(10)] * 4)


def test_empty_features_and_categories(ds):
    with pytest.raises(InvalidOptionError, match=r"give \{group: \[columns\]\}"):
        load(ds["path"], features={})
    got = load(ds["path"], features={"g": ["i64"]})
    assert got["g"][:, 0].tolist() == I64
    with pytest.raises(InvalidOptionError, match="give at least one value, or 'auto'"):
        load(ds["path"], columns=["s_ok"], categories={"s_ok": []})
    got = load(ds["path"], columns=["s_ok"], categories={"s_ok": "auto"})
    assert got["s_ok"].tolist() == [k % 3 + 1 for k in range(ROWS)]


def test_storage_options_on_local_path(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["id"],
                     storage_options={"region": "x"})
    assert "drop storage_options" in message
    assert load(ds["path"], columns=["id"])["id"].tolist() == list(range(ROWS))


def test_rank_world_size_advice(ds, monkeypatch):
    with pytest.raises(InvalidOptionError, match="give both rank and world_size"):
        load(ds["path"], columns=["id"], rank=0)
    assert len(load(ds["path"], columns=["id"], rank=0, world_size=2, batch_size=20)["id"]) == 40
    monkeypatch.setenv("RANK", "1")
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    message = raises(InvalidOptionError, ds["path"], columns=["id"])
    # "the environment sets RANK but not WORLD_SIZE; set both, or pass rank= and world_size="
    assert "pass rank= and world_size=" in message
    got = load(ds["path"], columns=["id"], rank=1, world_size=2, batch_size=20, seed=0)
    assert len(got["id"]) == 40
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert len(load(ds["path"], columns=["id"], batch_size=20, seed=0)["id"]) == 40


def test_python_workers_nothing_to_run(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["id"], python_workers=2)
    assert "it runs augment= (or transform=)" in message
    assert load(ds["path"], columns=["id"], python_workers=0)["id"].tolist() == list(range(ROWS))


def test_device_advice(ds):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        message = raises(InvalidOptionError, ds["path"], columns=["id"], device="cuda")
        output = advice(message, "output")
        got = load(ds["path"], columns=["id"], device="cuda", output=output)
        assert got["id"].tolist() == list(range(ROWS))
        return
    message = raises(InvalidOptionError, ds["path"], columns=["id"], device="cuda", output="torch")
    device = advice(message, "device")
    got = load(ds["path"], columns=["id"], device=device, output="torch")
    assert got["id"].tolist() == list(range(ROWS))


def test_bfloat16_numpy_output(ds):
    torch = pytest.importorskip("torch")
    chain = {"x": [ops.cast("bfloat16")]}
    message = raises(InvalidOptionError, ds["path"], columns=["x"], transforms=chain)
    output = advice(message, "output")
    with stoker.Loader(ds["path"], columns=["x"], transforms=chain, output=output, shuffle=False,
                       batch_size=ROWS) as loader:
        batch = next(iter(loader))
    assert batch["x"].dtype == torch.bfloat16
    assert batch["x"].float().tolist() == [k * 0.5 for k in range(ROWS)]
    # "... or choose float16/float32"
    for dtype in re.search(r"or choose (\w+)/(\w+)", message).groups():
        got = load(ds["path"], columns=["x"], transforms={"x": [ops.cast(dtype)]})
        assert got["x"].tolist() == [k * 0.5 for k in range(ROWS)]


@pytest.mark.parametrize("added", ["l_lengths", "l_mask"])
def test_output_key_clash(tmp_path, added):
    path = str(tmp_path / "clash.parquet")
    pq.write_table(pa.table({"l": pa.array([[1, 2], [3]] * 5), added: np.arange(10)}), path)
    kw = dict(lists={"l": "padded"}, null_mask=["l"] if added == "l_mask" else False)
    message = raises(InvalidOptionError, path, columns=["l", added], **kw)
    # "... clashes with a column of that name; leave 'l_lengths' out of columns, or ..."
    assert f"leave '{added}' out of columns" in message
    got = load(path, columns=["l"], batch_size=10, **kw)
    assert got["l"][:2].tolist() == [[1, 2], [3, 0]]
    if added == "l_lengths":
        lists = advice(message, "lists")
        got = load(path, columns=["l", added], lists=lists, batch_size=10)
        assert got["l"][:2] == [[1, 2], [3]] and got[added].tolist() == list(range(10))
    else:
        assert "leave 'l' out of null_mask" in message
        got = load(path, columns=["l", added], lists={"l": "padded"}, batch_size=10)
        assert got[added].tolist() == list(range(10))


def test_output_key_clash_of_inner_lengths(tmp_path):
    # A padded list of lists also adds its inner lists' lengths, <name>_lengths_1.
    path = str(tmp_path / "clash.parquet")
    pq.write_table(pa.table({"ll": pa.array([[[1, 2], [3]], [[4]]] * 5),
                             "ll_lengths_1": np.arange(10)}), path)
    message = raises(InvalidOptionError, path, columns=["ll", "ll_lengths_1"], lists="padded")
    assert "output key 'll_lengths_1' for column 'll' clashes" in message, message
    assert "leave 'll_lengths_1' out of columns" in message
    got = load(path, columns=["ll"], lists="padded", batch_size=10)
    assert got["ll_lengths_1"][:2].tolist() == [[2, 1], [1, 0]]
    lists = advice(message, "lists")
    got = load(path, columns=["ll", "ll_lengths_1"], lists=lists, batch_size=10)
    assert got["ll"][:2] == [[[1, 2], [3]], [[4]]]
    assert got["ll_lengths_1"].tolist() == list(range(10))


def test_transform_columns_empty(ds):
    message = raises(InvalidOptionError, ds["path"], transform=doubled, transform_columns=[])
    # "name at least one column, or pass None for all"
    assert "or pass None for all" in message
    got = load(ds["path"], transform=doubled, transform_columns=None)
    assert got["y"].tolist() == [k * 1.0 for k in range(ROWS)]


def test_state_dict_seed_mismatch(ds):
    with stoker.Loader(ds["path"], columns=["id"], batch_size=10, seed=3) as loader:
        iterator = iter(loader)
        next(iterator)
        state = loader.state_dict()
    with stoker.Loader(ds["path"], columns=["id"], batch_size=10, seed=4) as other:
        with pytest.raises(stoker.errors.StateMismatchError) as info:
            other.load_state_dict(state)
    # "state_dict has seed=3 but this loader was created with seed=4; pass seed=3 or seed=None"
    seed = advice(str(info.value), "seed", nth=-2)
    with stoker.Loader(ds["path"], columns=["id"], batch_size=10, seed=seed) as resumed:
        resumed.load_state_dict(state)
        assert sum(len(b["id"]) for b in resumed) == ROWS - 10
    assert advice(str(info.value), "seed") is None
    with stoker.Loader(ds["path"], columns=["id"], batch_size=10, seed=None) as resumed:
        resumed.load_state_dict(state)
        assert sum(len(b["id"]) for b in resumed) == ROWS - 10


def test_iterable_dataset_needs_seed(ds):
    torch = pytest.importorskip("torch")
    dataset = stoker.IterableDataset(ds["path"], columns=["id"], batch_size=10, world_size=2,
                                     rank=0)
    with pytest.raises(InvalidOptionError) as info:
        list(dataset)
    # "IterableDataset read by 2 workers/ranks needs seed=: ..."
    assert "needs seed=" in str(info.value)
    dataset = stoker.IterableDataset(ds["path"], columns=["id"], batch_size=10, world_size=2,
                                     rank=0, seed=1)
    assert sum(len(b["id"]) for b in torch.utils.data.DataLoader(dataset, batch_size=None)) == 40


def test_combined_problems_fix_them_all(ds):
    message = raises(StokerError, ds["path"], columns=["l", "dec"], features=["maybe", "big"])
    assert "fix them all" in message
    kw = dict(columns=["l", "dec"], features=["maybe", "big"])
    for line in message.splitlines()[1:]:
        for option in ("lists", "decimals", "features_dtype", "fill_null"):
            if option + "=" in line:
                value = advice(line, option, value=-1.0)
                if isinstance(value, dict) and isinstance(kw.get(option), dict):
                    value = {**kw[option], **value}
                kw[option] = value
                break
    got = load(ds["path"], **kw)
    assert got["features"][:, 1].tolist() == [k * (1 << 34) for k in range(ROWS)]


# ------------------------------------------------------------------------------ the CLI


def cli(*args):
    return subprocess.run([sys.executable, "-m", "stoker", *args], capture_output=True, text=True,
                          timeout=120)


# Flags of `stoker bench` that take a value, as its advice writes them ("--lists l=padded").
_VALUE_FLAGS = ("--lists", "--time-unit", "--decimals", "--fill-null", "--features-dtype")


@pytest.mark.parametrize("extra", [["--columns", "l"], ["--columns", "dec"],
                                   ["--features", "maybe,big"],
                                   ["--features", "maybe,big", "--null-mask"],
                                   ["--columns", "maybe"], ["--columns", "s"]],
                         ids=["list", "decimal", "features", "features-masked", "nulls",
                              "string-nulls"])
def test_cli_bench_advice_in_flags(ds, extra):
    """`stoker bench` rewrites the engine's advice into its flags: each flag it names, given as
    written (VALUE: a number), makes the run go further until it succeeds."""
    args = ["bench", ds["path"], "--batches", "1", "--batch-size", "10", "--no-progress"] + extra
    for _ in range(4):
        result = cli(*args)
        if result.returncode == 0:
            break
        text = result.stderr.split("error:", 1)[1]
        flag = re.search(r"--[a-z-]+", text)
        assert flag, result.stderr
        flag = flag.group(0)
        args.append(flag)
        if flag in _VALUE_FLAGS:
            value = re.search(re.escape(flag) + r"[ =]('[^']*'|\S+)", text).group(1)
            args.append("-1" if value == "VALUE" else value.strip("'"))
    assert result.returncode == 0, (args, result.stderr)
    assert "rows/s" in result.stdout


def test_cli_inspect_warnings_work(ds):
    """`stoker inspect` warns of what would fail; the first option each warning names makes it
    read."""
    result = cli("inspect", ds["path"], "--json", "--columns", "maybe,s,l,dec,i8")
    assert result.returncode == 0, result.stderr
    warnings = json.loads(result.stdout)["warnings"]
    kw = {"lists": {}, "fill_null": {}, "null_mask": [], "decimals": {}}
    for warning in warnings:
        name = re.match(r"column '(\w+)'", warning)
        if not name:
            continue
        name = name.group(1)
        first = re.search(r"pass (\w+)=", warning)
        assert first, warning
        option = first.group(1)
        if option == "decimals":  # "pass decimals= ('float64', 'float32' or 'scaled_int64'...)"
            kw["decimals"][name] = re.search(r"\('(\w+)'", warning).group(1)
            continue
        value = advice(warning, option, value=-1, nth=0)
        if option == "lists":
            kw["lists"][name] = value
        elif option == "null_mask":
            kw["null_mask"] += value
        else:
            kw[option].update(value)
    assert set(kw["null_mask"]) == {"s"} and set(kw["fill_null"]) == {"maybe", "i8"}
    got = load(ds["path"], columns=["maybe", "s", "l", "dec", "i8"], **kw)
    assert got["maybe"].tolist() == [0 if v is None else v for v in column(ds, "maybe")]
    assert got["s_mask"].tolist() == [v is not None for v in column(ds, "s")]
    assert got["dec"].tolist() == [k / 4 for k in range(ROWS)]


# ------------------------------------------------------------------------- more messages


def test_rank_out_of_range(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["id"], rank=2, world_size=2)
    # "rank must be in [0, world_size=2), got 2"
    low, high = map(int, re.search(r"in \[(\d+), world_size=(\d+)\)", message).groups())
    ids = [load(ds["path"], columns=["id"], rank=r, world_size=high, batch_size=20,
                seed=0)["id"].tolist() for r in range(low, high)]
    assert sorted(ids[0] + ids[1]) == list(range(ROWS))


def test_transform_columns_need_transform(ds):
    message = raises(InvalidOptionError, ds["path"], transform_columns=["x"])
    # "transform_columns and transform_version need transform="
    assert "need transform=" in message
    got = load(ds["path"], transform=doubled, transform_columns=["x"])
    assert got["y"].tolist() == [k * 1.0 for k in range(ROWS)]


def test_source_empty(ds):
    message = raises(InvalidOptionError, [], columns=["id"])
    # "source is empty: give a file, folder, glob or URI"
    assert "give a file, folder" in message
    assert load(ds["path"], columns=["id"])["id"].tolist() == list(range(ROWS))


def test_seed_none_with_several_ranks(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["id"], rank=0, world_size=2,
                     seed=None, shuffle=True)
    # "... pass the same seed= on every rank (or call torch.distributed.init_process_group()
    # first)"
    assert "pass the same seed= on every rank" in message
    ids = [load(ds["path"], columns=["id"], rank=r, world_size=2, seed=7, shuffle=True,
                batch_size=20)["id"].tolist() for r in range(2)]
    assert sorted(ids[0] + ids[1]) == list(range(ROWS))


def test_pin_memory_without_cuda(ds):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is here: pin_memory=True works")
    message = raises(InvalidOptionError, ds["path"], columns=["id"], output="torch",
                     pin_memory=True)
    # "pin_memory=True: ...; import a CUDA build of torch first, or leave pin_memory off"
    assert "leave pin_memory off" in message
    got = load(ds["path"], columns=["id"], output="torch")
    assert got["id"].tolist() == list(range(ROWS))


def test_storage_options_on_other_schemes():
    with pytest.raises(InvalidOptionError) as info:
        stoker.Loader("hdfs://127.0.0.1:1/x", storage_options={"region": "r"}, max_retries=0)
    # "storage_options['region'] applies to s3:// sources only; give hdfs:// settings as URI
    # query parameters": the next error is another problem (here: no Java for HDFS)
    assert "give hdfs:// settings as URI query parameters" in str(info.value)
    with pytest.raises(StokerError) as info:
        stoker.Loader("hdfs://127.0.0.1:1/x?region=r", max_retries=0)
    assert "storage_options" not in str(info.value) and "region" not in str(info.value)


def module_double(arrays, rng=None):
    return {"x": np.asarray(arrays["x"]) * 2}


def test_python_workers_need_importable_functions(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["x"], python_workers=1,
                     augment=lambda arrays, rng: arrays)
    # "python_workers= needs augment= to be picklable (a module-level function or an instance of
    # a module-level class; not a lambda or a nested function)"
    assert "module-level function" in message
    got = load(ds["path"], columns=["x"], python_workers=1, augment=module_double)
    assert got["x"].tolist() == [float(k) for k in range(ROWS)]


def test_decimal_float64_lossy(ds):
    message = raises(LossyCastError, ds["path"], columns=["dec30"], decimals={"dec30": "float64"})
    assert advice(message, "allow_lossy_cast") is True
    got = load(ds["path"], columns=["dec30"], decimals={"dec30": "float64"}, allow_lossy_cast=True)
    assert got["dec30"].tolist() == [k / 4 for k in range(ROWS)]
    message = raises(LossyCastError, ds["path"], columns=["dec30"], decimals={"dec30": "float32"})
    assert advice(message, "allow_lossy_cast") is True
    got = load(ds["path"], columns=["dec30"], decimals={"dec30": "float32"}, allow_lossy_cast=True)
    assert got["dec30"].tolist() == [k / 4 for k in range(ROWS)]


def test_decimal_float32_lossy_choices(tmp_path):
    import decimal

    path = str(tmp_path / "d.parquet")
    pq.write_table(pa.table({"d": pa.array([decimal.Decimal("1234.5678")] * 4,
                                           pa.decimal128(8, 4))}), path)
    message = raises(LossyCastError, path, columns=["d"], decimals={"d": "float32"})
    # "...; pass allow_lossy_cast=True to accept rounding, or decimals={'d': 'float64'}, or
    # decimals={'d': 'scaled_int64'}"
    assert load(path, columns=["d"], decimals=advice(message, "decimals", nth=-2),
                batch_size=4)["d"].tolist() == [1234.5678] * 4
    assert load(path, columns=["d"], decimals=advice(message, "decimals"),
                batch_size=4)["d"].tolist() == [12345678] * 4


def test_transform_schema_conflict(tmp_path):
    root = tmp_path / "conflict"
    root.mkdir()
    pq.write_table(pa.table({"x": np.arange(5, dtype=np.float64),
                             "odd": np.arange(5, dtype=np.int64)}), str(root / "a.parquet"))
    pq.write_table(pa.table({"x": np.arange(5, dtype=np.float64),
                             "odd": [str(k) for k in range(5)]}), str(root / "b.parquet"))
    message = raises(SchemaMismatchError, str(root), transform=doubled)
    # "... (pass transform_columns without it)"
    assert "pass transform_columns without it" in message
    got = load(str(root), transform=doubled, transform_columns=["x"], batch_size=10)
    assert got["y"].tolist() == [2.0 * k for k in range(5)] * 2


def test_temporal_feature_time_unit(ds):
    """A raw timestamp feature: its hint (time_unit=) leads to another problem (float64 seconds
    of a nanosecond timestamp round), whose own advice then opens the loader."""
    kw = dict(features=["tsns"])
    message = raises(LossyCastError, ds["path"], **kw)
    # "(it holds timestamp[ns] counts; time_unit={'tsns': 's'} stacks float64 seconds since the
    # epoch, 'D' days)"
    kw["time_unit"] = advice(message, "time_unit")
    second = raises(LossyCastError, ds["path"], **kw)
    assert second != message and "time_unit='s' for column 'tsns'" in second
    kw["allow_lossy_cast"] = advice(second, "allow_lossy_cast")
    got = load(ds["path"], **kw, features_dtype="float64")
    want = [(1_700_000_000_000_000_000 + k * 1_000_000_007) / 1e9 for k in range(ROWS)]
    assert np.allclose(got["features"][:, 0], want, rtol=0, atol=1e-6)


def test_null_items_inside_lists(tmp_path):
    path = str(tmp_path / "inner.parquet")
    pq.write_table(pa.table({
        "ls": pa.array([["a", None], ["b"]] * 3, pa.list_(pa.string())),
        "ll": pa.array([[[1], None], [[2, 3]]] * 3, pa.list_(pa.list_(pa.int64()))),
    }), path)
    for name, flat in (("ls", ["a", None, "b"] * 3), ("ll", [[1], None, [2, 3]] * 3)):
        message = raises(NullValueError, path, columns=[name], lists="ragged")
        null_mask = advice(message, "null_mask")
        got = load(path, columns=[name], lists="ragged", null_mask=null_mask, batch_size=6)
        assert got[f"{name}_mask_1"].tolist() == [v is not None for v in flat], name


def test_fixed_list_element_nulls_with_transforms(tmp_path):
    path = str(tmp_path / "fixed.parquet")
    values = pa.array([1.0, None, 3.0, 4.0] * 3, pa.float32())
    pq.write_table(pa.table({"v": pa.FixedSizeListArray.from_arrays(values, 2)}), path)
    chain = {"v": [ops.standardize(0.0, 0.5)]}
    message = raises(NullValueError, path, columns=["v"], transforms=chain)
    # "... (fill them in a transform= function, or leave the transforms out and pass
    # null_mask=['v'])"
    assert "leave the transforms out" in message
    null_mask = advice(message, "null_mask")
    got = load(path, columns=["v"], null_mask=null_mask, batch_size=6)
    assert got["v_mask_1"].tolist() == [[True, False], [True, True]] * 3


def test_list_element_fill_not_representable(ds):
    message = raises(InvalidOptionError, ds["path"], columns=["ln"], lists="ragged",
                     fill_null=0.5)
    fill_null = advice(message, "fill_null", value=-1)
    got = load(ds["path"], columns=["ln"], lists="ragged", fill_null=fill_null)
    flat = [v for row in column(ds, "ln") for v in row]
    assert [v for row in got["ln"] for v in row] == [-1 if v is None else v for v in flat]


def test_vocabulary_of_a_column_not_categorical(ds):
    with stoker.Loader(ds["path"], columns=["s_ok", "x"], categories={"s_ok": "auto"},
                       batch_size=10) as loader:
        with pytest.raises(InvalidOptionError) as info:
            loader.vocabulary("x")
        # "column 'x' is not categorical (categories= names 's_ok')"
        named = re.search(r"categories= names '(\w+)'", str(info.value)).group(1)
        assert loader.vocabulary(named) == ["w0", "w1", "w2"]


# ------------------------------------------------------------------------ Petastorm stores


@pytest.fixture(scope="module")
def store():
    import petastorm_fixtures as pf

    why = pf.missing()
    if why:
        pytest.skip(why)
    from petastorm.codecs import NdarrayCodec, ScalarCodec
    from petastorm.unischema import Unischema, UnischemaField
    from pyspark.sql import types as T

    schema = Unischema("Advice", [
        UnischemaField("id", np.int32, (), ScalarCodec(T.IntegerType()), False),
        UnischemaField("var", np.int64, (None,), NdarrayCodec(), False),
        UnischemaField("odd", np.float32, (2, None), NdarrayCodec(), False),
    ])
    rows = [{"id": np.int32(i), "var": np.arange(i % 3, dtype=np.int64) + i,
             "odd": np.full((2, 1 + i % 2), i, dtype=np.float32)} for i in range(16)]
    folder = pf.scratch()
    url = pf.write_with_helpers(folder + "/store", schema, rows, row_group_rows=8, files=1)
    yield url, rows
    pf.remove(folder)


def rows_by_id(batches_or_rows, key):
    return {int(r["id"]): r[key] for r in batches_or_rows}


def test_petastorm_variable_field_choices(store):
    url, rows = store
    message = raises(UnsupportedTypeError, url, columns=["id", "var"])
    want = {int(r["id"]): r["var"].tolist() for r in rows}
    # "Choose one: lists={'var': 'ragged'} or 'padded' ..."
    lists = advice(message, "lists")
    got = load(url, columns=["id", "var"], lists=lists, batch_size=16)
    assert dict(zip(got["id"].tolist(), got["var"])) == want
    padded = {"var": re.search(r"or '(\w+)' \(a first dimension", message).group(1)}
    got = load(url, columns=["id", "var"], lists=padded, batch_size=16)
    assert {i: got["var"][k][:got["var_lengths"][k]].tolist()
            for k, i in enumerate(got["id"].tolist())} == want
    # "leave it out of columns="
    assert load(url, columns=["id"], batch_size=16)["id"].tolist() == list(range(16))
    # "pass petastorm=False to read its encoded bytes"
    petastorm = advice(message, "petastorm")
    got = load(url, columns=["id", "var"], petastorm=petastorm, batch_size=16)
    assert len(got["var"]) == 16 and all(isinstance(v, bytes) for v in got["var"])
    # "or use stoker.petastorm.make_reader(), which returns each row's array as stored"
    assert "stoker.petastorm.make_reader()" in message
    from stoker.petastorm import make_reader

    with make_reader(url, schema_fields=["id", "var"], shuffle_row_groups=False) as reader:
        assert {int(r.id): r.var.tolist() for r in reader} == want


def test_petastorm_inner_dimension_varies(store):
    url, rows = store
    message = raises(UnsupportedTypeError, url, columns=["id", "odd"], lists={"odd": "ragged"})
    # "... Use stoker.petastorm.make_reader(), which returns each row's array as stored, or
    # petastorm=False for its bytes"
    petastorm = advice(message, "petastorm")
    got = load(url, columns=["id", "odd"], petastorm=petastorm, batch_size=16)
    assert len(got["odd"]) == 16
    from stoker.petastorm import make_reader

    with make_reader(url, schema_fields=["id", "odd"], shuffle_row_groups=False) as reader:
        got = {int(r.id): r.odd.tolist() for r in reader}
    assert got == {int(r["id"]): r["odd"].tolist() for r in rows}


# ------------------------------------------------------------------------------------ S3


@pytest.fixture(scope="module")
def moto(tmp_path_factory):
    from s3_fixtures import moto_available, serving_dir

    if not moto_available():
        pytest.skip("needs moto[server] and boto3")
    local = tmp_path_factory.mktemp("s3advice") / "ds"
    local.mkdir()
    pq.write_table(pa.table({"id": np.arange(10, dtype=np.int64)}), str(local / "a.parquet"))
    with serving_dir(str(local), "advice", "ds") as server:
        for key in server.keys:  # readable without signing too
            server.client.put_object_acl(Bucket="advice", Key=key, ACL="public-read")
        yield server


def test_storage_options_give_one_way_of_signing(moto, monkeypatch, tmp_path):
    from s3_fixtures import isolate_aws_env, s3_options

    isolate_aws_env(monkeypatch, tmp_path)
    both = s3_options(moto, anonymous="true")
    message = raises(InvalidOptionError, "s3://advice/ds", storage_options=both, max_retries=0)
    # "storage_options: give one of access_key/secret_key, anonymous=true or role_arn"
    anonymous = re.search(r"anonymous=(\w+)", message).group(1)
    unsigned = {k: v for k, v in both.items() if k not in ("access_key", "secret_key")}
    got = load("s3://advice/ds", storage_options={**unsigned, "anonymous": anonymous},
               max_retries=0, batch_size=10)
    assert got["id"].tolist() == list(range(10))
    signed = {k: v for k, v in both.items() if k != "anonymous"}
    assert load("s3://advice/ds", storage_options=signed, max_retries=0,
                batch_size=10)["id"].tolist() == list(range(10))
