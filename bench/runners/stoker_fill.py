"""stoker filling a fresh ready-tensor cache: the measured epoch is epoch 0 with an empty
``cache_dir`` (every row group a miss, decoded and written behind the pipeline). The clock runs
from constructing the loader to the end of the epoch (StopIteration, which waits for the entries
still queued for the disk). Everything else as in the ``stoker`` runner; compared with it."""

from __future__ import annotations

from . import stoker as _base

NAME = "stoker_fill"
WORKLOADS = ("tabular-snappy", "tabular-zstd")
available = _base.available
stats = _base.stats
shutdown = _base.close_cache_loader


def config(job):
    return {**_base.config(job), "cache_dir": "a fresh, empty folder",
            "measured": "epoch 0 (every row group a miss, stored behind the pipeline)"}


def batches(job):
    loader = _base._cache_loader(job, "stoker-bench-fill-")
    for batch in loader:
        yield len(batch["label"]), batch
