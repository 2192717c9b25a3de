"""The Python stages (transform=, augment=, python_workers) in ``loader.stats()["stages"]``: listed
after the engine's, with the engine's fields, and counting what they did.

The callables live at module level: spawned workers import this module to unpickle them.
"""

from __future__ import annotations

import os

import pyarrow.parquet as pq
import pytest

import stoker
from stoker_testdata import write_uneven_dataset

OPTIONS = dict(columns=["id", "x"], batch_size=250, seed=3, num_threads=2)
ENGINE_STAGES = ["decode", "sequence", "batch"]
FIELDS = {"name", "pool", "threads", "busy_s", "wait_in_s", "wait_out_s", "items", "bytes"}


def plus_one(arrays):
    return {"id": arrays["id"], "x": arrays["x"] + 1}


def scaled(batch, rng):
    return {"id": batch["id"], "x": batch["x"] * rng.uniform(0.5, 2.0)}


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("pystages"))
    write_uneven_dataset(root)
    return root


def row_groups(root):
    return sum(pq.ParquetFile(os.path.join(root, name)).num_row_groups
               for name in os.listdir(root))


def stages_of(loader):
    stats = loader.stats()
    return [stage["name"] for stage in stats["stages"]], \
        {stage["name"]: stage for stage in stats["stages"]}


def test_no_python_stage_without_callables(dataset):
    with stoker.Loader(dataset, **OPTIONS) as loader:
        list(loader)
        assert stages_of(loader)[0] == ENGINE_STAGES


@pytest.mark.parametrize("python_workers", [0, 2])
def test_augment_stage_counts_batches(dataset, python_workers):
    with stoker.Loader(dataset, augment=scaled, python_workers=python_workers,
                       **OPTIONS) as loader:
        names, stages = stages_of(loader)
        assert names == ENGINE_STAGES + ["augment"]
        augment = stages["augment"]
        assert set(augment) == FIELDS == set(stages["decode"])
        assert augment["items"] == 0 and augment["busy_s"] == 0 and augment["bytes"] == 0
        if python_workers:
            assert (augment["pool"], augment["threads"]) == ("python_workers", 2)
        else:
            assert (augment["pool"], augment["threads"]) == ("augment", 2)
        batches = list(loader)
        augment = stages_of(loader)[1]["augment"]
        assert augment["items"] == len(batches) == len(loader)
        # The bytes augment= returned: the delivered batches (numpy output: the same arrays).
        assert augment["bytes"] == sum(b["id"].nbytes + b["x"].nbytes for b in batches)
        assert augment["busy_s"] > 0 and augment["wait_in_s"] > 0
        list(loader)  # the counters are cumulative, as the engine's
        assert stages_of(loader)[1]["augment"]["items"] == 2 * len(batches)


@pytest.mark.parametrize("python_workers", [0, 2])
def test_transform_stage_counts_row_groups(dataset, python_workers):
    with stoker.Loader(dataset, transform=plus_one, python_workers=python_workers,
                       **OPTIONS) as loader:
        names, stages = stages_of(loader)
        assert names == ENGINE_STAGES + ["transform"]
        opened = stages["transform"]  # the call at open that learns the output's keys
        assert set(opened) == FIELDS
        if python_workers:
            assert (opened["pool"], opened["threads"]) == ("python_workers", 2)
        else:
            assert (opened["pool"], opened["threads"]) == ("python", OPTIONS["num_threads"])
        assert len(list(loader)) == len(loader)
        transform = stages_of(loader)[1]["transform"]
        rows = loader.dataset_rows
        # Every row group went through it once, returning int64 ids and float32 x; the row group
        # the epoch starts in once more when its first batch was cut from it (the head: a segment
        # of its own, and a user transform sees whole row groups).
        extra = transform["items"] - opened["items"] - row_groups(dataset)
        assert extra in (0, 1)
        extra_bytes = transform["bytes"] - opened["bytes"] - rows * (8 + 4)
        assert (extra_bytes > 0) == (extra == 1) and extra_bytes % (8 + 4) == 0
        assert transform["busy_s"] > opened["busy_s"]
        assert transform["wait_in_s"] == transform["wait_out_s"] == 0


def test_both_stages_share_the_worker_processes(dataset):
    with stoker.Loader(dataset, transform=plus_one, augment=scaled, python_workers=2,
                       **OPTIONS) as loader:
        batches = list(loader)
        names, stages = stages_of(loader)
        assert names == ENGINE_STAGES + ["transform", "augment"]
        assert stages["transform"]["pool"] == stages["augment"]["pool"] == "python_workers"
        assert stages["augment"]["items"] == len(batches)
        assert stages["transform"]["items"] > 0
