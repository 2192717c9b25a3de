"""Elastic resume: a checkpoint taken at world size N resumes at world size M. The rows the N
ranks had not delivered yet are delivered once across the M ranks, with equal steps, and the
epochs after it are the normal M-rank epochs."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import stoker
from stoker_testdata import digest, write_uneven_dataset

BATCH = 50


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("elastic"))
    rows = write_uneven_dataset(root)  # 6000 rows in uneven row groups
    return root, rows


def _loader(root, rank, world, drop_last, **kw):
    return stoker.Loader(root, columns=["id"], batch_size=BATCH, seed=21, shuffle_window=700,
                         rank=rank, world_size=world, drop_last=drop_last, padding_mask=True,
                         **kw)


def _real_ids(batches):
    out = []
    for batch in batches:
        ids = np.asarray(batch["id"])
        out.extend(ids[~np.asarray(batch["__padding__"])].tolist())
    return out


@pytest.mark.parametrize("old_world,new_world", [(2, 1), (1, 2), (2, 3)])
@pytest.mark.parametrize("drop_last", [True, False])
def test_rest_of_the_epoch_on_another_world_size(dataset, old_world, new_world, drop_last):
    root, rows = dataset
    epoch, steps = 1, 7  # 7 x 50 rows: inside the second 700-row shuffle window
    delivered, states, full = [], [], []
    for r in range(old_world):
        loader = _loader(root, r, old_world, drop_last)
        loader.set_epoch(epoch)
        full.extend(_real_ids(loader))  # what the whole old epoch delivers
        loader.set_epoch(epoch)
        delivered.extend(_real_ids(itertools.islice(loader, steps)))
        states.append(loader.state_dict())
    assert all(s["batch"] == steps for s in states)

    rest, counts, loaders = [], [], []
    for j in range(new_world):
        loader = _loader(root, j, new_world, drop_last)
        loader.load_state_dict(states[j % old_world])  # every old rank's state says the same
        batches = list(loader)
        counts.append(len(batches))
        rest.extend(_real_ids(batches))
        loaders.append(loader)
    assert len(set(counts)) == 1, f"unequal steps after the resume: {counts}"
    assert len(rest) == len(set(rest)), "a row was delivered twice after the resume"
    assert not set(rest) & set(delivered), "a row delivered before the checkpoint came again"
    missing = set(full) - set(delivered) - set(rest)
    if drop_last:
        assert len(missing) < new_world * BATCH  # only the tail that fills no batch on every rank
    else:
        assert not missing
        assert sorted(set(delivered) | set(rest)) == list(range(rows))
    # The next epoch is the ordinary new-world epoch.
    for j, loader in enumerate(loaders):
        assert loader.epoch == epoch + 1
        fresh = _loader(root, j, new_world, drop_last)
        fresh.set_epoch(epoch + 1)
        assert digest(loader) == digest(fresh)


def test_an_elastic_rest_resumes_at_its_own_world_size(dataset):
    root, _ = dataset
    old = _loader(root, 0, 2, True)
    list(itertools.islice(old, 5))
    state = old.state_dict()
    new = _loader(root, 0, 3, True)
    new.load_state_dict(state)
    it = iter(new)
    head = digest(itertools.islice(it, 2))
    mid = new.state_dict()
    tail = digest(it)
    assert mid["elastic_world_size"] == 2 and mid["elastic_batch"] == 5 and mid["batch"] == 2
    again = _loader(root, 0, 3, True)
    again.load_state_dict(mid)
    assert digest(again) == tail
    with pytest.raises(stoker.errors.StateMismatchError, match="resumes only at world_size=3"):
        _loader(root, 0, 1, True).load_state_dict(mid)
    assert head  # the rest had batches


def test_other_options_are_not_elastic(dataset):
    root, _ = dataset
    state = _loader(root, 0, 2, True).state_dict()
    with pytest.raises(stoker.errors.StateMismatchError, match="other options"):
        stoker.Loader(root, columns=["id"], batch_size=BATCH + 1, seed=21, rank=0,
                      world_size=1).load_state_dict(state)
