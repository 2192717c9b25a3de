"""Golden digests: the batches of a fixed dataset and options, pinned as sha256 digests.

Refactors must not change what a loader yields. The dataset is written here with fixed seeds by
the pinned pyarrow; the digests below were recorded before the engine was restructured into column
writers and engine-reported stages (issue 8) and must stay unchanged. A deliberate change of output
(a new option default, a format fix) updates them in the same commit, with the reason.
"""

from __future__ import annotations

import hashlib
import os

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import stoker
from stoker_testdata import digest

N_FILES = 3
ROWS = (700, 1100, 450)


def _table(start: int, rows: int, rng: np.random.Generator) -> pa.Table:
    ids = np.arange(start, start + rows, dtype=np.int64)
    lengths = rng.integers(0, 5, rows)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    values = rng.integers(-1000, 1000, int(offsets[-1])).astype(np.int64)
    nullable = pa.array(rng.standard_normal(rows).astype(np.float64),
                        mask=(ids % 7 == 0))
    return pa.table({
        "id": ids,
        "label": (ids % 10).astype(np.int32),
        "f0": rng.standard_normal(rows).astype(np.float32),
        "f1": rng.standard_normal(rows).astype(np.float64),
        "f2": rng.integers(0, 100, rows).astype(np.int16),
        "f3": ids % 2 == 0,
        "emb": pa.FixedSizeListArray.from_arrays(
            pa.array(rng.standard_normal(rows * 3).astype(np.float32)), 3),
        "hist": pa.ListArray.from_arrays(pa.array(offsets), pa.array(values)),
        "name": pa.array([f"row-{i}" * int(i % 3 + 1) for i in ids]),
        "maybe": nullable,
    })


@pytest.fixture(scope="module")
def golden_root(tmp_path_factory) -> str:
    root = str(tmp_path_factory.mktemp("golden"))
    rng = np.random.default_rng(20261130)
    start = 0
    for f, rows in enumerate(ROWS):
        pq.write_table(_table(start, rows, rng), os.path.join(root, f"part-{f}.parquet"),
                       row_group_size=128 + 64 * f)
        start += rows
    return root


BASE = dict(columns=["id", "label", "emb", "hist", "name", "maybe"],
            features=["f0", "f1", "f2", "f3"], allow_lossy_cast=True,
            lists={"hist": "padded"}, null_mask=["maybe"], batch_size=96, seed=11,
            shuffle_window=500)

CASES = {
    "shuffled": dict(),
    "unshuffled": dict(shuffle=False),
    "ragged": dict(lists={"hist": "ragged"}),
    "rank1of3_pad": dict(rank=1, world_size=3, drop_last=False, padding_mask=True),
    "rank0of2": dict(rank=0, world_size=2),
    "float64_fill": dict(features_dtype="float64", null_mask=False, fill_null={"maybe": -1.0}),
}


def _combined(batches) -> str:
    return hashlib.sha256("".join(digest(batches)).encode()).hexdigest()


def _run(root: str, epoch: int = 0, output: str = "numpy", **kwargs) -> str:
    options = dict(BASE)
    options.update(kwargs)
    with stoker.Loader(root, output=output, **options) as loader:
        loader.set_epoch(epoch)
        return _combined(loader)  # digest() reads torch tensors through np.asarray


# Re-recorded on 2026-11-30 for one deliberate change: the first shuffle windows grow from one
# batch (docs/user-guide.md, "Shuffling"); "unshuffled" did not change.
# Re-recorded on 2026-12-01 for one deliberate change (issue 22.9): with drop_last and shuffle,
# the dropped rows are a stretch at a random place of the epoch's sequence, not its tail
# (cpp/src/plan/README.md). Every case that drops rows under shuffling changed ("shuffled",
# "ragged", "rank0of2", "float64_fill", "epoch1"); "unshuffled" and "rank1of3_pad" (no
# drop_last) did not.
# Re-recorded on 2026-12-02 for one deliberate change (issue 26, first batch): when an epoch's
# first segment holds more than a batch, its first batch of rows is a window of its own (the
# head, decoded only up to there). Only "rank1of3_pad" starts with such a segment here; the
# others start with a short piece of a row group (drop_last's random start) and did not change.
GOLDEN = {
    "shuffled": "b6764d85b012f9e00a386936dc0dbfcfc5a33083685daf07c1f187d0e2d7cc21",
    "unshuffled": "0fee15c9be60c8d6820a1d14e592282c7989510dc8f62f1833b256b97297453c",
    "ragged": "791a34aa164289afea8baf60f458068b93285cd9c54f77a819e1fdbb3c13c45c",
    "rank1of3_pad": "59edd9fc0c2a090ca8c5ac386ef8fc763337672732ac09dc57726d6f8fd90a02",
    "rank0of2": "bc3ef37cd65e8e98e13225c20d5be6562e89088fd8d33af70a00bdf0714bcd80",
    "float64_fill": "34227f5e80266f9f52cd7586fedbc0510d4d357acf72ea9efa0c2bb9c4085625",
    "epoch1": "7e628335f23a5835ae2938b65f5fd34e45a3104f373925e9224eb44b79695ab3",
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_digest(golden_root, case):
    got = _run(golden_root, **CASES[case])
    assert got == GOLDEN[case], f"batches of case {case!r} changed"


def test_golden_epoch1(golden_root):
    assert _run(golden_root, epoch=1) == GOLDEN["epoch1"]


def test_golden_torch_equals_numpy(golden_root):
    pytest.importorskip("torch")
    assert _run(golden_root, output="torch") == GOLDEN["shuffled"]


def test_golden_with_cache_cold_and_warm(golden_root, tmp_path):
    cache = str(tmp_path / "cache")
    assert _run(golden_root, cache_dir=cache) == GOLDEN["shuffled"]  # filling
    assert _run(golden_root, cache_dir=cache) == GOLDEN["shuffled"]  # warm


def test_golden_resumed(golden_root):
    """A resume at batch 7 of epoch 1 yields exactly the tail of the pinned epoch."""
    options = dict(BASE)
    with stoker.Loader(golden_root, **options) as loader:
        loader.set_epoch(1)
        it = iter(loader)
        for _ in range(7):
            next(it)
        state = loader.state_dict()
        it.close()
    with stoker.Loader(golden_root, **options) as loader:
        loader.load_state_dict(state)
        tail = digest(loader)
    with stoker.Loader(golden_root, **options) as loader:
        loader.set_epoch(1)
        full = digest(loader)
    assert tail == full[7:]
    assert hashlib.sha256("".join(full).encode()).hexdigest() == GOLDEN["epoch1"]
