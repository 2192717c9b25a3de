"""The ready-tensor cache fills behind the pipeline: batches never wait for the disk, a full queue
skips entries (counted), and closing mid-fill never hangs.

A slow disk is injected through the write path's test seam (CachedDecoder::SetWriteDelayForTesting,
bound as the test-only ``stoker._stoker._testing_set_cache_write_delay_ms``): loaders opened after
it is set pause that long before each write-behind write, so the disk looks slower than decoding."""

import os
import subprocess
import sys
import textwrap

import pytest

import stoker
from stoker import _stoker
from stoker_testdata import TESTS, digest, write_uneven_dataset, write_wide_dataset

HERE = TESTS  # child scripts import stoker_testdata
OPTIONS = dict(batch_size=100, seed=4, shuffle_window=700, drop_last=False, lists="ragged")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("writebehind"))
    write_uneven_dataset(root)
    return root


@pytest.fixture(scope="module")
def reference(dataset):
    return digest(stoker.Loader(dataset, **OPTIONS))


@pytest.fixture
def slow_disk():
    """Sets the write delay (ms) of loaders opened afterwards; off again after the test."""
    yield _stoker._testing_set_cache_write_delay_ms
    _stoker._testing_set_cache_write_delay_ms(0)


def test_a_slow_disk_skips_entries_counts_them_and_changes_no_batch(dataset, reference,
                                                                     tmp_path, slow_disk):
    cache_dir = str(tmp_path / "cache")
    slow_disk(300)
    # A small prefetch budget makes the write queue small (half of it): it fills at once.
    loader = stoker.Loader(dataset, cache_dir=cache_dir, prefetch_bytes="64KiB", num_threads=2,
                           **OPTIONS)
    assert digest(loader) == reference
    stats = loader.stats()["cache"]
    assert stats["write_skipped"] > 0
    assert stats["writes"] > 0  # the queue still took what fit
    assert stats["writes"] + stats["write_skipped"] == stats["misses"]
    loader.close()
    slow_disk(0)
    # A later epoch decodes the skipped entries again and stores them.
    again = stoker.Loader(dataset, cache_dir=cache_dir, **OPTIONS)
    assert digest(again) == reference
    second = again.stats()["cache"]
    assert second["misses"] == stats["write_skipped"]
    assert second["hits"] == stats["writes"]
    assert second["write_skipped"] == 0
    third = stoker.Loader(dataset, cache_dir=cache_dir, **OPTIONS)
    assert digest(third) == reference
    assert third.stats()["cache"]["misses"] == 0


def test_the_next_epoch_of_the_same_loader_reads_the_first_ones_entries(dataset, reference,
                                                                         tmp_path):
    loader = stoker.Loader(dataset, cache_dir=str(tmp_path / "cache"), num_threads=2, **OPTIONS)
    assert digest(loader) == reference
    filled = loader.stats()["cache"]
    assert filled["writes"] == filled["misses"] > 0 and filled["write_skipped"] == 0
    loader.set_epoch(0)  # the same order again
    assert digest(loader) == reference
    after = loader.stats()["cache"]
    assert after["misses"] == filled["misses"]
    assert after["hits"] == filled["misses"]


def test_break_mid_fill_then_a_new_epoch_gives_the_same_batches(dataset, reference, tmp_path,
                                                               slow_disk):
    slow_disk(50)
    loader = stoker.Loader(dataset, cache_dir=str(tmp_path / "cache"), num_threads=2, **OPTIONS)
    for i, _ in enumerate(loader):
        if i == 3:
            break
    loader.set_epoch(0)
    assert digest(loader) == reference
    loader.close()


def run_script(body, timeout=60, write_delay_ms=0):
    script = f"import os, sys, time\nsys.path.insert(0, {HERE!r})\nimport stoker\n"
    script += f"stoker._stoker._testing_set_cache_write_delay_ms({write_delay_ms})\n"
    script += textwrap.dedent(body)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=timeout)


@pytest.fixture(scope="module")
def wide(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("writebehind-wide"))
    write_wide_dataset(root, files=2, rows_per_file=20000, columns=16, row_group_size=2000)
    return root


@pytest.mark.parametrize("how", ["close", "del", "exit", "close_from_thread"])
def test_closing_while_entries_wait_to_be_written_does_not_hang(wide, tmp_path, how):
    # Each write waits 5 s: a close that waited for the queue would take minutes.
    cache_dir = str(tmp_path / "cache")
    body = textwrap.dedent(f"""
        loader = stoker.Loader({wide!r}, cache_dir={cache_dir!r}, batch_size=256, num_threads=2,
                               seed=1)
        it = iter(loader)
        for _ in range(20):
            next(it)
    """)
    body += {
        "close": "loader.close()\n",
        "del": "del it, loader\n",
        "exit": "print('OK', flush=True)\nsys.exit(0)\n",
        "close_from_thread": textwrap.dedent("""
            import threading
            t = threading.Thread(target=loader.close)
            t.start()
            t.join()
            """),
    }[how]
    body += "print('OK', flush=True)\n"
    result = run_script(body, timeout=60, write_delay_ms=5000)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "OK" in result.stdout, result.stdout + result.stderr
    # Whatever was written is whole: a new loader reads the folder and gets the same batches.
    reference = digest(stoker.Loader(wide, batch_size=256, seed=1))
    loader = stoker.Loader(wide, cache_dir=cache_dir, batch_size=256, seed=1)
    assert digest(loader) == reference
    assert loader.stats()["cache"]["corrupt"] == 0



def test_the_epoch_ends_without_waiting_for_the_queue_and_flush_cache_waits(dataset, reference,
                                                                          tmp_path, slow_disk):
    cache_dir = str(tmp_path / "cache")
    # Each write takes 2 s: were the epoch's end to wait for the queue, nothing would be left in
    # it when the loop ends.
    slow_disk(2000)
    loader = stoker.Loader(dataset, cache_dir=cache_dir, num_threads=2, **OPTIONS)
    batches = list(loader)  # a plain loop: no flush_cache(), unlike digest(loader)
    assert digest(batches) == reference
    ended = loader.stats()["cache"]
    assert ended["misses"] >= 3 and ended["write_skipped"] == 0
    assert ended["writes"] < ended["misses"]  # entries still queued after the epoch's end
    loader.close()  # drops the queue, finishes only the entry being written
    slow_disk(0)
    # flush_cache() waits for every queued entry: after it they are all on disk.
    filler = stoker.Loader(dataset, cache_dir=cache_dir, num_threads=2, **OPTIONS)
    assert digest(list(filler)) == reference
    filler.flush_cache()
    filled = filler.stats()["cache"]
    assert filled["misses"] > 0 and filled["write_skipped"] == 0
    assert filled["writes"] == filled["misses"]
    warm = stoker.Loader(dataset, cache_dir=cache_dir, **OPTIONS)
    assert digest(warm) == reference
    assert warm.stats()["cache"]["misses"] == 0
