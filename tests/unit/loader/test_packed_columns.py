"""Eight or more adjacent plain scalar columns are packed by rows when rows are shuffled
(cpp/src/batch/README.md, PackedWriter): without a cache the workers pack each row group they
decode whole, with one the entries hold them packed. What is delivered must not change. Every
value is checked against the table written, row by row through the id column, for every dtype
width, and for adjacent 4- and 8-byte columns (packed 16 bytes of a row at a time) in row groups
of a size no block divides; a row group with nulls (filled with fill_null) is read column by
column beside packed ones."""

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker_testdata import digest

EVERY_WIDTH = {"id": np.int64, "i32": np.int32, "i16": np.int16, "i8": np.int8, "u8": np.uint8,
               "u16": np.uint16, "f32": np.float32, "f64": np.float64, "u32": np.uint32,
               "i64": np.int64}
# Pairs of 8-byte and fours of 4-byte columns, with a break and tails.
ADJACENT = {"id": np.int64, "i64": np.int64, "f64": np.float64, "u64": np.uint64,
            "f32": np.float32, "i32": np.int32, "u32": np.uint32, "g32": np.float32,
            "h32": np.float32, "i16": np.int16, "j32": np.int32, "k32": np.int32,
            "l32": np.int32, "m32": np.float32, "n64": np.float64}
LAYOUTS = {"every-width": (EVERY_WIDTH, 6000, 1000), "adjacent": (ADJACENT, 5994, 999)}
NULLS_IN = ("i16", "f64")  # null in row group 3 only
FILL = -7


@pytest.fixture(scope="module", params=sorted(LAYOUTS))
def dataset(request, tmp_path_factory):
    dtypes, rows, group = LAYOUTS[request.param]
    root = tmp_path_factory.mktemp("packed")
    rng = np.random.default_rng(11)
    columns = {}
    for name, dtype in dtypes.items():
        if name == "id":
            values = np.arange(rows, dtype=dtype)
        elif np.issubdtype(dtype, np.floating):
            values = rng.standard_normal(rows).astype(dtype)
        else:
            info = np.iinfo(dtype)
            values = rng.integers(info.min, info.max, rows, dtype=dtype, endpoint=True)
        columns[name] = values
    arrays = {}
    for name, values in columns.items():
        mask = np.zeros(rows, bool)
        if name in NULLS_IN:
            mask[3 * group + 5:3 * group + 40:7] = True
        arrays[name] = pa.array(values, mask=mask)
    pq.write_table(pa.table(arrays), root / "part.parquet", row_group_size=group)
    return str(root), columns, group


def expected(columns, ids, group):
    out = {}
    for name, values in columns.items():
        v = values[ids].copy()
        if name in NULLS_IN:
            nulls = (ids >= 3 * group + 5) & (ids < 3 * group + 40) & ((ids - 3 * group - 5) % 7 == 0)
            v[nulls] = FILL
        out[name] = v
    return out


def test_packed_columns_deliver_the_table_written(dataset, tmp_path):
    root, columns, group = dataset
    rows = len(columns["id"])
    options = dict(batch_size=256, seed=5, shuffle_window=1000, num_threads=2, drop_last=False,
                   fill_null={name: FILL for name in NULLS_IN})
    batches = list(stoker.Loader(root, **options))
    ids = np.concatenate([b["id"] for b in batches])
    assert sorted(ids.tolist()) == list(range(rows))
    assert not np.array_equal(ids, np.arange(rows))  # shuffled, no cache: packed by the workers
    for batch in batches:
        want = expected(columns, np.asarray(batch["id"]), group)
        assert list(batch) == list(columns)
        for name, values in columns.items():
            dtype = values.dtype
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


def test_packed_batches_do_not_depend_on_threads_resume_or_where_the_rows_were_packed(dataset):
    """The workers pack a row group only when one task holds the whole run (not the epoch's head
    or first windows, split among the workers; every row group with one thread): the batches must
    be the same bytes whatever the thread count, after a mid-epoch resume (a new pipeline whose
    first windows are others), and the ranks' shards together the epoch's rows."""
    root, columns, group = dataset
    options = dict(batch_size=256, seed=5, shuffle_window=1000, drop_last=False,
                   fill_null={name: FILL for name in NULLS_IN})
    loader = stoker.Loader(root, num_threads=2, **options)
    loader.set_epoch(1)
    full = digest(loader)
    for threads in (1, 3):
        other = stoker.Loader(root, num_threads=threads, **options)
        other.set_epoch(1)
        assert digest(other) == full, f"num_threads={threads}"
    at = len(full) // 2
    first = stoker.Loader(root, num_threads=2, **options)
    first.set_epoch(1)
    head = digest(itertools.islice(first, at))
    resumed = stoker.Loader(root, num_threads=2, **options)
    resumed.load_state_dict(first.state_dict())
    assert head + digest(resumed) == full
    ids = []
    for rank in range(2):
        shard = stoker.Loader(root, num_threads=2, rank=rank, world_size=2, **options)
        shard.set_epoch(1)
        for batch in shard:
            want = expected(columns, np.asarray(batch["id"]), group)
            for name in columns:
                np.testing.assert_array_equal(np.asarray(batch[name]), want[name], err_msg=name)
            ids.append(np.asarray(batch["id"]))
    assert sorted(np.concatenate(ids).tolist()) == list(range(len(columns["id"])))
