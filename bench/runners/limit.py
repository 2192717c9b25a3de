"""The limit: the cheapest read of the same columns on all cores, no batching, no shuffling.

Tabular: ``pyarrow.parquet.ParquetFile.read_row_group(g, columns, use_threads=True)`` per row
group, then the NumPy conversion (one array per feature column, zero-copy; embeddings [N, D]; tags
flattened + offsets). Per row group, not per file: ``read_table`` of a whole file gives every
column one chunk per row group, so ``to_numpy`` concatenates (a copy of every column) and the
file-sized buffers are fresh memory the kernel must fault in and zero; in a fresh process that
made the runner ~1.7x slower than this read (bench/README.md, "The limit").
Images: JPEG decode alone (Pillow's libjpeg-turbo) on a thread pool of all cores.
"""

from __future__ import annotations

import io
import os

import numpy as np

from .common import all_tabular_columns, feature_names, fixed_list_to_numpy

NAME = "limit"
WORKLOADS = ("tabular-snappy", "tabular-zstd", "images")


def available():
    return None


def config(job):
    if job["workload"] == "images":
        return {"api": "PIL.Image.open(BytesIO(jpeg)).load() (Pillow's libjpeg-turbo), decode only",
                "threads": job["threads"], "read": "pyarrow.parquet.ParquetFile per row group"}
    return {"api": "pyarrow.parquet.ParquetFile.read_row_group(g, columns, use_threads=True) "
                   "per row group + numpy",
            "features": "one NumPy array per column (no stacking, no cast)",
            "lists": "values + offsets (no padding)"}


def _tabular(job):
    import pyarrow.parquet as pq

    feats = feature_names()
    columns = all_tabular_columns()
    for path in job["files"]:
        pf = pq.ParquetFile(path)
        for g in range(pf.metadata.num_row_groups):
            # One chunk per column: to_numpy is zero-copy, and the allocator reuses the previous
            # row group's memory instead of faulting in a whole file's.
            table = pf.read_row_group(g, columns=columns, use_threads=True)
            out = {name: table.column(name).chunk(0).to_numpy() for name in feats}
            out["label"] = table.column("label").chunk(0).to_numpy()
            for name in ("emb16", "emb64"):
                out[name] = fixed_list_to_numpy(table.column(name))
            tags = table.column("tags").chunk(0)
            out["tags"] = tags.values.to_numpy()
            out["tags_offsets"] = tags.offsets.to_numpy()
            yield table.num_rows, out
            del table, out


def _decode(blob):
    from PIL import Image

    img = Image.open(io.BytesIO(blob))
    img.load()
    return img.size


def _images(job):
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.parquet as pq

    with ThreadPoolExecutor(max_workers=job["threads"] or os.cpu_count()) as pool:
        for path in job["files"]:
            pf = pq.ParquetFile(path)
            for g in range(pf.metadata.num_row_groups):
                blobs = pf.read_row_group(g, columns=["image"]).column(0).to_pylist()
                sizes = list(pool.map(_decode, blobs, chunksize=8))
                yield len(sizes), sizes


def batches(job):
    return _images(job) if job["workload"] == "images" else _tabular(job)
