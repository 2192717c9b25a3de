"""Every output dtype through every route a batch takes to the caller (issue 22, item 2).

One dataset holds a column of every dtype stoker delivers (the bfloat16 ones made by
``transforms``), plus the keys that come with them (masks, lengths, ``_valid``), strings and
ragged lists (nested too). Each route must give the plain route's batches exactly: the same keys,
the same dtype and the same bytes. The routes: plain iteration (numpy, torch), ``augment=`` on
threads and in ``python_workers`` processes (numpy, torch), ``transform=``, ``IterableDataset`` in
a ``DataLoader`` (in-process and in a worker process) and the device hand-off's batch mapping
(with a CPU copy; the CUDA copy and pinned memory themselves run where a GPU exists).

numpy has no bfloat16: every numpy route refuses a bfloat16 column at open.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import Ragged, ops
from stoker._device import DeviceFeeder
from stoker.errors import InvalidOptionError, TransformError

torch = pytest.importorskip("torch")

ROWS = 96
BATCH = 20  # a short last batch (drop_last=False)
# allow_lossy_cast: transform= outputs have no footer statistics to prove ts_s exact (it is).
BASE = dict(batch_size=BATCH, seed=7, shuffle_window=40, drop_last=False, num_threads=2,
            allow_lossy_cast=True)
FLOAT_SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 1e-40, 3.4e38]

# key -> the dtype every route delivers (the values of a Ragged: (kind, values, offsets)).
EXPECTED = {
    "f16": "float16", "f32": "float32", "f32_mask": "bool", "f64": "float64", "flag": "bool",
    "u8": "uint8", "u16": "uint16", "u32": "uint32", "u64": "uint64",
    "i8": "int8", "i16": "int16", "i32": "int32", "i64": "int64",
    "ts": "int64",        # timestamp[us]: the stored counts
    "ts_s": "float64",    # timestamp[ms] with time_unit="s"
    "day": "int64",       # date32, widened
    "fsl": "float32",     # fixed_size_list<float32, 3>: [B, 3]
    "pad": "float32", "pad_lengths": "int64",
    "word": ("utf8", "uint8", "int64"), "word_mask": "bool",
    "blob": ("binary", "uint8", "int64"),
    "rag": ("list", "int32", "int64"),
    "nest": ("list", ("list", "int16", "int64"), "int64"),
}
EXPECTED_BF16 = {
    "bf": "bfloat16", "bf_valid": "bool",
    "bfpad": "bfloat16", "bfpad_lengths": "int64",
    "bfrag": ("list", "bfloat16", "int64"),
}
COLUMNS = ["f16", "f32", "f64", "flag", "u8", "u16", "u32", "u64", "i8", "i16", "i32", "i64",
           "ts", "ts_s", "day", "fsl", "pad", "word", "blob", "rag", "nest"]
OPTIONS = dict(BASE, columns=COLUMNS, null_mask=["f32", "word"], time_unit={"ts_s": "s"},
               lists={"pad": "padded", "rag": "ragged", "nest": "ragged"})
BF16_OPTIONS = dict(BASE, columns=COLUMNS + ["bf", "bfpad", "bfrag"],
                    null_mask=["f32", "word"], time_unit={"ts_s": "s"},
                    lists={"pad": "padded", "rag": "ragged", "nest": "ragged",
                           "bfpad": "padded", "bfrag": "ragged"},
                    transforms={"bf": [ops.cast("bfloat16")], "bfpad": [ops.cast("bfloat16")],
                                "bfrag": [ops.cast("bfloat16")]},
                    on_error={"bf": "zero"})


def _bf16_source(rng: np.random.Generator, n: int) -> np.ndarray:
    """float32 values that round to bfloat16 in every way: ties, carries, NaN, inf, huge."""
    values = rng.standard_normal(n).astype(np.float32) * 100
    values[:12] = [1.00390625, 1.01171875, 1.0078125, -2.00390625, 3.3895314e38, 3.4e38,
                   np.nan, -np.nan, np.inf, -np.inf, -0.0, 1e-40]
    return values


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    rng = np.random.default_rng(5)
    ints = {name: rng.integers(np.iinfo(name).min, np.iinfo(name).max, ROWS, dtype=name,
                               endpoint=True)
            for name in ("uint8", "uint16", "uint32", "uint64", "int8", "int16", "int32",
                         "int64")}
    f32 = rng.standard_normal(ROWS).astype(np.float32)
    f32[:len(FLOAT_SPECIALS)] = FLOAT_SPECIALS
    f32_valid = rng.random(ROWS) > 0.2
    words = [None if i % 7 == 3 else "w" * (i % 5) + "é" * (i % 3) for i in range(ROWS)]
    rag = [list(range(i % 4)) for i in range(ROWS)]
    nest = [[[j, -j] * (j % 3) for j in range(i % 3)] for i in range(ROWS)]
    table = pa.table({
        "f16": pa.array(rng.standard_normal(ROWS).astype(np.float16)),
        "f32": pa.array(f32, mask=~f32_valid),
        "f64": pa.array(np.concatenate([FLOAT_SPECIALS, rng.standard_normal(ROWS - 6)])),
        "flag": pa.array(rng.random(ROWS) > 0.5),
        **{f"{'u' if k.startswith('u') else 'i'}{np.dtype(k).itemsize * 8}": pa.array(v)
           for k, v in ints.items()},
        "ts": pa.array(rng.integers(-2**50, 2**50, ROWS), pa.timestamp("us")),
        "ts_s": pa.array(rng.integers(0, 2**40, ROWS), pa.timestamp("ms", tz="UTC")),
        "day": pa.array(rng.integers(-20000, 20000, ROWS).astype(np.int32), pa.date32()),
        "fsl": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(ROWS * 3).astype(np.float32)), 3),
        "pad": pa.array([list(rng.standard_normal(i % 4).astype(np.float32))
                         for i in range(ROWS)], pa.list_(pa.float32())),
        "word": pa.array(words, pa.string()),
        "blob": pa.array([bytes([i % 256]) * (i % 4) for i in range(ROWS)], pa.binary()),
        "rag": pa.array(rag, pa.list_(pa.int32())),
        "nest": pa.array(nest, pa.list_(pa.list_(pa.int16()))),
        "bf": pa.array(_bf16_source(rng, ROWS)),
        "bfpad": pa.array([list(_bf16_source(rng, 12)[:i % 5]) for i in range(ROWS)],
                          pa.list_(pa.float32())),
        "bfrag": pa.array([list(_bf16_source(rng, 12)[i % 12:]) for i in range(ROWS)],
                          pa.list_(pa.float32())),
    })
    root = tmp_path_factory.mktemp("routes")
    pq.write_table(table, str(root / "part.parquet"), row_group_size=30)
    return str(root)


# ------------------------------------------------------------------ user code (module level)

def identity(batch, rng):
    return batch


def identity_transform(columns):
    return columns


def double_bf16(batch, rng):
    with np.errstate(over="ignore"):  # the largest values double to inf, in bfloat16 too
        return {**batch, "bf": batch["bf"] * np.float32(2)}


def bf16_as_float64(batch, rng):
    return {**batch, "bf": batch["bf"].astype(np.float64)}


# --------------------------------------------------------------------- canonical comparison

def map_arrays(value, fn):
    """fn on a tensor, or on each tensor of a (nested) Ragged."""
    if isinstance(value, Ragged):
        return Ragged(map_arrays(value.values, fn), fn(value.offsets), value.kind)
    return fn(value)


def _leaf(array) -> tuple:
    if isinstance(array, torch.Tensor):
        assert array.device.type == "cpu"
        if array.dtype == torch.bfloat16:
            return ("bfloat16", tuple(array.shape), array.view(torch.int16).numpy().tobytes())
        array = array.numpy()
    assert isinstance(array, np.ndarray), type(array)
    return (str(array.dtype), array.shape, np.ascontiguousarray(array).tobytes())


def canon(value) -> tuple:
    """(dtype, shape, bytes) of an array or tensor; a Ragged level by level."""
    if isinstance(value, Ragged):
        return ("ragged", value.kind, canon(value.values), canon(value.offsets))
    return _leaf(value)


def canon_batches(batches) -> list:
    return [{key: canon(value) for key, value in batch.items()} for batch in batches]


def dtypes(canonical: tuple):
    if canonical[0] == "ragged":
        return (canonical[1], dtypes(canonical[2]), canonical[3][0])
    return canonical[0]


def check_table(batches: list, expected: dict) -> None:
    assert batches, "no batches"
    for batch in batches:
        assert set(batch) == set(expected), sorted(batch)
        for key, want in expected.items():
            assert dtypes(batch[key]) == want, (key, dtypes(batch[key]), want)


def load(dataset, **options) -> list:
    with stoker.Loader(dataset, **options) as loader:
        return canon_batches(loader)


@pytest.fixture(scope="module")
def reference(dataset):
    """The plain routes: numpy without bfloat16 columns, torch with them."""
    plain_numpy = load(dataset, **OPTIONS)
    plain_torch = load(dataset, output="torch", **BF16_OPTIONS)
    check_table(plain_numpy, EXPECTED)
    check_table(plain_torch, {**EXPECTED, **EXPECTED_BF16})
    assert len(plain_numpy) == -(-ROWS // BATCH)
    # numpy and torch agree key for key (dtype names, shapes, bytes) where both exist.
    assert [{k: b[k] for k in EXPECTED} for b in plain_torch] == plain_numpy
    return {"numpy": plain_numpy, "torch": plain_torch}


def test_bfloat16_values_are_the_engines_rounding(dataset, reference):
    """The plain torch route's bfloat16 is the float32 source rounded to nearest even (checked
    against torch's own float32 -> bfloat16 cast; NaN as NaN)."""
    table = pq.read_table(dataset)
    with stoker.Loader(dataset, output="torch", **{**BF16_OPTIONS, "shuffle": False}) as loader:
        got = torch.cat([b["bf"] for b in loader])
    source = torch.from_numpy(table.column("bf").to_numpy())
    want = source.to(torch.bfloat16)
    assert got.dtype == torch.bfloat16
    assert torch.equal(torch.isnan(got), torch.isnan(source))
    finite = ~torch.isnan(source)
    assert torch.equal(got[finite].view(torch.int16), want[finite].view(torch.int16))


