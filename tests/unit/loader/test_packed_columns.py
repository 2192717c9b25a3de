"""Eight or more adjacent plain scalar columns are packed by rows when rows are shuffled and a
cache_dir holds them (cpp/src/batch/README.md, PackedWriter; the entries hold them packed; without
a cache they are gathered column by column): what is delivered must not change. Every value is checked against the table written, row by row through
the id column, for every dtype width; a row group with nulls (filled with fill_null) is read
column by column beside packed ones."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker_testdata import digest

DTYPES = {"id": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8, "u8": np.uint8,
          "u16": np.uint16, "f32": np.float32, "f64": np.float64, "u32": np.uint32,
          "i64": np.int64}
ROWS, GROUP = 6000, 1000
NULLS_IN = ("i16", "f64")  # null in row group 3 only
FILL = -7


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("packed")
    rng = np.random.default_rng(11)
    columns = {}
    for name, dtype in DTYPES.items():
        if name == "id":
            values = np.arange(ROWS, dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            values = rng.standard_normal(ROWS).astype(dtype)
        else:
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max, ROWS, dtype=dtype, endpoint=True)
        columns[name] = values
    arrays = {}
    for name, values in columns.items():
        mask = np.zeros(ROWS, bool)
        if name in NULLS_IN:
            mask[3 * GROUP + 5:3 * GROUP + 40:7] = True
        arrays[name] = pa.array(values, mask=mask)
    pq.write_table(pa.table(arrays), root / "part.parquet", row_group_size=GROUP)
    return str(root), columns


def expected(columns, ids):
    out = {}
    for name, values in columns.items():
        v = values[ids].copy()
        if name in NULLS_IN:
            nulls = (ids >= 3 * GROUP + 5) & (ids < 3 * GROUP + 40) & ((ids - 3 * GROUP - 5) % 7 == 0)
            v[nulls] = FILL
        out[name] = v
    return out


def test_packed_columns_deliver_the_table_written(dataset, tmp_path):
    root, columns = dataset
    options = dict(batch_size=256, seed=5, shuffle_window=2500, num_threads=2, drop_last=False,
                   fill_null={name: FILL for name in NULLS_IN})
    batches = list(stoker.Loader(root, **options))
    ids = np.concatenate([b["id"] for b in batches])
    assert sorted(ids.tolist()) == list(range(ROWS))
    assert not np.array_equal(ids, np.arange(ROWS))  # shuffled, no cache: the column gathers
    for batch in batches:
        want = expected(columns, np.asarray(batch["id"]))
        assert list(batch) == list(DTYPES)
        for name, dtype in DTYPES.items():
            got = np.asarray(batch[name])
            assert got.dtype == dtype, name
            np.testing.assert_array_equal(got, want[name], err_msg=name)
    # Through the cache: packed entries (the row group with nulls keeps its columns), cold and
    # warm, and the unshuffled column-by-column route: the same bytes, batch for batch.
    cached = stoker.Loader(root, cache_dir=str(tmp_path / "cache"), **options)
    assert digest(cached) == digest(batches)
    warm = stoker.Loader(root, cache_dir=str(tmp_path / "cache"), **options)
    assert digest(warm) == digest(batches)
    assert warm.stats()["cache"]["misses"] == 0
    in_order = dict(options, shuffle=False)
    assert digest(stoker.Loader(root, cache_dir=str(tmp_path / "cache"), **in_order)) == \
        digest(stoker.Loader(root, **in_order))
