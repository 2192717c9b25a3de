"""Random schemas against a NumPy reference: every delivered value of every row, by its id.

Each seed writes a small dataset of its own (1-3 files, row groups of 1-1,500 rows, snappy, zstd
or no compression, dictionary or plain pages, 1 MiB or 4 KiB pages) and opens a loader with its
own batch size, shuffle window, thread count and, for some seeds, a cache read twice. The scalar
set (6-24 columns of every integer and float width and bool, a column some files lack, nulls
filled or masked) takes the packed-row paths (8 or more adjacent plain columns, packed by the
decoding worker or the cache's entries) beside the column paths; the categorical set (string,
large_string and pandas-style dictionary columns with unused categories and int8/16/32 indices,
dictionaries that fall back to plain pages, "auto" and given vocabularies with values no row has)
takes the category-id paths. A failure names the seed, the column and the ids that differ.
"""

from __future__ import annotations

import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker

SCALARS = [np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16, np.uint32, np.uint64,
           np.float32, np.float64, np.bool_]
FILL = 3


def _write(rng, table, path, row_group_max):
    pq.write_table(table, path, row_group_size=int(rng.integers(1, row_group_max)),
                   use_dictionary=bool(rng.random() < 0.7),
                   compression=["snappy", "zstd", "none"][int(rng.integers(3))],
                   data_page_size=int(rng.choice([1 << 20, 4096])))


def _scalar_dataset(rng, root):
    """Writes the files; returns (columns, dtype by column, values by id, null by id, rows)."""
    names = [f"c{j:02d}" for j in range(int(rng.integers(6, 25)))]
    dtypes = {n: SCALARS[int(rng.integers(len(SCALARS)))] for n in names}
    files, start = [], 0
    for f in range(int(rng.integers(1, 4))):
        rows = int(rng.integers(1, 3000))
        columns = {"id": pa.array(np.arange(start, start + rows, dtype=np.int64))}
        lacks = {names[int(rng.integers(len(names)))]} if f > 0 and rng.random() < 0.3 else set()
        for n in names:
            if n in lacks:
                continue
            dtype = dtypes[n]
            if dtype is np.bool_:
                values = rng.random(rows) < 0.5
            elif np.issubdtype(dtype, np.floating):
                values = rng.standard_normal(rows).astype(dtype)
            else:
                info = np.iinfo(dtype)
                values = rng.integers(info.min, info.max, rows, dtype=dtype, endpoint=True)
            mask = rng.random(rows) < 0.05 if rng.random() < 0.15 else None
            array = pa.array(values, mask=mask)
            if dtype is not np.bool_ and rng.random() < 0.2:
                array = array.dictionary_encode()
            columns[n] = array
        table = pa.table(columns)
        _write(rng, table, os.path.join(root, f"part{f}.parquet"), 800)
        files.append(table)
        start += rows
    values = {n: np.zeros(start, dtype=dtypes[n]) for n in names}
    nulls = {n: np.zeros(start, bool) for n in names}
    offset = 0
    for table in files:
        rows = table.num_rows
        for n in names:
            if n not in table.column_names:  # read as nulls in this file's rows
                nulls[n][offset:offset + rows] = True
                continue
            column = table.column(n).combine_chunks()
            if pa.types.is_dictionary(column.type):
                column = column.dictionary_decode()
            nulls[n][offset:offset + rows] = column.is_null().to_numpy(zero_copy_only=False)
            values[n][offset:offset + rows] = column.fill_null(
                False if dtypes[n] is np.bool_ else 0).to_numpy(zero_copy_only=False)
        offset += rows
    return names, dtypes, values, nulls, start


def _every_batch(loader, cached, rows, seed):
    """(epoch, batch, ids, real) of one epoch, or with a cache two (the filling epoch, then a
    warm one); each epoch must deliver every row once. ``real``: the rows that are not padding."""
    for epoch in range(2 if cached else 1):
        loader.set_epoch(epoch)
        seen = []
        for batch in loader:
            ids = np.asarray(batch["id"])
            real = ~np.asarray(batch["_padding"]) if "_padding" in batch else np.ones(len(ids),
                                                                                      bool)
            seen.append(ids[real])
            yield epoch, batch, ids[real], real
        assert np.array_equal(np.sort(np.concatenate(seen)), np.arange(rows)), (seed, epoch)
    loader.close()


@pytest.mark.parametrize("seed", range(12))
def test_scalar_columns_equal_the_reference(seed, tmp_path):
    rng = np.random.default_rng(1000 + seed)
    names, dtypes, values, nulls, rows = _scalar_dataset(rng, str(tmp_path))
    filled = [n for n in names if nulls[n].any() and dtypes[n] is not np.bool_]
    masked = [n for n in names if nulls[n].any() and dtypes[n] is np.bool_]
    options = dict(batch_size=int(rng.integers(1, 700)), shuffle=True,
                   seed=int(rng.integers(1000)),
                   shuffle_window=int(rng.choice([0, 1, 100, 1000, 65536])),
                   num_threads=int(rng.integers(1, 4)), drop_last=False, output="numpy")
    if filled:
        options["fill_null"] = {n: FILL for n in filled}
    if masked:
        options["null_mask"] = masked
    cached = rng.random() < 0.4
    if cached:
        options["cache_dir"] = str(tmp_path / "cache")
    loader = stoker.Loader(str(tmp_path), **options)
    for epoch, batch, ids, real in _every_batch(loader, cached, rows, seed):
        for n in names:
            got = np.asarray(batch[n])[real]
            want = values[n][ids].copy()
            null = nulls[n][ids]
            if n in filled:
                want[null] = FILL
            if n in masked:
                assert np.array_equal(np.asarray(batch[f"{n}_mask"])[real], ~null), (seed, n)
                got, want = got[~null], want[~null]
            assert got.dtype == want.dtype, (seed, n, got.dtype, want.dtype)
            # Bit for bit (floats compared as bytes: -0.0 and NaN payloads too).
            same = got.view(np.uint8) if got.dtype.kind == "f" else got
            ref = want.view(np.uint8) if want.dtype.kind == "f" else want
            if not np.array_equal(same, ref):
                bad = np.nonzero(got != want)[0][:5]
                pytest.fail(f"seed {seed}, epoch {epoch}: {n} ({dtypes[n].__name__}) at ids "
                            f"{ids[bad]}: {got[bad]} instead of {want[bad]}; {options}")


