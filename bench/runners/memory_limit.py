"""The memory limit of a warm epoch: NumPy gathers of stoker's output arrays, already in memory.

Before the clock, every file is read and converted to the arrays the ``stoker`` runner delivers
(features stacked [N, 220] float32, label, emb16 [N, 16], emb64 [N, 64], tags padded to the
longest row plus lengths). The epoch then gathers batches of rows by a seeded permutation into
fresh arrays with ``np.take`` on ``threads`` threads (each thread a contiguous part of the batch).
This is what a warm ready-tensor cache could do at best without decoding anything: what stoker's
warm epoch is compared with (issue 12's target: >= 0.6 of it).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np

from .common import all_tabular_columns, pad_list_array, record_batch_to_numpy

NAME = "memory_limit"
WORKLOADS = ("tabular-snappy", "tabular-zstd")


def available():
    return None


def config(job):
    return {"api": "np.take(array, permutation[batch], axis=0, out=...) per output array",
            "arrays": "features [N, 220] float32, label, emb16, emb64, tags padded + lengths",
            "threads": job["threads"], "loaded": "before the clock (not measured)"}


def prepare(job):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tables = [pq.read_table(path, columns=all_tabular_columns()) for path in job["files"]]
    table = pa.concat_tables(tables).combine_chunks()
    arrays = record_batch_to_numpy(table.to_batches(max_chunksize=table.num_rows)[0])
    tags, lengths = pad_list_array(table.column("tags"))  # one width for the whole epoch
    arrays["tags"], arrays["tags_lengths"] = tags, lengths
    job["_memory_arrays"] = arrays


def batches(job):
    arrays = job["_memory_arrays"]
    rows = len(arrays["label"])
    order = np.random.default_rng(job["seed"]).permutation(rows)
    threads = max(1, int(job["threads"]))
    pool = ThreadPoolExecutor(threads)
    try:
        for start in range(0, rows, job["batch_size"]):
            index = order[start:start + job["batch_size"]]
            out = {name: np.empty((len(index),) + a.shape[1:], a.dtype) for name, a in arrays.items()}
            bounds = np.linspace(0, len(index), threads + 1).astype(int)

            def gather(part):
                lo, hi = bounds[part], bounds[part + 1]
                for name, a in arrays.items():
                    np.take(a, index[lo:hi], axis=0, out=out[name][lo:hi])

            list(pool.map(gather, range(threads)))
            yield len(index), out
    finally:
        pool.shutdown()
