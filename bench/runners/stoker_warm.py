"""stoker reading from a warm ready-tensor cache: one epoch fills a fresh ``cache_dir`` before the
clock starts, then the measured epoch (epoch 1, another order) reads every row group from the
cache. Everything else as in the ``stoker`` runner. Compared with ``memory_limit``."""

from __future__ import annotations

import shutil
import tempfile

from . import stoker as _base

NAME = "stoker_warm"
WORKLOADS = ("tabular-snappy", "tabular-zstd")
available = _base.available
stats = _base.stats


def config(job):
    return {**_base.config(job), "cache_dir": "a fresh folder, filled by one epoch before the clock",
            "measured": "epoch 1 (every row group a cache hit)"}


def prepare(job):
    import stoker

    job["_cache_dir"] = tempfile.mkdtemp(prefix="stoker-bench-warm-")
    loader = stoker.Loader(job["path"], **_base._options(job), cache_dir=job["_cache_dir"])
    for _ in loader:  # the filling epoch
        pass
    loader.set_epoch(1)
    job["_stoker_loader"] = loader


def batches(job):
    for batch in job["_stoker_loader"]:
        yield len(batch["label"]), batch


def shutdown(job):
    loader = job.get("_stoker_loader")
    if loader is not None:
        loader.close()
    shutil.rmtree(job.get("_cache_dir", ""), ignore_errors=True)