def _category_dataset(rng, root):
    """Writes the files; returns (columns, value by id (None: null), rows, the values in use)."""
    names = [f"s{j}" for j in range(int(rng.integers(1, 6)))]
    cardinality = {n: int(rng.choice([1, 3, 50, 300, 5000])) for n in names}
    pools = {n: np.array([f"{n}-{k}-" + "x" * int(rng.integers(0, 12))
                          for k in range(cardinality[n])], dtype=object) for n in names}
    reference = {n: [] for n in names}
    start = 0
    for f in range(int(rng.integers(1, 3))):
        rows = int(rng.integers(1, 4000))
        columns = {"id": pa.array(np.arange(start, start + rows, dtype=np.int64))}
        for n in names:
            picked = pools[n][rng.integers(0, cardinality[n], rows)]
            mask = rng.random(rows) < 0.05 if rng.random() < 0.4 else np.zeros(rows, bool)
            kind = int(rng.integers(4))
            if kind == 2:  # pandas' category: its categories (and one no row uses) as dictionary
                dictionary = pa.array(list(pools[n]) + [f"unused-{n}"], type=pa.string())
                index = pa.int32() if len(dictionary) > 32767 else (
                    pa.int16() if len(dictionary) > 127 else
                    [pa.int8(), pa.int16(), pa.int32()][int(rng.integers(3))])
                where = {v: i for i, v in enumerate(dictionary.to_pylist())}
                indices = pa.array([where[v] for v in picked], mask=mask, type=index)
                columns[n] = pa.DictionaryArray.from_arrays(indices, dictionary)
            else:
                array = pa.array(picked, mask=mask, type=pa.string())
                columns[n] = array.cast(pa.large_string()) if kind == 1 else array
            reference[n].extend(None if m else v for v, m in zip(picked, mask))
        pq.write_table(pa.table(columns), os.path.join(root, f"part{f}.parquet"),
                       row_group_size=int(rng.integers(1, 1500)),
                       use_dictionary=bool(rng.random() < 0.8),
                       # A small limit makes large dictionaries fall back to plain pages.
                       dictionary_pagesize_limit=int(rng.choice([1 << 20, 2048])),
                       data_page_size=int(rng.choice([1 << 20, 1024])))
        start += rows
    return names, reference, start, pools


@pytest.mark.parametrize("seed", range(12))
def test_category_ids_equal_the_reference(seed, tmp_path):
    rng = np.random.default_rng(2000 + seed)
    names, reference, rows, pools = _category_dataset(rng, str(tmp_path))
    categories = {}
    for n in names:
        if rng.random() < 0.6:
            categories[n] = "auto"
        else:  # some of the values, and one no row has: the others are out of vocabulary (0)
            given = rng.choice(pools[n], size=min(len(pools[n]), int(rng.integers(1, 20))),
                               replace=False)
            categories[n] = list(dict.fromkeys(given)) + [f"never-{n}"]
    fill = {n: int(rng.integers(0, 3)) for n in names if None in reference[n]}
    options = dict(batch_size=int(rng.integers(1, 500)), shuffle=bool(rng.random() < 0.8),
                   seed=int(rng.integers(100)), shuffle_window=int(rng.choice([0, 100, 65536])),
                   num_threads=int(rng.integers(1, 4)), drop_last=False, categories=categories,
                   output="numpy")
    if fill:
        options["fill_null"] = fill
    cached = rng.random() < 0.4
    if cached:
        options["cache_dir"] = str(tmp_path / "cache")
    loader = stoker.Loader(str(tmp_path), **options)
    ids_of = {}
    for n in names:
        vocabulary = loader.vocabulary(n)
        if categories[n] == "auto":  # sorted by UTF-8 bytes; dictionaries may add unused values
            used = {v for v in reference[n] if v is not None}
            assert used <= set(vocabulary), (seed, n)
            assert vocabulary == sorted(vocabulary, key=str.encode), (seed, n)
        else:
            assert vocabulary == categories[n], (seed, n)
        ids_of[n] = {v: i + 1 for i, v in enumerate(vocabulary)}
    for epoch, batch, ids, real in _every_batch(loader, cached, rows, seed):
        for n in names:
            got = np.asarray(batch[n])[real]
            assert got.dtype == np.int64, (seed, n, got.dtype)
            want = np.array([fill[n] if reference[n][i] is None else ids_of[n].get(
                reference[n][i], 0) for i in ids], dtype=np.int64)
            if not np.array_equal(got, want):
                bad = np.nonzero(got != want)[0][:5]
                pytest.fail(f"seed {seed}, epoch {epoch}: {n} at ids {ids[bad]}: {got[bad]} "
                            f"instead of {want[bad]}")
