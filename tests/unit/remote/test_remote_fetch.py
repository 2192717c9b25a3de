"""The fetch stage for remote sources (exec/pipeline.h, io/prefetched_file.h).

A fetcher requests the column chunks of upcoming tasks on the I/O pool before the CPU workers take
them. Checks: the same bytes with and without it and with any num_io_threads; it really runs (the
"fetch" stage in stats); a deleted object or a stopped server mid-epoch raises a typed error that
names the file, never hangs; close() while requests are under way returns; in-flight memory stays
within prefetch_bytes with a slow consumer. No timing assertions: pytest's timeout catches hangs.
"""

from __future__ import annotations

import os
import threading
import time

import pytest

import stoker
from stoker.errors import DatasetNotFoundError, StorageError

from s3_fixtures import SECRET_KEY, dataset_server, moto_available, s3_options
from stoker_testdata import digest, write_uneven_dataset

pytestmark = [pytest.mark.skipif(not moto_available(), reason="needs moto[server] and boto3"),
              pytest.mark.usefixtures("hermetic_aws_env")]  # conftest.py

BUCKET = "stoker-fetch"
PREFIX = "uneven"
FILE_ROWS = (1000, 2500, 700, 1800)

moto = dataset_server(BUCKET, PREFIX, lambda local: write_uneven_dataset(local, FILE_ROWS))


def source(bucket=BUCKET):
    return f"s3://{bucket}/{PREFIX}"


def stage(loader, name):
    return next((s for s in loader.stats()["stages"] if s["name"] == name), None)


def run_epochs(src, epochs=1, **kwargs):
    out = []
    with stoker.Loader(src, **kwargs) as loader:
        for epoch in range(epochs):
            loader.set_epoch(epoch)
            out.append(digest(loader))
        fetch = stage(loader, "fetch")
    return out, fetch


@pytest.mark.timeout(180)
@pytest.mark.parametrize("shuffle", [True, False])
def test_same_batches_with_and_without_the_fetch_stage(moto, proxy, monkeypatch, shuffle):
    kwargs = dict(batch_size=128, shuffle=shuffle, seed=11, num_threads=2, drop_last=False,
                  task_bytes=8192, prefetch_bytes="256KiB")
    local, _ = run_epochs(moto.local_dir, epochs=2, **kwargs)
    fetched, fetch = run_epochs(source(), epochs=2, storage_options=s3_options(proxy), **kwargs)
    assert fetch is not None and fetch["items"] > 0 and fetch["bytes"] > 0
    monkeypatch.setenv("STOKER_FETCH_AHEAD", "0")
    direct, none = run_epochs(source(), epochs=2, storage_options=s3_options(proxy), **kwargs)
    assert none is None  # the stage did not run, so it is not listed
    assert len(local[0]) > 10
    assert fetched == local
    assert direct == local


@pytest.mark.timeout(180)
@pytest.mark.parametrize("io_threads", [1, 3, 16])
def test_same_batches_with_any_num_io_threads(moto, proxy, io_threads):
    kwargs = dict(batch_size=200, seed=5, num_threads=2, task_bytes=4096)
    local, _ = run_epochs(moto.local_dir, **kwargs)
    remote, fetch = run_epochs(source(), storage_options=s3_options(proxy),
                               num_io_threads=io_threads, **kwargs)
    assert remote == local
    assert fetch["items"] > 0


@pytest.mark.timeout(120)
def test_tensor_cache_warm_epoch_fetches_nothing(moto, proxy, tmp_path):
    kwargs = dict(batch_size=256, seed=2, num_threads=2, cache_dir=str(tmp_path / "cache"))
    local, _ = run_epochs(moto.local_dir, **{k: v for k, v in kwargs.items() if k != "cache_dir"})
    with stoker.Loader(source(), storage_options=s3_options(proxy), **kwargs) as loader:
        loader.set_epoch(0)
        assert digest(loader) == local[0]
        cold = stage(loader, "fetch")
        # An empty cache cannot hit: the fetch stage starts with the epoch, every task fetched.
        assert cold is not None and cold["items"] == stage(loader, "decode")["items"]
        before = len([r for r in proxy.log() if r.method == "GET"])
        loader.set_epoch(0)  # the same epoch again, from the cache
        assert digest(loader) == local[0]
        warm = stage(loader, "fetch")
        assert warm["items"] == cold["items"]  # no task fetched in the warm epoch
        assert len([r for r in proxy.log() if r.method == "GET"]) == before


