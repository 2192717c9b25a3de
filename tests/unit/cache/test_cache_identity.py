"""Cache entries follow the bytes of the file they were made from (issue 23.2, contract 10).

A file rewritten in place keeps its size and footer when only values move: swapping two values of
a plainly encoded, uncompressed column is such a rewrite (each test checks that the size and the
footer bytes are unchanged). A new loader must read the new values with or without cache_dir; a
loader opened before the rewrite reads the new values consistently (the footer still describes
the file) or raises StorageError; unchanged files still hit.
"""

from __future__ import annotations

import glob
import os
import shutil

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from s3_fixtures import moto_available

ROWS = 50_000
FIRST, SECOND = 500, 900  # swapped by the rewrite
OPTIONS = dict(columns=["x"], batch_size=10_000, shuffle=False, drop_last=False)


def write(path: str, x: np.ndarray) -> None:
    # PLAIN, uncompressed: swapping two values changes neither the sizes nor the statistics.
    pq.write_table(pa.table({"x": x}), path, row_group_size=10_000, use_dictionary=False,
                   compression="none")


def footer(path: str) -> bytes:
    with open(path, "rb") as f:
        data = f.read()
    length = int.from_bytes(data[-8:-4], "little")
    return data[-8 - length:]


def values(source, **kwargs) -> np.ndarray:
    loader = stoker.Loader(source, **OPTIONS, **kwargs)
    return np.concatenate([np.asarray(b["x"]) for b in loader])


def epoch(loader) -> np.ndarray:
    return np.concatenate([np.asarray(b["x"]) for b in loader])


def filled(source, cache_dir: str, expected: np.ndarray, **kwargs):
    """A loader that has read `expected` from `source` once and written its entries."""
    loader = stoker.Loader(source, cache_dir=cache_dir, **OPTIONS, **kwargs)
    np.testing.assert_array_equal(epoch(loader), expected)
    loader.flush_cache()
    return loader


def swapped(x: np.ndarray) -> np.ndarray:
    y = x.copy()
    y[FIRST], y[SECOND] = x[SECOND], x[FIRST]
    return y


def rewrite_in_place(path: str, x: np.ndarray) -> np.ndarray:
    """Writes the swapped values over `path` (same inode), asserting size and footer unchanged."""
    size, tail, inode = os.path.getsize(path), footer(path), os.stat(path).st_ino
    y = swapped(x)
    write(path, y)
    assert os.path.getsize(path) == size
    assert footer(path) == tail
    assert os.stat(path).st_ino == inode
    return y


@pytest.fixture
def table(tmp_path):
    path = str(tmp_path / "t.parquet")
    x = np.arange(ROWS, dtype=np.int64) * 7
    write(path, x)
    return path, x


def test_a_new_loader_with_a_cache_reads_a_file_rewritten_in_place(table, tmp_path):
    path, x = table
    cache_dir = str(tmp_path / "cache")
    np.testing.assert_array_equal(values(path, cache_dir=cache_dir), x)
    y = rewrite_in_place(path, x)
    np.testing.assert_array_equal(values(path), y)
    np.testing.assert_array_equal(values(path, cache_dir=cache_dir), y)


def test_a_rewrite_that_restores_the_mtime_is_still_seen(table, tmp_path):
    # cp -p, rsync -t, touch -r: the mtime and size are the old ones; the ctime is not.
    path, x = table
    cache_dir = str(tmp_path / "cache")
    np.testing.assert_array_equal(values(path, cache_dir=cache_dir), x)
    before = os.stat(path)
    staged = str(tmp_path / "staged.parquet")
    write(staged, swapped(x))
    shutil.copy2(staged, path)  # in place, mtime copied from the staged file
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(path)
    assert (after.st_mtime_ns, after.st_size, after.st_ino) == (
        before.st_mtime_ns, before.st_size, before.st_ino)
    assert footer(path) == footer(staged)
    np.testing.assert_array_equal(values(path, cache_dir=cache_dir), swapped(x))


def test_unchanged_files_still_hit(table, tmp_path):
    path, x = table
    cache_dir = str(tmp_path / "cache")
    cold = filled(path, cache_dir, x)
    assert cold.stats()["cache"]["writes"] == 5
    warm = stoker.Loader(path, cache_dir=cache_dir, **OPTIONS)
    for _ in range(2):
        np.testing.assert_array_equal(epoch(warm), x)
    stats = warm.stats()["cache"]
    assert stats["hits"] == 10 and stats["misses"] == 0
    assert stats["content_checks"] == 0  # keyed on the file's identity, no read


