"""Contract 3: state_dict() + load_state_dict() continue exactly where a loader stopped."""

import itertools

import pytest

import stoker
from stoker_testdata import digest, write_uneven_dataset

OPTIONS = dict(batch_size=64, seed=11, shuffle_window=900, drop_last=False)


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("resume"))
    write_uneven_dataset(root)
    return root


@pytest.mark.parametrize("epoch", [0, 3])
def test_resume_at_every_kind_of_position(dataset, epoch):
    full_loader = stoker.Loader(dataset, num_threads=2, **OPTIONS)
    full_loader.set_epoch(epoch)
    full = digest(full_loader)
    n = len(full)
    window_batches = 900 // 64
    for k in sorted({0, 1, window_batches // 2, window_batches + 3, n - 1, n}):
        loader = stoker.Loader(dataset, num_threads=2, **OPTIONS)
        loader.set_epoch(epoch)
        head = digest(itertools.islice(loader, k)) if k else []
        state = loader.state_dict()
        # Every batch handed out: the state is the next epoch's start.
        expected = (epoch, k) if k < n else (epoch + 1, 0)
        assert (state["epoch"], state["batch"]) == expected
        del loader
        resumed = stoker.Loader(dataset, num_threads=5, **OPTIONS)
        resumed.load_state_dict(state)
        rest = digest(resumed) if k < n else []
        assert head + rest == full, f"resume after {k} batches differs"


def test_state_is_a_few_integers(dataset):
    state = stoker.Loader(dataset, **OPTIONS).state_dict()
    assert set(state) == {"version", "epoch", "batch", "seed", "fingerprint", "data_fingerprint",
                          "rank", "world_size", "elastic_world_size", "elastic_batch", "options"}
    assert all(isinstance(v, int) for k, v in state.items() if k != "options")
    assert all(isinstance(v, int) for v in state["options"].values())


def test_resume_adopts_the_seed_when_none_was_given(dataset):
    options = dict(OPTIONS)
    options.pop("seed")
    first = stoker.Loader(dataset, **options)
    head = digest(itertools.islice(first, 3))
    state = first.state_dict()
    full = digest(stoker.Loader(dataset, seed=first.seed, **options))
    resumed = stoker.Loader(dataset, **options)
    list(itertools.islice(resumed, 2))
    engine = resumed._engine
    resumed.load_state_dict(state)
    assert resumed.seed == first.seed
    # The seed is a per-epoch input: the same engine goes on (no re-listing, no footer re-read),
    # and its counters keep counting.
    assert resumed._engine is engine and resumed.stats()["batches"] >= 2
    assert head + digest(resumed) == full


def test_mismatched_options_are_rejected(dataset):
    state = stoker.Loader(dataset, **OPTIONS).state_dict()
    other = dict(OPTIONS, batch_size=32)
    saved = OPTIONS["batch_size"]
    with pytest.raises(stoker.errors.StateMismatchError,
                       match=rf"these differ: batch_size \(saved {saved}, now 32\)$"):
        stoker.Loader(dataset, **other).load_state_dict(state)
    with pytest.raises(stoker.errors.StateMismatchError, match="these differ: columns$"):
        stoker.Loader(dataset, **dict(OPTIONS, columns=["id"])).load_state_dict(state)
    with pytest.raises(stoker.errors.StateMismatchError, match="seed"):
        stoker.Loader(dataset, **dict(OPTIONS, seed=12)).load_state_dict(state)
    with pytest.raises(stoker.errors.StateMismatchError, match="missing"):
        stoker.Loader(dataset, **OPTIONS).load_state_dict({"epoch": 0})
    old = dict(state)
    old.pop("options")  # a state saved before the summary existed: the full list of options
    with pytest.raises(stoker.errors.StateMismatchError, match="must match"):
        stoker.Loader(dataset, **other).load_state_dict(old)
    bad = dict(state, batch=10**9)
    with pytest.raises(stoker.errors.StateMismatchError, match="outside"):
        stoker.Loader(dataset, **OPTIONS).load_state_dict(bad)