@pytest.mark.timeout(120)
def test_the_heads_row_group_is_downloaded_before_anything_else(moto, proxy):
    """The epoch's head (its first batch's rows) gets the link to itself: fetched beside later
    tasks' column chunks, it shared the bandwidth and the first batch came 0.2-0.6 s later on an
    emulated 200 Mbit/s link. Every GET is held 0.5 s at the proxy; the requests that arrive
    before the first answer must all be inside the head's row group (row group 0 of part-0,
    shuffle off); with 16 request slots the fetcher would otherwise ask for later row groups at
    once (the test's own check: later row groups are requested at all)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(os.path.join(moto.local_dir, "part-0.parquet")).metadata
    rg1_start = min(meta.row_group(1).column(c).dictionary_page_offset
                    or meta.row_group(1).column(c).data_page_offset
                    for c in range(meta.num_columns))
    delay = 0.5
    with stoker.Loader(source(), storage_options=s3_options(proxy), batch_size=128,
                       shuffle=False, drop_last=False, num_threads=2,
                       num_io_threads=16) as loader:
        proxy.clear()  # the footers were read by the constructor
        proxy.inject("delay", count=-1, method="GET", delay_s=delay)
        rows = sum(len(b["id"]) for b in loader)
        gets = [r for r in proxy.log() if r.method == "GET" and r.range]
    assert rows == sum(FILE_ROWS)

    def start(request):
        return int(request.range.split("=")[1].split("-")[0])

    first_answer = min(r.time for r in gets) + delay
    early = [r for r in gets if r.time < first_answer]
    assert early
    for r in early:
        assert r.path.endswith("part-0.parquet") and start(r) < rg1_start, (r, rg1_start)
    assert any(not r.path.endswith("part-0.parquet") or start(r) >= rg1_start for r in gets)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fetch_ahead", ["1", "0"])
def test_deleted_object_mid_epoch_names_the_file(moto, proxy, monkeypatch, fetch_ahead):
    # The same typed error with and without the fetch stage.
    monkeypatch.setenv("STOKER_FETCH_AHEAD", fetch_ahead)
    bucket = "stoker-fetch-delete-" + fetch_ahead
    moto.create_bucket(bucket)
    keys = moto.upload_dir(moto.local_dir, bucket, PREFIX)
    loader = stoker.Loader(source(bucket), storage_options=s3_options(proxy), batch_size=100,
                           shuffle=False, num_threads=2, max_retries=1, retry_base_delay=0.01)
    victim = sorted(k for k in keys if k.endswith(".parquet"))[-1]
    moto.client.delete_object(Bucket=bucket, Key=victim)
    batches = 0
    # As for a local file deleted after the loader opened: a StorageError, not "no dataset".
    with loader, pytest.raises(StorageError) as info:
        for _ in loader:
            batches += 1
    assert not isinstance(info.value, DatasetNotFoundError)
    assert "no longer exists" in str(info.value)
    assert batches >= 1  # the files before it were delivered
    message = str(info.value)
    assert os.path.basename(victim) in message and "row group" in message
    assert SECRET_KEY not in message


@pytest.mark.timeout(60)
def test_server_stopped_while_fetching_raises_and_does_not_hang(proxy):
    loader = stoker.Loader(source(), storage_options=s3_options(proxy), max_retries=2,
                           retry_base_delay=0.05, batch_size=50, num_threads=1,
                           prefetch_bytes="24KiB", task_bytes=4096, shuffle=False)
    batches = 0
    total = len(loader)
    with loader, pytest.raises(OSError) as info:
        for _ in loader:
            batches += 1
            if batches == 1:
                proxy.close()
    assert 1 <= batches < total
    assert f"s3://{BUCKET}/{PREFIX}/" in str(info.value)


@pytest.mark.timeout(60)
def test_close_while_requests_are_under_way_returns(proxy):
    # Every request takes a while: close() comes while the fetcher has many in flight.
    proxy.inject("delay", -1, method="GET", delay_s=0.3)
    loader = stoker.Loader(source(), storage_options=s3_options(proxy), batch_size=64,
                           num_threads=2, num_io_threads=8, task_bytes=4096,
                           prefetch_bytes="4MiB")
    it = iter(loader)
    next(it)
    closer = threading.Thread(target=loader.close)
    closer.start()
    closer.join(30)
    assert not closer.is_alive(), "close() hung while requests were in flight"
    with pytest.raises(Exception):
        for _ in it:
            pass


@pytest.mark.timeout(120)
def test_inflight_memory_stays_within_prefetch_bytes_with_a_slow_consumer(moto, proxy):
    budget = 64 << 10
    task_bytes = 4096
    loader = stoker.Loader(source(), storage_options=s3_options(proxy), batch_size=100,
                           num_threads=2, num_io_threads=8, task_bytes=task_bytes,
                           prefetch_bytes=budget, shuffle=False)
    with loader:
        for i, _ in enumerate(loader):
            if i < 8:
                time.sleep(0.1)  # the fetcher has time to run as far ahead as it may
        stats = loader.stats()
        assert stage(loader, "fetch")["items"] > 0
    # One task is always admitted, so the bound is the budget plus one task's estimate: a
    # row group's column of this dataset is far below task_bytes * 4.
    assert 0 < stats["peak_inflight_bytes"] <= budget + 4 * task_bytes