def test_a_loader_opened_before_a_rewrite_reads_the_new_values_consistently(table, tmp_path):
    path, x = table
    cache_dir = str(tmp_path / "cache")
    loader = filled(path, cache_dir, x)
    np.testing.assert_array_equal(epoch(loader), x)
    assert loader.stats()["cache"]["hits"] == 5
    y = rewrite_in_place(path, x)
    # Same footer: the loader's columns are where it reads them, so it reads the new bytes.
    np.testing.assert_array_equal(epoch(loader), y)
    np.testing.assert_array_equal(epoch(loader), y)
    assert loader.stats()["cache"]["content_checks"] > 0


def test_a_loader_opened_before_a_rewrite_with_another_layout_raises(table, tmp_path):
    path, x = table
    cache_dir = str(tmp_path / "cache")
    loader = filled(path, cache_dir, x)
    # Another row-group layout, same rows: the loader's footer no longer describes the file.
    pq.write_table(pa.table({"x": swapped(x)}), path, row_group_size=7_000)
    with pytest.raises(stoker.errors.StorageError, match="changed since the loader opened it"):
        epoch(loader)
    np.testing.assert_array_equal(values(path, cache_dir=cache_dir), swapped(x))


def test_without_a_cache_a_rewrite_with_another_layout_raises_that_the_file_changed(table,
                                                                                   tmp_path):
    """Without cache_dir too, a loader opened before a rewrite that its footer no longer
    describes says that the file changed (StorageError), not that it is corrupt; its advice,
    a new Loader, reads the new contents."""
    path, x = table
    loader = stoker.Loader(path, **OPTIONS)
    pq.write_table(pa.table({"x": swapped(x)}), path, row_group_size=7_000)
    with pytest.raises(stoker.errors.StorageError,
                       match="changed since the loader opened it.*open a new Loader") as error:
        epoch(loader)
    assert path in str(error.value)
    np.testing.assert_array_equal(values(path), swapped(x))


def test_without_a_trusted_identity_entries_are_keyed_on_the_chunks_read(table, tmp_path,
                                                                        monkeypatch):
    monkeypatch.setenv("STOKER_CACHE_IDENTITY", "content")
    path, x = table
    cache_dir = str(tmp_path / "cache")
    filled(path, cache_dir, x)
    warm = filled(path, cache_dir, x)
    assert warm.stats()["cache"]["hits"] == 5
    assert warm.stats()["cache"]["content_checks"] == 5
    y = rewrite_in_place(path, x)
    # Even with every stamp restored, the chunks' bytes name the entry.
    np.testing.assert_array_equal(values(path, cache_dir=cache_dir), y)
    np.testing.assert_array_equal(epoch(warm), y)


# ---------------------------------------------------------------------------------------------
# S3: an object replaced under the same key (moto, served through the fault proxy)

pytest_s3 = pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3")

BUCKET, KEY = "stoker-identity", "data/t.parquet"


@pytest.fixture
def s3(tmp_path):
    from s3_fixtures import serving_dir

    local = tmp_path / "local"
    local.mkdir()
    x = np.arange(ROWS, dtype=np.int64) * 7
    write(str(local / "t.parquet"), x)
    with serving_dir(str(local), BUCKET, "data") as server:
        yield server, x


@pytest.fixture
def s3_proxy(s3):
    from s3_fixtures import FaultProxy

    server, _ = s3
    proxy = FaultProxy(server.host, server.port)
    # Real S3 lists LastModified to the second: an object replaced within the second keeps it.
    proxy.freeze_times = True
    yield proxy
    proxy.close()


def replace_object(server, x: np.ndarray, tmp_path) -> np.ndarray:
    staged = str(tmp_path / "replacement.parquet")
    y = swapped(x)
    write(staged, y)
    before = server.client.head_object(Bucket=BUCKET, Key=KEY)
    assert os.path.getsize(staged) == before["ContentLength"]
    server.client.upload_file(staged, BUCKET, KEY)
    after = server.client.head_object(Bucket=BUCKET, Key=KEY)
    assert after["ETag"] != before["ETag"]
    return y


def s3_values(proxy, **kwargs):
    from s3_fixtures import s3_options

    return values(f"s3://{BUCKET}/{KEY}", storage_options=s3_options(proxy), **kwargs)


@pytest_s3
@pytest.mark.timeout(120)
def test_s3_a_replaced_object_is_read_anew_by_the_tensor_cache(s3, s3_proxy, tmp_path):
    server, x = s3
    local_footer = footer(str(tmp_path / "local" / "t.parquet"))
    cache_dir = str(tmp_path / "cache")
    np.testing.assert_array_equal(s3_values(s3_proxy, cache_dir=cache_dir), x)
    y = replace_object(server, x, tmp_path)
    assert footer(str(tmp_path / "replacement.parquet")) == local_footer
    np.testing.assert_array_equal(s3_values(s3_proxy), y)
    np.testing.assert_array_equal(s3_values(s3_proxy, cache_dir=cache_dir), y)


