"""The node-local ready-tensor cache: never changes the output, shared by processes, self-healing."""

import glob
import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import stoker
from stoker_testdata import TESTS, digest, fill_cache, write_uneven_dataset

OPTIONS = dict(batch_size=100, seed=4, shuffle_window=700, drop_last=False,
               lists="ragged")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cached"))
    write_uneven_dataset(root)
    return root


def entries(cache_dir):
    return sorted(p for p in glob.glob(os.path.join(cache_dir, "tensors", "**", "*"),
                                       recursive=True) if os.path.isfile(p))


def run(dataset, cache_dir=None, **kwargs):
    options = dict(OPTIONS, **kwargs)
    loader = stoker.Loader(dataset, cache_dir=cache_dir, **options)
    out = digest(loader)
    if cache_dir:
        # close() drops entries still queued behind the epoch (a loaded machine's write-behind):
        # the next loader would miss them.
        loader.flush_cache()
    return out, loader.stats()["cache"]


def fill(dataset, cache_dir):
    fill_cache(dataset, cache_dir, **OPTIONS)


def uncached_digests(dataset, epochs):
    """The batches' digests of each epoch without a cache: what every cached epoch must equal."""
    reference = stoker.Loader(dataset, **OPTIONS)
    out = []
    for epoch in range(epochs):
        reference.set_epoch(epoch)
        out.append(digest(reference))
    return out


def test_cold_warm_and_partial_cache_give_identical_batches(dataset, tmp_path):
    reference, _ = run(dataset)
    cache_dir = str(tmp_path / "cache")
    cold, cold_stats = run(dataset, cache_dir, num_threads=3)
    assert cold == reference
    assert cold_stats["misses"] > 0 and cold_stats["hits"] == 0
    assert cold_stats["writes"] == cold_stats["misses"]
    warm, warm_stats = run(dataset, cache_dir, num_threads=1)
    assert warm == reference
    assert warm_stats["misses"] == 0 and warm_stats["hits"] == cold_stats["misses"]
    # Partly filled: drop every other entry.
    files = entries(cache_dir)
    assert files
    for path in files[::2]:
        os.remove(path)
    partial, partial_stats = run(dataset, cache_dir, num_threads=2)
    assert partial == reference
    assert partial_stats["hits"] > 0 and partial_stats["misses"] > 0


def test_other_epochs_and_ranks_hit_the_same_entries(dataset, tmp_path):
    cache_dir = str(tmp_path / "cache")
    run(dataset, cache_dir)
    loader = stoker.Loader(dataset, cache_dir=cache_dir, rank=1, world_size=2, **OPTIONS)
    loader.set_epoch(5)
    reference = stoker.Loader(dataset, rank=1, world_size=2, **OPTIONS)
    reference.set_epoch(5)
    assert digest(loader) == digest(reference)
    assert loader.stats()["cache"]["misses"] == 0


def test_row_groups_cut_anywhere_hit_the_entries_of_whole_ones(dataset, tmp_path):
    """A row group split into several decode tasks (task_bytes) is grouped the same way
    wherever a rank or drop_last cut falls in it: the entries are keyed by the groups, and
    groups that moved with the cut (they were sized by the segment's rows) missed the cache in
    every shuffled epoch."""
    cache_dir = str(tmp_path / "cache")
    options = dict(OPTIONS, task_bytes="6KiB")
    _, filled = run(dataset, cache_dir, **options)
    assert filled["writes"] > 8  # several entries per row group
    for epoch, world in [(5, 2), (6, 3)]:
        opts = dict(options, drop_last=True)
        loader = stoker.Loader(dataset, cache_dir=cache_dir, rank=1, world_size=world, **opts)
        loader.set_epoch(epoch)
        reference = stoker.Loader(dataset, rank=1, world_size=world, **opts)
        reference.set_epoch(epoch)
        assert digest(loader) == digest(reference)
        stats = loader.stats()["cache"]
        assert stats["misses"] == 0 and stats["hits"] > 0, stats


