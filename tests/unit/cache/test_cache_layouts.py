"""Cache entries hold the final layout (feature groups row-major and cast, runs of plain columns
packed by rows): cold, warm and partly filled caches give the same bytes as no cache for every
output kind, including feature groups and packed runs split across decode tasks, features and
packed columns with nulls, lists padded and ragged with per-level masks, fixed-size lists and
transform prefixes."""

import glob
import os
import struct

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import ops
from stoker_testdata import digest, fill_cache


def entries(cache_dir):
    return sorted(p for p in glob.glob(os.path.join(cache_dir, "tensors", "**", "*"),
                                       recursive=True) if os.path.isfile(p))


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("layouts"))
    rng = np.random.default_rng(7)
    start = 0
    for f, rows in enumerate((900, 1300, 500)):
        columns = {"id": np.arange(start, start + rows, dtype=np.int64),
                   "x": rng.standard_normal(rows).astype(np.float32)}
        for i in range(6):
            values = rng.standard_normal(rows).astype(np.float32 if i % 2 else np.float64)
            mask = None
            if i == 4 and f == 1:  # nulls in one file only: its row groups take the slow path
                mask = rng.random(rows) < 0.1
            columns[f"d{i}"] = pa.array(values, mask=mask)
        for i in range(4):
            columns[f"c{i}"] = rng.integers(-1000, 1000, rows).astype(np.int32 if i % 2 else np.int64)
        columns["flag"] = rng.random(rows) < 0.5
        # Lists with null rows and null elements (per-level masks).
        tags = []
        for r in range(rows):
            if r % 17 == 0:
                tags.append(None)
            else:
                tags.append([None if (r + k) % 11 == 0 else int(r + k)
                             for k in range(int(rng.integers(0, 6)))])
        columns["tags"] = pa.array(tags, type=pa.list_(pa.int64()))
        columns["emb"] = pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(rows * 3).astype(np.float32)), 3)
        pq.write_table(pa.table(columns), os.path.join(root, f"part-{f}.parquet"),
                       row_group_size=200)
        start += rows
    return root