# ------------------------------------------------------------------------------- the routes

NUMPY_ROUTES = {
    "augment_threads": dict(augment=identity),
    "augment_python_workers": dict(augment=identity, python_workers=1),
    # transform= takes every file column but the list of lists, which it cannot return.
    "transform": dict(transform=identity_transform,
                      transform_columns=[c for c in COLUMNS + ["bf", "bfpad", "bfrag"]
                                         if c != "nest"]),
}


def route_options(route: str, base: dict, expected: dict) -> tuple:
    """The loader options of a route and the keys it delivers."""
    if route == "transform":  # transform= reads the file columns it is given; nest is not one
        base = dict(base, columns=[c for c in base["columns"] if c != "nest"],
                    lists={k: v for k, v in base["lists"].items() if k != "nest"})
        expected = {k: v for k, v in expected.items() if k != "nest"}
    return dict(base, **NUMPY_ROUTES[route]), expected


@pytest.mark.parametrize("route", sorted(NUMPY_ROUTES))
@pytest.mark.parametrize("output", ["numpy", "torch"])
def test_loader_routes_match_the_plain_route(dataset, reference, route, output):
    options, expected = route_options(
        route, OPTIONS if output == "numpy" else BF16_OPTIONS,
        EXPECTED if output == "numpy" else {**EXPECTED, **EXPECTED_BF16})
    got = load(dataset, output=output, **options)
    check_table(got, expected)
    assert got == [{k: b[k] for k in expected} for b in reference[output]]


