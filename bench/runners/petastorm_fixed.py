"""Petastorm with the study's fixes: thread pool, ``convert_early_to_numpy=True``, a seed."""

from __future__ import annotations

from . import _petastorm_common as common

NAME = "petastorm_fixed"
WORKLOADS = ("tabular-snappy", "tabular-zstd")
available = common.available


def _kwargs(job):
    return {"reader_pool_type": "thread", "workers_count": job["threads"],
            "convert_early_to_numpy": True, "seed": job["seed"], "shuffle_row_groups": True}


def config(job):
    return {"api": "petastorm.make_batch_reader + petastorm.pytorch.BatchedDataLoader",
            **_kwargs(job), "batch_size": job["batch_size"],
            "transform_spec": "pads tags to 16 + tags_lengths (pandas, in the workers)",
            "features": "stacked to [B, 220] float32 in the consumer",
            "compat": "bench/runners/_petastorm_compat.py shims for pyarrow 25 / NumPy 2"}


def batches(job):
    return common.batches(job, _kwargs(job), {})
