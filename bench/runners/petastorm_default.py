"""Petastorm ``make_batch_reader`` with its defaults and ``BatchedDataLoader`` (the study's start)."""

from __future__ import annotations

from . import _petastorm_common as common

NAME = "petastorm_default"
WORKLOADS = ("tabular-snappy", "tabular-zstd")
available = common.available


def config(job):
    return {"api": "petastorm.make_batch_reader + petastorm.pytorch.BatchedDataLoader",
            "reader_pool_type": "thread (default)", "workers_count": "10 (default)",
            "results_queue_size": "50 (default)", "shuffle_row_groups": "True (default)",
            "shuffle_rows": "False (default)", "seed": "None (default)",
            "convert_early_to_numpy": "False (default)", "batch_size": job["batch_size"],
            "transform_spec": "pads tags to 16 + tags_lengths (pandas, in the workers)",
            "features": "stacked to [B, 220] float32 in the consumer",
            "compat": "bench/runners/_petastorm_compat.py shims for pyarrow 25 / NumPy 2"}


def batches(job):
    return common.batches(job, {}, {})
