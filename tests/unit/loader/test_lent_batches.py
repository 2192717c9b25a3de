"""Batches that point into the decoded rows instead of copying them.

A column whose transforms all run before the cache (decode_image, standardize...) is decoded into
a buffer of finished rows; a batch that is one run of at least a quarter of such an item's rows
(row groups read in order, no row shuffle) is handed out as a view of that buffer. These tests hold
that contract: the same bytes as copied batches, every batch its own memory, and in-place edits
of a batch never reach another batch, a later epoch or the cache (with cache_dir nothing is
lent)."""

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker import ops
from stoker_testdata import digest, jpeg_bytes

GROUP_ROWS = 64
TRANSFORMS = {"image": [ops.decode_image(shape=[24, 32])],
              "emb": [ops.standardize(mean=0.5, std=2.0)]}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("lent")
    rng = np.random.default_rng(7)
    for f in range(2):
        n = 3 * GROUP_ROWS
        emb = rng.normal(size=(n, 16)).astype(np.float32)
        table = pa.table({
            "id": np.arange(f * n, (f + 1) * n, dtype=np.int64),
            "image": [jpeg_bytes(rng, 32, 24) for _ in range(n)],
            "emb": pa.FixedSizeListArray.from_arrays(pa.array(emb.ravel()), 16),
        })
        pq.write_table(table, str(root / f"part-{f}.parquet"), row_group_size=GROUP_ROWS)
    return str(root)


def make(dataset, **options):
    settings = dict(batch_size=GROUP_ROWS, shuffle=False, drop_last=False, transforms=TRANSFORMS)
    settings.update(options)
    return stoker.Loader(dataset, **settings)


def copied(batch):
    return {k: np.array(v, copy=True) for k, v in batch.items()}


@pytest.mark.parametrize("batch_size", [GROUP_ROWS, 48, 100])
def test_lent_batches_have_the_bytes_of_copied_ones(dataset, tmp_path, batch_size):
    # batch_size 64: every batch is a whole row group (lent); 48: runs of 48 or of two groups'
    # rows (some lent, some copied); 100: always two groups (copied). With cache_dir nothing is
    # lent: the reference.
    reference = digest(make(dataset, batch_size=batch_size, cache_dir=str(tmp_path / "c")))
    for threads in (1, 2):
        assert digest(make(dataset, batch_size=batch_size, num_threads=threads)) == reference


def test_every_batch_is_its_own_memory_and_edits_stay_in_it(dataset):
    loader = make(dataset, num_threads=2)
    reference = [copied(b) for b in loader]
    held = list(loader)  # a second epoch, every batch kept alive at once
    for batch in held:
        assert batch["image"].flags.writeable and batch["emb"].flags.writeable
        assert batch["image"].ctypes.data % 64 == 0
    for i, a in enumerate(held):
        for b in held[i + 1:]:
            assert not np.shares_memory(a["image"], b["image"])
            assert not np.shares_memory(a["emb"], b["emb"])
    for batch in held:
        batch["image"][:] = 255
        batch["emb"] *= 0
    # The edits changed only the edited batches: the next epoch decodes the same bytes again.
    again = [copied(b) for b in loader]
    assert len(again) == len(reference)
    for want, got in zip(reference, again):
        for key in want:
            np.testing.assert_array_equal(got[key], want[key])
    assert all((b["image"] == 255).all() and not b["emb"].any() for b in held)


def test_in_place_edits_never_reach_the_cache(dataset, tmp_path):
    cache_dir = str(tmp_path / "cache")
    reference = [copied(b) for b in make(dataset)]
    filling = make(dataset, cache_dir=cache_dir)
    for batch in filling:  # a training step normalising its batch in place
        batch["image"][:] = 0
        batch["emb"] += 100.0
    filling.flush_cache()
    warm = make(dataset, cache_dir=cache_dir)
    got = [copied(b) for b in warm]
    assert warm.stats()["cache"]["misses"] == 0
    for want, have in zip(reference, got):
        for key in want:
            np.testing.assert_array_equal(have[key], want[key])


@pytest.mark.parametrize("parts", [2, 4])
def test_batches_of_one_row_group_are_views_of_its_decoded_rows(dataset, parts):
    # Batches of a half or a quarter of a row group: lent, they are consecutive parts of one
    # buffer.
    batches = list(make(dataset, batch_size=GROUP_ROWS // parts))
    # The epoch's first batch is a segment of its own (the head, decoded only up to there): the
    # pairs are taken from the second row group on.
    rest = batches[parts:]
    assert len(rest) >= 2
    for first, second in zip(rest[0::2], rest[1::2]):
        for key in ("image", "emb"):
            row_bytes = first[key][0].nbytes
            assert second[key].ctypes.data == first[key].ctypes.data + len(first[key]) * row_bytes