CASES = {
    "groups": dict(
        columns=["id", "tags", "emb"], lists="padded",
        features={"dense": [f"d{i}" for i in range(6)], "ids": [f"c{i}" for i in range(4)]},
        features_dtype={"dense": "float32", "ids": "int64"},
        null_mask=["dense", "tags"]),
    "groups_split_across_tasks": dict(
        columns=["id", "tags"], lists="ragged", task_bytes=1000,
        features={"dense": [f"d{i}" for i in range(6)] + ["flag"], "ids": [f"c{i}" for i in range(4)]},
        features_dtype={"dense": "float64", "ids": "float32"},
        null_mask=True),
    "fill_null_and_transforms": dict(
        columns=["id", "x", "tags"], lists="padded",
        features=[f"d{i}" for i in range(6)] + ["c0", "c1"],
        fill_null={"d4": -1.0}, null_mask=["tags"],
        transforms={"x": [ops.clip(-1.0, 1.0), ops.standardize(0.5, 2.0)],
                    "d1": [ops.clip(-0.5, 0.5)],
                    "tags": [ops.fill_null(0), ops.clip(0, 500)]}),
    "feature_also_a_column": dict(
        columns=["id", "d0", "c0"], features=["d0", "d1", "d2", "c0", "c1"]),
    # Eight or more adjacent plain columns are stored packed by rows (PackedRun); d4's nulls keep
    # file 1's row groups column by column.
    "packed_columns": dict(
        columns=["id", "x", "c0", "c1", "c2", "c3", "d0", "d1", "d4", "d5", "tags"],
        fill_null={"d4": -1.0}, lists="ragged", null_mask=["tags"]),
    "packed_columns_unshuffled": dict(
        columns=["x", "c0", "c1", "c2", "c3", "d0", "d1", "d2", "id"], shuffle=False),
    "packed_split_across_tasks": dict(
        columns=["id", "x", "c0", "c1", "c2", "c3", "d0", "d1", "d2"], task_bytes=1000),
    "packed_column_also_a_feature": dict(
        columns=["id", "x", "c0", "c1", "c2", "c3", "d0", "d1", "d2"], features=["d1", "d3"]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_cold_warm_and_partial_entries_give_the_uncached_bytes(dataset, tmp_path, case):
    options = dict(batch_size=64, seed=3, shuffle_window=500, drop_last=False,
                   allow_lossy_cast=True,
                   **CASES[case])
    reference = digest(stoker.Loader(dataset, **options))
    cache_dir = str(tmp_path / "cache")
    cold = stoker.Loader(dataset, cache_dir=cache_dir, num_threads=3, **options)
    assert digest(cold) == reference
    filled = cold.stats()["cache"]
    assert filled["misses"] > 0
    assert filled["writes"] + filled["write_skipped"] == filled["misses"]
    # A loaded machine may skip writes (write-behind); later epochs store them.
    for _ in range(5):
        if cold.stats()["cache"]["write_skipped"] == 0:
            break
        skipped = cold.stats()["cache"]["write_skipped"]
        assert digest(cold) == reference
        if cold.stats()["cache"]["write_skipped"] == skipped:
            break
    warm = stoker.Loader(dataset, cache_dir=cache_dir, num_threads=1, **options)
    assert digest(warm) == reference
    assert warm.stats()["cache"]["misses"] == 0
    # Another epoch (another order) from the same entries.
    warm.set_epoch(2)
    uncached = stoker.Loader(dataset, **options)
    uncached.set_epoch(2)
    assert digest(warm) == digest(uncached)
    # Which cases store packed runs: not unshuffled, nor where a run is split across tasks or one
    # of its columns is also read by another output.
    packed = [any(n.startswith("\x01packed ") for n in entry_schema(p).names)
              for p in entries(cache_dir)]
    if case == "packed_columns":
        assert any(packed) and not all(packed), packed
    else:
        assert not any(packed)
    for path in entries(cache_dir)[::3]:
        os.remove(path)
    partial = stoker.Loader(dataset, cache_dir=cache_dir, num_threads=2, **options)
    assert digest(partial) == reference
    stats = partial.stats()["cache"]
    assert stats["hits"] > 0 and stats["misses"] > 0


def test_a_flipped_byte_in_a_feature_block_is_detected(dataset, tmp_path):
    options = dict(batch_size=64, seed=3, shuffle_window=500, drop_last=False,
                   allow_lossy_cast=True,
                   **CASES["groups"])
    reference = digest(stoker.Loader(dataset, **options))
    cache_dir = str(tmp_path / "cache")
    filling = stoker.Loader(dataset, cache_dir=cache_dir, **options)
    digest(filling)
    filling.flush_cache()  # close() drops entries still queued behind the pipeline
    files = entries(cache_dir)
    for path in files[:3]:
        size = os.path.getsize(path)
        with open(path, "r+b") as f:
            f.seek(size // 2)  # inside the payload: the feature block is most of it
            byte = f.read(1)
            f.seek(size // 2)
            f.write(bytes([byte[0] ^ 0x40]))
    # A loaded machine may skip writes (write-behind): those entries miss too, uncorrupted.
    never_written = filling.stats()["cache"]["misses"] - len(files)
    again = stoker.Loader(dataset, cache_dir=cache_dir, **options)
    assert digest(again) == reference
    stats = again.stats()["cache"]
    assert stats["corrupt"] == 3
    assert stats["misses"] == 3 + never_written


def test_entries_differ_by_feature_layout(dataset, tmp_path):
    # The group's dtype is part of the entry's layout: another dtype never reads these entries.
    cache_dir = str(tmp_path / "cache")
    base = dict(batch_size=64, seed=3, drop_last=False, features=["d1", "d3", "d5"])
    filling = stoker.Loader(dataset, cache_dir=cache_dir, features_dtype="float32", **base)
    digest(filling)
    filling.flush_cache()
    other = stoker.Loader(dataset, cache_dir=cache_dir, features_dtype="float64", **base)
    assert digest(other) == digest(stoker.Loader(dataset, features_dtype="float64", **base))
    # Counted as on an empty cache: the float32 entries served nothing.
    fresh = stoker.Loader(dataset, cache_dir=str(tmp_path / "fresh"), features_dtype="float64",
                          **base)
    digest(fresh)
    for count in ("hits", "misses"):
        assert other.stats()["cache"][count] == fresh.stats()["cache"][count], count
    assert other.stats()["cache"]["misses"] > 0


def entry_batch(path):
    """An entry file's arrays, as the Arrow IPC stream after its header."""
    with open(path, "rb") as f:
        data = f.read()
    header_bytes = struct.unpack_from("=I", data, 12)[0]  # EntryHeader::header_bytes
    return ipc.open_stream(pa.py_buffer(data[header_bytes:])).read_next_batch()


def entry_schema(path):
    return entry_batch(path).schema


def test_entries_hold_feature_groups_row_major_and_cast(dataset, tmp_path):
    cache_dir = str(tmp_path / "cache")
    options = dict(batch_size=64, seed=3, drop_last=False, columns=["id"],
                   features={"dense": ["d1", "d3", "d5"], "ids": ["c0", "c1"]},
                   features_dtype={"dense": "float32", "ids": "int64"})
    digest(stoker.Loader(dataset, cache_dir=cache_dir, **options))
    files = entries(cache_dir)
    assert files
    for path in files:
        schema = entry_schema(path)
        names = schema.names
        # The feature columns are stored only as blocks: [rows] of F values, group dtype.
        assert "id" in names and not {"d1", "d3", "d5", "c0", "c1"} & set(names), names
        blocks = {n: schema.field(n).type for n in names if n.startswith("\x01features ")}
        assert blocks == {"\x01features 0 0 3": pa.binary(12), "\x01features 1 0 2": pa.binary(16)}


def test_entries_hold_runs_of_plain_columns_packed_by_rows(dataset, tmp_path):
    cache_dir = str(tmp_path / "cache")
    columns = ["id", "x", "c0", "c1", "c2", "c3", "d0", "d1", "d2", "flag"]
    options = dict(batch_size=64, seed=3, drop_last=False, columns=columns)
    reference = digest(stoker.Loader(dataset, **options))
    filling = stoker.Loader(dataset, cache_dir=cache_dir, **options)
    assert digest(filling) == reference
    filling.flush_cache()
    files = entries(cache_dir)
    assert files
    for path in files:
        schema = entry_schema(path)
        # id int64, x float32, c0-c3 int64/int32, d0-d2 float64/float32: 9 columns, 56 bytes a
        # row, stored only packed; flag (bool) is not packable and stays a column.
        assert set(schema.names) == {"flag", "\x01packed 0 0 9"}, schema.names
        assert schema.field("\x01packed 0 0 9").type == pa.binary(8 + 4 + 8 + 4 + 8 + 4 + 8 + 4 + 8)
    warm = stoker.Loader(dataset, cache_dir=cache_dir, **options)
    assert digest(warm) == reference
    assert warm.stats()["cache"]["misses"] == 0
    # An unshuffled loader keeps columns: its own entries, beside these.
    unshuffled = dict(options, shuffle=False)
    in_order = stoker.Loader(dataset, cache_dir=cache_dir, **unshuffled)
    assert digest(in_order) == digest(stoker.Loader(dataset, **unshuffled))
    assert in_order.stats()["cache"]["misses"] == len(files)
    assert len(entries(cache_dir)) == 2 * len(files)
    assert digest(stoker.Loader(dataset, cache_dir=cache_dir, **options)) == reference


def test_the_filling_epochs_head_stores_nothing_and_its_row_group_one_entry(dataset, tmp_path):
    # The epoch's head (its first batch: 64 rows of a 200-row row group) decodes its own rows on a
    # miss and stores nothing; the rest of its row group stores the row group's entry. So the
    # filling epoch counts one miss per row group and no hit, and a warm epoch serves the head
    # from its row group's entry too.
    options = dict(batch_size=64, seed=3, shuffle_window=500, drop_last=False,
                   columns=["id", "x", "c0"])
    reference = digest(stoker.Loader(dataset, **options))
    groups = sum(pq.ParquetFile(p).num_row_groups
                 for p in sorted(glob.glob(os.path.join(dataset, "*.parquet"))))
    cache_dir = str(tmp_path / "cache")
    cold = stoker.Loader(dataset, cache_dir=cache_dir, **options)
    assert digest(cold) == reference
    cold.flush_cache()
    filled = cold.stats()["cache"]
    assert (filled["misses"], filled["hits"]) == (groups, 0)
    assert filled["writes"] + filled["write_skipped"] == groups
    assert len(entries(cache_dir)) == filled["writes"]
    warm = stoker.Loader(dataset, cache_dir=cache_dir, **options)
    assert digest(warm) == reference
    served = warm.stats()["cache"]
    assert served["misses"] == filled["write_skipped"]  # a loaded machine may skip writes
    if filled["write_skipped"] == 0:
        assert served["hits"] == groups + 1  # every row group's segments, and the head


def test_feature_blocks_hold_every_bit_of_many_plain_columns(tmp_path):
    # Runs of four 4-byte features of the group's dtype are transposed in registers, the rest
    # one by one: 12 features (a float64 cast in the middle), row groups of 203 rows (a tail of
    # three rows), NaNs with payloads. Every stored row is compared with numpy's stacking, bit
    # for bit, and the warm epoch's bytes with the uncached ones.
    root = str(tmp_path / "data")
    os.makedirs(root)
    rng = np.random.default_rng(11)
    names = [f"f{i}" for i in range(5)] + ["g"] + [f"f{i}" for i in range(5, 11)]
    start = 0
    for part, rows in enumerate((609, 406)):
        columns = {"id": np.arange(start, start + rows, dtype=np.int64)}
        for name in names:
            values = rng.standard_normal(rows).astype(np.float64 if name == "g" else np.float32)
            if name == "f2":  # NaNs with distinct payloads survive the transpose unchanged
                bits = values.view(np.uint32)
                bits[::7] = 0x7FC00000 | np.arange(len(bits[::7]), dtype=np.uint32)
            columns[name] = values
        pq.write_table(pa.table(columns), os.path.join(root, f"part-{part}.parquet"),
                       row_group_size=203)
        start += rows
    table = pq.read_table(root)
    expected = np.stack([table[n].to_numpy().astype(np.float32) for n in names], axis=1)
    ids = table["id"].to_numpy()

    options = dict(batch_size=64, seed=3, drop_last=False, columns=["id"],
                   features={"x": names}, features_dtype="float32", allow_lossy_cast=True)
    reference = digest(stoker.Loader(root, **options))
    cache_dir = str(tmp_path / "cache")
    fill_cache(root, cache_dir, **options)
    stored_ids = []
    for path in entries(cache_dir):
        batch = entry_batch(path)
        block = batch.column("\x01features 0 0 12")
        assert block.type == pa.binary(48)
        stored = np.frombuffer(block.buffers()[1], dtype=np.float32,
                               count=len(block) * 12, offset=block.offset * 48).reshape(-1, 12)
        rows = np.searchsorted(ids, batch.column("id").to_numpy())
        assert np.array_equal(stored.view(np.uint32), expected[rows].view(np.uint32)), path
        stored_ids.extend(ids[rows])
    assert sorted(stored_ids) == list(ids)  # each of the five row groups, once
    warm = stoker.Loader(root, cache_dir=cache_dir, **options)
    assert digest(warm) == reference
    assert warm.stats()["cache"]["misses"] == 0