@pytest.mark.parametrize("route", sorted(NUMPY_ROUTES))
def test_numpy_routes_refuse_bfloat16_at_open(dataset, route):
    options, _ = route_options(route, BF16_OPTIONS, {})
    with pytest.raises(InvalidOptionError, match="column 'bf' is bfloat16.*output='torch'"):
        stoker.Loader(dataset, output="numpy", **options)


@pytest.mark.parametrize("workers", [0, 1])
def test_iterable_dataset_in_a_dataloader_matches_the_plain_route(dataset, reference, workers):
    data = stoker.IterableDataset(dataset, **BF16_OPTIONS)
    loader = torch.utils.data.DataLoader(data, batch_size=None, num_workers=workers)
    got = canon_batches(loader)
    check_table(got, {**EXPECTED, **EXPECTED_BF16})
    assert got == reference["torch"]


def test_device_hand_off_maps_every_tensor(dataset, reference):
    """The feeder moves every tensor (each level of a nested Ragged too) and keeps dtypes; a
    copy on the CPU stands in for the CUDA copy (``move_batch`` is what the CUDA copy uses)."""
    from stoker._device import move_batch

    moved = []

    def copy(batch):
        return move_batch(batch, lambda t: moved.append(t.dtype) or t.clone()), lambda: None

    with stoker.Loader(dataset, output="torch", **BF16_OPTIONS) as loader:
        loader._feeder = DeviceFeeder(copy)  # what device="cuda" installs, with CPU copies
        got = canon_batches(loader)
    assert got == reference["torch"]
    assert torch.bfloat16 in moved


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("augment", [None, identity])
def test_cuda_device_route_matches_the_plain_route(dataset, reference, augment):
    with stoker.Loader(dataset, output="torch", device="cuda", augment=augment,
                       **BF16_OPTIONS) as loader:
        batches = [{k: map_arrays(v, lambda t: t.cpu()) for k, v in b.items()} for b in loader]
    assert canon_batches(batches) == reference["torch"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="pinned memory needs CUDA")
