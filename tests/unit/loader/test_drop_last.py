"""drop_last=True under shuffling drops a different, uniformly placed set of rows each epoch.

The epoch's shuffled row sequence starts at a Philox-chosen row and wraps around; the rows just
before that start, fewer than world_size x batch_size, are the ones dropped (cpp/src/plan/README.md).
So every row is dropped with the same probability, rows at the start of a row group included, and
two epochs drop different sets. The dataset here is the issue's: 10,000 ids in 4 row groups of
2,500, world_size=2, batch_size=1024 (1,808 rows dropped per epoch). Seeds are fixed, so the
statistical bounds below are checked once against known values and cannot flake.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker_testdata import digest, write_uneven_dataset

ROWS, GROUP, WORLD, BATCH = 10_000, 2_500, 2, 1024
KEPT = ROWS // WORLD // BATCH * BATCH * WORLD  # 8192
DROPPED = ROWS - KEPT  # 1808


@pytest.fixture(scope="module")
def root(tmp_path_factory):
    path = tmp_path_factory.mktemp("drop_last")
    pq.write_table(pa.table({"id": np.arange(ROWS, dtype=np.int64)}),
                   str(path / "ids.parquet"), row_group_size=GROUP)
    return str(path)


def _epoch_ids(root, seed, epochs, world=WORLD, batch_size=BATCH, **kwargs):
    """Per epoch: the ids each rank delivers (one array per rank)."""
    out = {e: [] for e in epochs}
    for rank in range(world):
        with stoker.Loader(root, columns=["id"], batch_size=batch_size, seed=seed, rank=rank,
                           world_size=world, num_threads=1, **kwargs) as loader:
            for e in epochs:
                loader.set_epoch(e)
                out[e].append(np.concatenate([np.asarray(b["id"]) for b in loader]))
    return out


def _dropped(ranks) -> np.ndarray:
    mask = np.ones(ROWS, dtype=bool)
    mask[np.concatenate(ranks)] = False
    return np.flatnonzero(mask)


def test_dropped_sets_over_seeds_are_uniform_and_differ_between_epochs(root):
    seeds = range(200)
    counts = np.zeros(ROWS, dtype=np.int64)
    overlaps, same = [], 0
    for seed in seeds:
        ids = _epoch_ids(root, seed, (0, 1))
        first, second = _dropped(ids[0]), _dropped(ids[1])
        assert len(first) == len(second) == DROPPED
        counts[first] += 1
        overlaps.append(len(np.intersect1d(first, second)))
        same += int(np.array_equal(first, second))
    # Before: the tail of the last row group, the same set in both epochs for 1 seed in 4.
    assert same == 0, f"{same} of {len(seeds)} seeds drop the same rows in epochs 0 and 1"
    # Each row's count over the seeds is Binomial(200, 1808/10000): mean 36.2, sd 5.4. Every row
    # is dropped, the first rows of each row group as often as any (before: never).
    p = DROPPED / ROWS
    mean, sd = len(seeds) * p, np.sqrt(len(seeds) * p * (1 - p))
    assert counts.min() >= mean - 6 * sd, counts.min()  # >= 3.6
    assert counts.max() <= mean + 6 * sd, counts.max()  # <= 68.8
    assert counts.sum() == len(seeds) * DROPPED
    for start in range(0, ROWS, GROUP):
        head = counts[start:start + 100].mean()
        assert head >= mean / 3, (start, head)
    # Overlap of two epochs' dropped sets: the random expectation is DROPPED**2 / ROWS = 327 rows.
    expected = DROPPED ** 2 / ROWS
    assert 0.6 * expected <= np.mean(overlaps) <= 1.5 * expected, np.mean(overlaps)


@pytest.mark.parametrize("world", [1, 2, 3])
def test_exactly_once_equal_steps_and_threads(tmp_path, world):
    rows = write_uneven_dataset(str(tmp_path))  # 6000 rows in uneven row groups
    batch_size = 97
    per_rank = rows // world // batch_size * batch_size
    reference = None
    for threads in (1, 3):
        got, kept = [], []
        for rank in range(world):
            with stoker.Loader(str(tmp_path), columns=["id"], batch_size=batch_size, seed=9,
                               rank=rank, world_size=world, num_threads=threads) as loader:
                loader.set_epoch(2)
                batches = list(loader)
                assert len(batches) == len(loader) == per_rank // batch_size
                assert all(len(b["id"]) == batch_size for b in batches)
                kept.append(np.concatenate([np.asarray(b["id"]) for b in batches]))
                got.extend(digest(batches))
        everything = np.concatenate(kept)
        assert len(np.unique(everything)) == len(everything) == per_rank * world
        assert rows - len(everything) < world * batch_size
        if reference is None:
            reference = got
        assert got == reference, f"num_threads={threads} changed the batches"


@pytest.mark.parametrize("world,rank", [(1, 0), (2, 1), (3, 2)])
def test_resume_is_exact(root, world, rank):
    options = dict(columns=["id"], batch_size=512, seed=17, rank=rank, world_size=world,
                   shuffle_window=3000)
    with stoker.Loader(root, **options) as loader:
        loader.set_epoch(3)
        full = digest(loader)
        loader.set_epoch(3)
        it = iter(loader)
        head = digest(itertools.islice(it, 3))
        state = loader.state_dict()
        it.close()
    assert head == full[:3]
    with stoker.Loader(root, **options) as resumed:
        resumed.load_state_dict(state)
        assert digest(resumed) == full[3:]


def test_same_inputs_same_dropped_rows(root):
    a = _epoch_ids(root, 5, (4,))[4]
    b = _epoch_ids(root, 5, (4,))[4]
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_without_shuffle_the_tail_is_dropped(root):
    ids = _epoch_ids(root, 0, (0, 1), shuffle=False)
    for epoch in (0, 1):
        np.testing.assert_array_equal(_dropped(ids[epoch]), np.arange(KEPT, ROWS))
        np.testing.assert_array_equal(np.concatenate(ids[epoch]), np.arange(KEPT))
