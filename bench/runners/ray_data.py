"""Ray Data: ``read_parquet(...).map_batches(to_tensors).iter_torch_batches(batch_size)``.

Ray's guide for training ingest: read with ``read_parquet``, do per-batch preprocessing in
``map_batches`` (runs as parallel Ray tasks), and iterate with ``iter_torch_batches`` with
prefetching. Ray is started once in ``prepare`` (``ray.init(num_cpus=cores)``), outside the
timed region; its start-up time is recorded in the config.
"""

from __future__ import annotations

import time

from .common import all_tabular_columns, record_batch_to_numpy

NAME = "ray_data"
WORKLOADS = ("tabular-snappy", "tabular-zstd")
_INIT_S = {}


def available():
    try:
        import ray  # noqa: F401
        import ray.data  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"ray import failed: {type(error).__name__}: {error}"
    return None


def prepare(job):
    import ray

    start = time.perf_counter()
    ray.init(num_cpus=job["threads"], include_dashboard=False, log_to_driver=False,
             object_store_memory=1 << 30, configure_logging=False)
    ray.data.DataContext.get_current().enable_progress_bars = False
    _INIT_S["ray_init_s"] = time.perf_counter() - start


def shutdown(job):
    import ray

    ray.shutdown()


def _to_numpy(table):
    rbs = table.combine_chunks().to_batches()
    import pyarrow as pa

    rb = rbs[0] if len(rbs) == 1 else pa.Table.from_batches(rbs).combine_chunks().to_batches()[0]
    return record_batch_to_numpy(rb)


def config(job):
    return {"api": "ray.data.read_parquet(columns).map_batches(to_numpy, batch_format='pyarrow')"
                   ".iter_torch_batches(batch_size)",
            "ray.init": f"num_cpus={job['threads']}, object_store_memory=1GiB (not timed)",
            "map_batches batch_size": job["batch_size"], "prefetch_batches": "1 (default)",
            "shuffle": "none (Ray's shuffles are all slower)", **_INIT_S}


def batches(job):
    import ray

    ds = ray.data.read_parquet(job["path"], columns=all_tabular_columns())
    ds = ds.map_batches(_to_numpy, batch_format="pyarrow", batch_size=job["batch_size"])
    for batch in ds.iter_torch_batches(batch_size=job["batch_size"]):
        yield len(batch["label"]), batch