@pytest_s3
@pytest.mark.timeout(120)
def test_s3_a_replaced_object_is_read_anew_by_the_block_cache(s3, s3_proxy, tmp_path):
    server, x = s3
    cache_dir = str(tmp_path / "cache")
    np.testing.assert_array_equal(s3_values(s3_proxy, cache_dir=cache_dir), x)
    # Only the raw blocks are left (a loaded machine may have skipped the tensor entries).
    shutil.rmtree(os.path.join(cache_dir, "tensors"), ignore_errors=True)
    assert glob.glob(os.path.join(cache_dir, "blocks", "*", "*"))
    y = replace_object(server, x, tmp_path)
    np.testing.assert_array_equal(s3_values(s3_proxy, cache_dir=cache_dir), y)


@pytest_s3
@pytest.mark.timeout(120)
def test_s3_unchanged_objects_hit_without_reading_data(s3, s3_proxy, tmp_path):
    from s3_fixtures import s3_options

    cache_dir = str(tmp_path / "cache")
    server, x = s3
    filled(f"s3://{BUCKET}/{KEY}", cache_dir, x, storage_options=s3_options(s3_proxy))
    s3_proxy.clear()
    warm = filled(f"s3://{BUCKET}/{KEY}", cache_dir, x, storage_options=s3_options(s3_proxy))
    # Five row groups from the tensor cache, the footer from the block cache.
    assert warm.stats()["cache"]["misses"] == 0 and warm.stats()["cache"]["hits"] == 6
    methods = sorted({r.method for r in s3_proxy.log()})
    gets = [r for r in s3_proxy.log() if r.method == "GET" and r.path.endswith(".parquet")]
    assert gets == [], methods  # one HEAD for the identity, the listing, no data


@pytest_s3
@pytest.mark.timeout(120)
def test_s3_a_loader_opened_before_a_replacement_raises_rather_than_mixing(s3, s3_proxy,
                                                                           tmp_path):
    from s3_fixtures import s3_options

    server, x = s3
    cache_dir = str(tmp_path / "cache")
    loader = filled(f"s3://{BUCKET}/{KEY}", cache_dir, x, storage_options=s3_options(s3_proxy))
    replace_object(server, x, tmp_path)
    # Entries it holds still serve the snapshot it opened; the first read that needs the object
    # finds another version and fails instead of mixing old and new bytes.
    for sub in ("tensors", "blocks"):
        shutil.rmtree(os.path.join(cache_dir, sub))
    with pytest.raises(stoker.errors.StorageError, match="changed since the loader opened it"):
        epoch(loader)


def test_content_keys_give_identical_batches_on_a_dataset_of_several_files(tmp_path,
                                                                          monkeypatch):
    from stoker_testdata import digest, write_uneven_dataset

    root = str(tmp_path / "uneven")
    write_uneven_dataset(root)
    options = dict(batch_size=100, seed=4, shuffle_window=700, drop_last=False, lists="ragged")
    reference = digest(stoker.Loader(root, **options))
    monkeypatch.setenv("STOKER_CACHE_IDENTITY", "content")
    cache_dir = str(tmp_path / "cache")
    cold = stoker.Loader(root, cache_dir=cache_dir, num_threads=3, **options)
    assert digest(cold) == reference
    cold.flush_cache()
    warm = stoker.Loader(root, cache_dir=cache_dir, num_threads=2, **options)
    assert digest(warm) == reference
    stats = warm.stats()["cache"]
    assert stats["misses"] == 0 and stats["content_checks"] == stats["hits"] > 0


@pytest_s3
@pytest.mark.timeout(120)
def test_s3_without_a_trusted_version_entries_are_keyed_on_content(s3, s3_proxy, tmp_path,
                                                                   monkeypatch):
    from s3_fixtures import s3_options

    monkeypatch.setenv("STOKER_CACHE_IDENTITY", "content")
    server, x = s3
    cache_dir = str(tmp_path / "cache")
    source = f"s3://{BUCKET}/{KEY}"
    filled(source, cache_dir, x, storage_options=s3_options(s3_proxy))
    assert not os.path.exists(os.path.join(cache_dir, "blocks"))  # no raw block is trusted
    warm = filled(source, cache_dir, x, storage_options=s3_options(s3_proxy))
    assert warm.stats()["cache"]["content_checks"] == 5
    y = replace_object(server, x, tmp_path)
    np.testing.assert_array_equal(s3_values(s3_proxy, cache_dir=cache_dir), y)