def test_pinned_routes_match_the_plain_route(dataset, reference):
    """Page-locked slabs (pin_memory=True), and a DataLoader that pins its batches."""
    with stoker.Loader(dataset, output="torch", pin_memory=True, **BF16_OPTIONS) as loader:
        assert canon_batches(loader) == reference["torch"]
    data = stoker.IterableDataset(dataset, **BF16_OPTIONS)
    pinned = torch.utils.data.DataLoader(data, batch_size=None, pin_memory=True)
    assert canon_batches(pinned) == reference["torch"]


# ------------------------------------------------------------------- bfloat16 and augment=

@pytest.mark.parametrize("python_workers", [0, 1])
def test_bfloat16_through_augment_stays_torch_bfloat16(dataset, python_workers):
    """The issue's case: cast("bfloat16"), output="torch" and an augment= that returns its
    batch gave torch.int16 holding the raw bits."""
    options = dict(BASE, columns=["bf"], transforms={"bf": [ops.cast("bfloat16")]},
                   output="torch")
    with stoker.Loader(dataset, **options) as loader:
        plain = [b["bf"] for b in loader]
    with stoker.Loader(dataset, augment=identity, python_workers=python_workers,
                       **options) as loader:
        augmented = [b["bf"] for b in loader]
    assert plain[0].dtype == torch.bfloat16
    for a, p in zip(augmented, plain, strict=True):
        assert a.dtype == torch.bfloat16
        assert torch.equal(a.view(torch.int16), p.view(torch.int16))



def test_augment_sees_bfloat16_as_float32_and_returns_it(dataset, reference):
    """augment= computes on the values (widened exactly), and its float32 result is rounded
    back to bfloat16: doubling is exact, so the batch is the plain one doubled."""
    with stoker.Loader(dataset, output="torch", augment=double_bf16, **BF16_OPTIONS) as loader:
        got = [b["bf"] for b in loader]
    with stoker.Loader(dataset, output="torch", **BF16_OPTIONS) as loader:
        plain = [b["bf"] for b in loader]
    for g, p in zip(got, plain, strict=True):
        assert g.dtype == torch.bfloat16
        assert torch.equal(g.float().nan_to_num(), (p.float() * 2).nan_to_num())


def test_augment_returning_bfloat16_column_in_another_dtype_is_refused(dataset):
    with stoker.Loader(dataset, output="torch", augment=bf16_as_float64,
                       **BF16_OPTIONS) as loader:
        with pytest.raises(TransformError, match=r"epoch 0, batch 0: augment= output 'bf' has "
                                                 r"dtype float64; the column is bfloat16"):
            next(iter(loader))


def test_round_trip_of_bfloat16_bits_is_exact():
    """Every bfloat16 bit pattern survives the widening augment= sees and the rounding back."""
    from stoker._convert import _narrow_to_bfloat16, _widen_bfloat16

    bits = np.arange(-2**15, 2**15, dtype=np.int32).astype(np.int16)
    quiet = bits.copy()
    nan = (bits.view(np.uint16) & 0x7FFF) > 0x7F80
    quiet[nan] |= 0x40  # the engine makes only quiet NaNs
    np.testing.assert_array_equal(_narrow_to_bfloat16(_widen_bfloat16(quiet)), quiet)
    # Rounding matches torch's (nearest even) on every float32 near the bfloat16 grid.
    wide = _widen_bfloat16(quiet[~nan]).view(np.uint32)
    probes = np.concatenate([wide + d for d in (0x7FFF, 0x8000, 0x8001)]).view(np.float32)
    probes = probes[~np.isnan(probes)]  # the largest carry into NaN patterns
    want = torch.from_numpy(probes).to(torch.bfloat16).view(torch.int16).numpy()
    np.testing.assert_array_equal(_narrow_to_bfloat16(probes), want)