def test_corrupt_entry_is_dropped_refetched_and_counted(dataset, tmp_path):
    reference, _ = run(dataset)
    cache_dir = str(tmp_path / "cache")
    run(dataset, cache_dir)
    files = entries(cache_dir)
    with open(files[0], "r+b") as f:
        f.seek(-100, os.SEEK_END)
        f.write(b"\xff" * 50)
    with open(files[1], "r+b") as f:
        f.truncate(os.path.getsize(files[1]) // 2)
    again, stats = run(dataset, cache_dir)
    assert again == reference
    assert stats["corrupt"] == 2
    assert stats["misses"] == 2


def test_warm_epochs_hash_each_entry_once_and_a_rewrite_again(dataset, tmp_path):
    """A loader hashes an entry's payload on its first read only (later epochs map the same file
    and check the header); an entry damaged in place between epochs is still caught."""
    cache_dir = str(tmp_path / "cache")
    fill(dataset, cache_dir)  # every entry on disk: this loader only hits
    loader = stoker.Loader(dataset, cache_dir=cache_dir, **OPTIONS)
    reference = stoker.Loader(dataset, **OPTIONS)
    first = digest(loader)
    assert first == digest(reference)
    stats = loader.stats()["cache"]
    hits = stats["hits"]
    assert hits > 0 and stats["payload_checks"] == len(entries(cache_dir))
    loader.set_epoch(1)
    reference.set_epoch(1)
    assert digest(loader) == digest(reference)
    stats = loader.stats()["cache"]
    assert stats["hits"] >= 2 * hits - 1 and stats["payload_checks"] == len(entries(cache_dir))
    path = entries(cache_dir)[0]
    with open(path, "r+b") as f:  # same file, same size: one payload byte flipped
        f.seek(-100, os.SEEK_END)
        byte = f.read(1)
        f.seek(-100, os.SEEK_END)
        f.write(bytes([byte[0] ^ 1]))
    checks, writes = stats["payload_checks"], stats["writes"]
    loader.set_epoch(2)
    reference.set_epoch(2)
    assert digest(loader) == digest(reference)
    stats = loader.stats()["cache"]
    assert stats["corrupt"] == 1 and stats["misses"] == 1
    # The damaged file was hashed again (and found corrupt) by each reader that opened it before
    # the first one removed it: the head's row group is read by two segments, which may run at
    # once (the second then waits for the first's rewrite and counts no miss; seen in CI: 18 = 15
    # + 2 + 1). The entry written in its place is hashed if this epoch reads it again. Nothing
    # else.
    rewritten = stats["writes"] - writes
    assert checks + 1 <= stats["payload_checks"] <= checks + 2 + rewritten


def test_warm_epochs_map_each_entry_once(dataset, tmp_path):
    """A loader keeps the mappings of the entries it reads and writes for its later epochs
    (within cache_bytes / 4, whatever prefetch_bytes: the pages are the page cache's): after an
    entry's first read, or the loader's own write of it, no epoch maps it again, with the same
    bytes as no cache; a loader whose bound holds no entry maps every entry it reads, every
    epoch."""
    cache_dir = str(tmp_path / "cache")
    fill(dataset, cache_dir)
    files = entries(cache_dir)
    expected = uncached_digests(dataset, 3)

    # A prefetch budget below the entries' bytes (it bounded the mappings kept before: a warm
    # epoch of a larger dataset mapped nearly every entry again) and above one row group's.
    total, largest = sum(os.path.getsize(p) for p in files), max(os.path.getsize(p) for p in files)
    assert total > 4 * largest
    prefetch = 2 * largest
    loader = stoker.Loader(dataset, cache_dir=cache_dir, **dict(OPTIONS, prefetch_bytes=prefetch))
    for epoch in range(3):
        loader.set_epoch(epoch)
        assert digest(loader) == expected[epoch]
        stats = loader.stats()["cache"]
        assert stats["misses"] == 0 and stats["hits"] > len(files) * epoch
        assert stats["maps"] == len(files)  # in the first epoch; none since

    # The filling loader's next epoch reads the entries through the mappings of its own writes.
    filling = stoker.Loader(dataset, cache_dir=str(tmp_path / "fresh"), **OPTIONS)
    for epoch in range(2):
        filling.set_epoch(epoch)
        assert digest(filling) == expected[epoch]
        filling.flush_cache()
        stats = filling.stats()["cache"]
        assert stats["writes"] > 0 and stats["maps"] == stats["writes"]
    assert stats["hits"] > 0

    # Kept bytes below the smallest entry: nothing is kept, every read maps.
    smallest = min(os.path.getsize(p) for p in files)
    tight = stoker.Loader(dataset, cache_dir=cache_dir,
                          **dict(OPTIONS, cache_bytes=4 * (smallest - 1)))
    for epoch in range(2):
        tight.set_epoch(epoch)
        assert digest(tight) == expected[epoch]
        stats = tight.stats()["cache"]
        assert stats["hits"] > 0 and stats["maps"] == stats["hits"]


def test_another_processs_reads_do_not_make_a_loader_map_again(dataset, tmp_path):
    """Ranks of a node share cache_dir: one process's reads mark entries used (eviction's order)
    but leave the file version the others verified and mapped, so none of them maps or hashes
    an entry again because another read it."""
    cache_dir = str(tmp_path / "cache")
    fill(dataset, cache_dir)
    files = entries(cache_dir)
    expected = uncached_digests(dataset, 4)

    loader = stoker.Loader(dataset, cache_dir=cache_dir, **OPTIONS)
    for epoch in range(2):
        loader.set_epoch(epoch)
        assert digest(loader) == expected[epoch]
    assert loader.stats()["cache"]["maps"] == len(files)
    used = {p: os.stat(p).st_atime_ns for p in files}

    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {TESTS!r})
        import stoker
        from stoker_testdata import digest
        loader = stoker.Loader({dataset!r}, cache_dir={cache_dir!r}, **{OPTIONS!r})
        out = []
        for epoch in range(2):
            loader.set_epoch(epoch)
            out.append(digest(loader))
        print(json.dumps({{"digests": out, "cache": loader.stats()["cache"]}}))
    """)
    other = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                           timeout=120)
    assert other.returncode == 0, other.stderr
    result = json.loads(other.stdout)
    assert result["digests"] == expected[:2]
    assert result["cache"]["misses"] == 0 and result["cache"]["maps"] == len(files)
    assert all(os.stat(p).st_atime_ns > used[p] for p in files)  # its reads count as uses

    for epoch in range(2, 4):
        loader.set_epoch(epoch)
        assert digest(loader) == expected[epoch]
    stats = loader.stats()["cache"]
    assert stats["misses"] == 0
    assert stats["maps"] == stats["payload_checks"] == len(files)  # none since the first epoch


def test_cache_budget_is_respected(dataset, tmp_path):
    cache_dir = str(tmp_path / "cache")
    reference, _ = run(dataset)
    small, stats = run(dataset, cache_dir, cache_bytes=50_000)
    assert small == reference
    used = sum(os.path.getsize(p) for p in entries(cache_dir))
    assert used <= 50_000
    assert stats["evictions"] > 0 or stats["not_stored"] > 0


def test_processes_share_one_cache_and_decode_each_entry_once(dataset, tmp_path):
    cache_dir = str(tmp_path / "cache")
    reference, _ = run(dataset)
    script = textwrap.dedent(f"""
        import json, sys
        sys.path.insert(0, {TESTS!r})
        import stoker
        from stoker_testdata import digest
        loader = stoker.Loader({dataset!r}, cache_dir={cache_dir!r}, num_threads=2, **{OPTIONS!r})
        d = digest(loader)
        print(json.dumps({{"digest": d, "cache": loader.stats()["cache"]}}))
    """)
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        results.append(json.loads(out))
    for result in results:
        assert result["digest"] == reference
    writes = sum(r["cache"]["writes"] for r in results)
    assert writes == len(entries(cache_dir))  # every entry decoded and written exactly once


def test_cache_helpers(dataset, tmp_path):
    cache_dir = str(tmp_path / "cache")
    run(dataset, cache_dir)
    usage = stoker.cache_usage(cache_dir)
    assert usage["entries"] == len(entries(cache_dir)) > 0
    assert usage["bytes"] == sum(os.path.getsize(p) for p in entries(cache_dir))
    stoker.clear_cache(cache_dir)
    assert entries(cache_dir) == []
    assert stoker.cache_usage(cache_dir)["entries"] == 0


def test_bad_cache_dir(dataset, tmp_path):
    path = tmp_path / "afile"
    path.write_text("x")
    with pytest.raises(stoker.errors.InvalidOptionError, match="afile"):
        stoker.Loader(dataset, cache_dir=str(path), **OPTIONS)


def test_sigkill_mid_write_leaves_no_corrupt_entry(tmp_path):
    import signal
    import time

    from stoker_testdata import write_wide_dataset

    root = str(tmp_path / "wide")
    write_wide_dataset(root, files=2, rows_per_file=60_000, columns=24, row_group_size=6_000)
    cache_dir = str(tmp_path / "cache")
    options = dict(batch_size=512, seed=2, shuffle_window=6_000)
    reference = digest(stoker.Loader(root, **options))
    script = textwrap.dedent(f"""
        import stoker
        loader = stoker.Loader({root!r}, cache_dir={cache_dir!r}, num_threads=2, **{options!r})
        print("START", flush=True)
        for batch in loader:
            pass
    """)
    for delay in (0.3, 0.6, 0.9):  # kill at different points of the cold epoch
        proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "START"
            time.sleep(delay)
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
        finally:
            proc.kill()
        loader = stoker.Loader(root, cache_dir=cache_dir, **options)
        assert digest(loader) == reference
        assert loader.stats()["cache"]["corrupt"] == 0
    # Whatever the kills left behind (temporary files) is gone after the next open.
    stoker.cache_usage(cache_dir)
    leftovers = glob.glob(os.path.join(cache_dir, ".tmp", "*"))
    assert leftovers == []


@pytest.mark.parametrize("cache_state", ["cold", "warm", "partial"])
def test_resume_and_sharding_contracts_hold_with_any_cache_state(dataset, tmp_path, cache_state):
    import itertools

    cache_dir = str(tmp_path / "cache")
    if cache_state != "cold":
        run(dataset, cache_dir)
        if cache_state == "partial":
            for path in entries(cache_dir)[1::2]:
                os.remove(path)
    # Resume: the head from one loader plus the tail from a resumed one equals the full epoch.
    full = digest(stoker.Loader(dataset, **OPTIONS))
    head_loader = stoker.Loader(dataset, cache_dir=cache_dir, num_threads=3, **OPTIONS)
    head = digest(itertools.islice(head_loader, 7))
    state = head_loader.state_dict()
    tail_loader = stoker.Loader(dataset, cache_dir=cache_dir, num_threads=1, **OPTIONS)
    tail_loader.load_state_dict(state)
    assert head + digest(tail_loader) == full
    # Sharding: every row once across two ranks, equal batch counts, same bytes as uncached.
    seen = []
    for rank in range(2):
        cached = stoker.Loader(dataset, cache_dir=cache_dir, rank=rank, world_size=2,
                               padding_mask=True, **OPTIONS)
        uncached = stoker.Loader(dataset, rank=rank, world_size=2, padding_mask=True, **OPTIONS)
        batches = list(cached)
        assert digest(batches) == digest(uncached)
        assert len(batches) == len(cached)
        seen += [np.asarray(b["id"])[~np.asarray(b["__padding__"])] for b in batches]
    seen = np.concatenate(seen)
    np.testing.assert_array_equal(np.sort(seen), np.arange(len(seen)))
