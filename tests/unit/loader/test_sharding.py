"""Contract 2: every row exactly once per epoch across ranks, equal batch counts per rank."""

import numpy as np
import pytest

import stoker
from stoker_testdata import write_uneven_dataset


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("shards"))
    rows = write_uneven_dataset(root, file_rows=(1000, 2501, 703, 1799))
    return root, rows


def rank_batches(root, rank, world, **kwargs):
    loader = stoker.Loader(root, rank=rank, world_size=world, padding_mask=True, **kwargs)
    batches = [(np.array(b["id"]), np.array(b["__padding__"])) for b in loader]
    assert len(batches) == len(loader)
    return loader, batches


@pytest.mark.parametrize("world", [1, 2, 3, 4])
@pytest.mark.parametrize("shuffle", [True, False])
def test_drop_last_false_every_row_once_plus_padding(dataset, world, shuffle):
    root, rows = dataset
    counts = set()
    real, padded = [], []
    for rank in range(world):
        loader, batches = rank_batches(root, rank, world, batch_size=97, seed=5,
                                       shuffle=shuffle, drop_last=False)
        counts.add(len(batches))
        for ids, pad in batches:
            real.append(ids[~pad])
            padded.append(ids[pad])
    assert len(counts) == 1, f"ranks have different batch counts: {counts}"
    real = np.concatenate(real)
    np.testing.assert_array_equal(np.sort(real), np.arange(rows))
    padded = np.concatenate(padded)
    assert len(padded) == -rows % world  # wrap-around padding only evens out ranks
    assert np.all(np.isin(padded, real))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_drop_last_true_no_duplicates_full_batches(dataset, world):
    root, rows = dataset
    batch_size = 97
    seen, counts = [], set()
    for rank in range(world):
        loader, batches = rank_batches(root, rank, world, batch_size=batch_size, seed=5,
                                       drop_last=True)
        counts.add(len(batches))
        for ids, pad in batches:
            assert len(ids) == batch_size
            assert not pad.any()
            seen.append(ids)
    assert len(counts) == 1
    seen = np.concatenate(seen)
    assert len(np.unique(seen)) == len(seen)
    per_rank = rows // world // batch_size * batch_size
    assert len(seen) == per_rank * world
    assert rows - len(seen) < world * batch_size + world


def test_seed_changes_which_rows_a_rank_gets(dataset):
    root, _ = dataset
    a = np.concatenate([ids for ids, _ in rank_batches(root, 0, 2, batch_size=50, seed=1)[1]])
    b = np.concatenate([ids for ids, _ in rank_batches(root, 0, 2, batch_size=50, seed=2)[1]])
    assert set(a.tolist()) != set(b.tolist())


def test_rank_from_environment(dataset, monkeypatch):
    root, _ = dataset
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "3")
    loader = stoker.Loader(root, batch_size=50, seed=1)
    explicit = stoker.Loader(root, batch_size=50, seed=1, rank=1, world_size=3)
    assert loader.state_dict()["fingerprint"] == explicit.state_dict()["fingerprint"]
    assert len(loader) == len(explicit)


def test_bad_rank_is_an_error(dataset):
    root, _ = dataset
    with pytest.raises(stoker.errors.InvalidOptionError, match="rank"):
        stoker.Loader(root, rank=3, world_size=3)
    with pytest.raises(stoker.errors.InvalidOptionError, match="rank and world_size"):
        stoker.Loader(root, rank=0)


def test_too_few_rows_for_one_batch_per_rank(dataset):
    root, rows = dataset
    with pytest.raises(stoker.errors.InvalidOptionError, match="batch_size"):
        stoker.Loader(root, batch_size=rows, world_size=2, rank=0, seed=1)