def test_plain_dense_columns_take_the_short_route(dataset):
    """host() reads only the name and values of a column delivered as one dense array with
    nothing beside it (per column, each other attribute costs a trip through the bindings); every
    other column (masks, lengths, ``_valid``, lists, strings, bfloat16) takes the full route. The
    tests above show both routes give the plain batches; this pins which columns take which."""
    with stoker.Loader(dataset, output="torch", **BF16_OPTIONS) as loader:
        plain = loader._route.plain
        columns = loader.columns
        first = next(iter(loader))
    for name, info in columns.items():
        expected = (info.kind == "dense" and not info.added_keys
                    and str(info.dtype) != "bfloat16")
        assert (name in plain) == expected, name
    assert {"f64", "u64", "i64"} <= plain
    assert not {"f32", "bf", "pad", "rag"} & plain  # a mask, bfloat16, lengths, a list
    assert first["u64"].dtype == torch.uint64 and first["f32_mask"].dtype == torch.bool


def test_all_plain_batches_come_whole_and_equal_the_per_column_route(dataset):
    """Where every column is dense values alone, host() takes the whole batch in one call
    (``Batch.values()``); its batches equal the per-column route's (keys in order, dtypes, bytes).
    The arrays carry numpy's own dtypes (``np.dtype("int64")`` itself, not a "long long" twin),
    so ``torch.from_numpy`` takes every one as it is, uint64 included; they are writable and
    keep their memory after the loader closes."""
    from stoker._convert import Route

    plain_columns = ["f16", "f64", "flag", "u8", "u16", "u32", "u64", "i8", "i16", "i32",
                     "i64", "ts", "day", "fsl"]
    options = dict(BASE, columns=plain_columns)
    with stoker.Loader(dataset, **options) as loader:
        assert loader._route.all_plain
        whole = [dict(batch) for batch in loader]
    with stoker.Loader(dataset, **options) as loader:
        loader._route = Route("numpy", added_keys=loader._route.added_keys, plain=frozenset())
        assert not loader._route.all_plain
        per_column = list(loader)
    assert len(whole) == len(per_column) == -(-ROWS // BATCH)
    for got, want in zip(whole, per_column):
        assert list(got) == list(want) == plain_columns
        for key in plain_columns:
            assert got[key].dtype is np.dtype(got[key].dtype.str), key  # numpy's own
            assert got[key].dtype == want[key].dtype and got[key].shape == want[key].shape
            assert got[key].tobytes() == want[key].tobytes(), key
            assert got[key].flags.writeable and got[key].flags.c_contiguous
    # The slabs outlive the loader: every row is still there, as pyarrow reads the file.
    table = pq.read_table(dataset)
    for key in ("u64", "i64", "i8"):
        values = np.concatenate([batch[key] for batch in whole])
        np.testing.assert_array_equal(np.sort(values), np.sort(table.column(key).to_numpy()))
    with stoker.Loader(dataset, output="torch", **options) as loader:
        first = next(iter(loader))
    assert first["u64"].dtype == torch.uint64 and first["i64"].dtype == torch.int64
    np.testing.assert_array_equal(first["u64"].numpy(), whole[0]["u64"])


def test_whole_batch_keys_are_the_column_names_byte_for_byte(tmp_path):
    """A column name with a NUL in it (Parquet allows any UTF-8) keeps its whole name as the key
    on the whole-batch route, as on the per-column one."""
    names = ["a\x00b", "c"]
    pq.write_table(pa.table({names[0]: np.arange(10), names[1]: np.arange(10.0)}),
                   str(tmp_path / "x.parquet"))
    with stoker.Loader(str(tmp_path), batch_size=4, shuffle=False) as loader:
        assert loader._route.all_plain and list(loader.columns) == names
        first = next(iter(loader))
    assert list(first) == names
    np.testing.assert_array_equal(first["a\x00b"], np.arange(4))
