"""load_state_dict checks every key of a state before using any of it (issue 23, item 10).

Every malformed state is a ``StateMismatchError`` naming the key; nothing is coerced (``True``
is not 1, ``1.5`` and ``"3"`` are not integers), a failed load changes nothing, and a good state
round-trips exactly, the largest valid values included.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker.errors import InvalidOptionError, LoaderStateError, StateMismatchError

ROWS = 800
OPTIONS = dict(batch_size=16, shuffle_window=64, drop_last=False, num_threads=2)
BATCHES = ROWS // 16  # per epoch at world_size=1
I64 = 2**63 - 1
U64 = 2**64 - 1


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("state")
    pq.write_table(pa.table({"id": np.arange(ROWS, dtype=np.int64)}), str(root / "a.parquet"),
                   row_group_size=200)
    return str(root)


@pytest.fixture(scope="module")
def good(dataset):
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        it = iter(loader)
        for _ in range(3):
            next(it)
        return loader.state_dict()


NOT_INTEGERS = [None, 1.5, 1.0, math.nan, math.inf, "3", b"3", True, False, [1], (1,),
                np.float64(2.0), np.bool_(True), 1 + 0j]

# key -> values that are not a valid state value for it (besides NOT_INTEGERS).
OUT_OF_RANGE = {
    "version": [0, 2, -1, 2**64],
    "epoch": [-1, -5, 2**63, 2**64 + 5, -(2**63) - 1],
    "batch": [-1, 2**63, BATCHES + 1],
    "seed": [-1, -5, 2**64, 2**64 + 7],
    "fingerprint": [-1, 2**64],
    "data_fingerprint": [-1, 2**64],
    "rank": [-1, 1, 2**31],  # 1: outside world_size=1
    "world_size": [0, -1, 2**31],
    "elastic_world_size": [-1, 2**31],
    "elastic_batch": [-1, 2**63, 5],  # 5 with elastic_world_size=0: no elastic resume
}
BAD = [(key, value) for key, values in OUT_OF_RANGE.items()
       for value in NOT_INTEGERS + values]


def _unchanged(loader, before):
    assert loader.state_dict() == before


@pytest.mark.parametrize("key,value", BAD, ids=[f"{k}={v!r}" for k, v in BAD])
def test_a_bad_value_is_a_state_mismatch_naming_the_key(dataset, good, key, value):
    # seed=None: the loader would adopt the state's seed (the bare TypeError for -5).
    with stoker.Loader(dataset, seed=None, **OPTIONS) as loader:
        before = loader.state_dict()
        with pytest.raises(StateMismatchError, match=rf"\b{key}\b") as error:
            loader.load_state_dict({**good, key: value})
        assert type(error.value) is StateMismatchError
        _unchanged(loader, before)


@pytest.mark.parametrize("key", ["version", "epoch", "batch", "seed", "fingerprint"])
def test_a_missing_key_is_named(dataset, good, key):
    state = dict(good)
    del state[key]
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        with pytest.raises(StateMismatchError, match=rf"missing \['{key}'\]"):
            loader.load_state_dict(state)


@pytest.mark.parametrize("state,match", [
    ({"rank": 0}, "'rank' but not 'world_size'"),
    ({"world_size": 1}, "'world_size' but not 'rank'"),
    ({"epochs": 1}, r"unknown keys \['epochs'\]"),
    ({"options": [1, 2]}, r"state_dict\['options'\]"),
    ({"options": {"batch_size": 16.0}}, r"state_dict\['options'\]\['batch_size'\]"),
    ({"options": {"batch_size": True}}, r"state_dict\['options'\]\['batch_size'\]"),
    ({"options": {3: 16}}, r"state_dict\['options'\]\[3\]"),
])
def test_inconsistent_or_unknown_parts_are_named(dataset, good, state, match):
    base = {k: v for k, v in good.items() if k not in ("rank", "world_size")} \
        if set(state) & {"rank", "world_size"} else good
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        with pytest.raises(StateMismatchError, match=match):
            loader.load_state_dict({**base, **state})


@pytest.mark.parametrize("state", [None, 5, [("epoch", 0)], "state"])
def test_a_state_that_is_not_a_dict_is_refused(dataset, state):
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        with pytest.raises(StateMismatchError, match="a state is the dict"):
            loader.load_state_dict(state)


def test_a_good_state_round_trips_exactly(dataset, good):
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        loader.load_state_dict(good)
        assert loader.state_dict() == good
        # numpy integer scalars are integers (their exact value); the state reads plain ints.
        loader.load_state_dict({k: (v if k == "options" else np.uint64(v) if k in (
            "seed", "fingerprint", "data_fingerprint") else np.int64(v)) for k, v in good.items()})
        again = loader.state_dict()
        assert again == good and all(type(v) is int for k, v in again.items() if k != "options")


def test_the_largest_values_round_trip(dataset, good):
    """epoch 2**63 - 1, seed 2**64 - 1 and batch = len(loader) are valid and come back as they
    went in; the epoch after the last one is refused rather than reported as 2**63."""
    with stoker.Loader(dataset, seed=U64, **OPTIONS) as loader:
        fingerprint = loader.state_dict()["fingerprint"]
        for batch in (0, 7, BATCHES):
            state = {**good, "epoch": I64, "batch": batch, "seed": U64,
                     "fingerprint": fingerprint}
            loader.load_state_dict(state)
            assert loader.state_dict() == state
        loader.load_state_dict({**state, "batch": BATCHES - 2})
        assert len(list(loader)) == 2
        end = loader.state_dict()
        assert (end["epoch"], end["batch"], end["seed"]) == (I64, BATCHES, U64)
        with pytest.raises(LoaderStateError, match="last one"):
            iter(loader)
        with stoker.Loader(dataset, seed=U64, **OPTIONS) as other:
            other.load_state_dict(end)
            assert other.state_dict() == end and list(other) == []


def test_set_epoch_takes_the_same_range(dataset):
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        loader.set_epoch(I64)
        assert loader.state_dict()["epoch"] == I64
        for bad in (2**63, -1, 1.0, True, "1"):
            with pytest.raises(InvalidOptionError, match="epoch"):
                loader.set_epoch(bad)


def test_elastic_batches_beyond_the_old_ranks_are_named(dataset):
    """A state saved at world_size=2 resumes elastically at 1; a batch beyond what an old rank
    had delivered an empty epoch (or, near 2**63, a wrapped one) before."""
    with stoker.Loader(dataset, seed=9, rank=0, world_size=2, **OPTIONS) as old:
        saved = old.state_dict()
        per_rank = len(old)
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        for batch in (per_rank + 1, 10**6, I64):
            with pytest.raises(StateMismatchError,
                               match=rf"batch={batch} is outside the {per_rank} batches per "
                                     r"rank at world_size=2"):
                loader.load_state_dict({**saved, "batch": batch})
        loader.load_state_dict({**saved, "batch": per_rank - 1})
        rest = loader.state_dict()
        assert rest["elastic_world_size"] == 2 and rest["elastic_batch"] == per_rank - 1
    with stoker.Loader(dataset, seed=9, **OPTIONS) as loader:
        with pytest.raises(StateMismatchError, match=r"elastic_batch=\d+ is outside"):
            loader.load_state_dict({**rest, "elastic_batch": per_rank + 1})
        # The engine refuses it too (the check below the Python one).
        with pytest.raises(StateMismatchError,
                           match=rf"old_batches={per_rank + 1} is outside the {per_rank} "):
            loader._engine.start_elastic_epoch(0, 2, per_rank + 1, 0)
