"""stoker reading from a warm ready-tensor cache: epochs fill a fresh ``cache_dir`` before the
clock starts (until one skips no write: on a saturated machine the write-behind writer skips entries
it cannot keep up with, and a later epoch stores them) and the write-behind queue is flushed, then
the measured epoch (another order) reads every row group from the cache. Everything else as in the
``stoker`` runner. Compared with ``memory_limit``."""

from __future__ import annotations

from . import stoker as _base

NAME = "stoker_warm"
WORKLOADS = ("tabular-snappy", "tabular-zstd")
available = _base.available
stats = _base.stats
shutdown = _base.close_cache_loader


def config(job):
    return {**_base.config(job), "cache_dir": "a fresh folder, filled before the clock by epochs until one skips no write",
            "measured": "the next epoch (every row group a cache hit)"}


def prepare(job):
    loader = _base._cache_loader(job, "stoker-bench-warm-")
    epoch = 0
    while True:  # the filling epochs
        loader.set_epoch(epoch)
        skipped = loader.stats()["cache"]["write_skipped"]
        for _ in loader:
            pass
        epoch += 1
        if loader.stats()["cache"]["write_skipped"] == skipped or epoch >= 5:
            break  # every entry this epoch missed was stored: the next epoch only hits
    # An epoch ends before the write-behind queue does: without this the measured epoch shared
    # the cores with the writer storing the last entries (served from its queue meanwhile).
    loader.flush_cache()
    job["_fill_epochs"] = epoch
    loader.set_epoch(epoch)


def batches(job):
    for batch in job["_stoker_loader"]:
        yield len(batch["label"]), batch
