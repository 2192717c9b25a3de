"""stoker filling a fresh ready-tensor cache: the measured epoch is epoch 0 with an empty
``cache_dir`` (every row group a miss, decoded and written behind the pipeline). The clock runs
from constructing the loader to the end of the epoch (StopIteration, which waits for the entries
still queued for the disk). Everything else as in the ``stoker`` runner; compared with it."""

from __future__ import annotations

import shutil
import tempfile

from . import stoker as _base

NAME = "stoker_fill"
WORKLOADS = ("tabular-snappy", "tabular-zstd")
available = _base.available
stats = _base.stats


def config(job):
    return {**_base.config(job), "cache_dir": "a fresh, empty folder",
            "measured": "epoch 0 (every row group a miss, stored behind the pipeline)"}


def batches(job):
    import stoker

    job["_cache_dir"] = tempfile.mkdtemp(prefix="stoker-bench-fill-")
    loader = stoker.Loader(job["path"], **_base._options(job), cache_dir=job["_cache_dir"])
    job["_stoker_loader"] = loader
    for batch in loader:
        yield len(batch["label"]), batch


def shutdown(job):
    loader = job.get("_stoker_loader")
    if loader is not None:
        loader.close()
    shutil.rmtree(job.get("_cache_dir", ""), ignore_errors=True)
