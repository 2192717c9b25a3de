"""One epoch of one system for bench/remote.py, in a fresh interpreter.

    python -m bench.remote_worker < job.json   -> prints one line `RESULT {json}`

The job arrives on stdin, not the command line: it holds the storage credentials.

Job keys: system ("stoker" | "petastorm"), path (local folder), uri (s3://bucket/prefix or None for
local), files (keys relative to the bucket, for Petastorm), storage (endpoint, access/secret
keys), cache_dir, batch_size, threads, seed. stoker uses the tabular-wide options of
bench/runners/stoker.py plus storage_options and cache_dir; Petastorm uses the study's fixes of
bench/runners/petastorm_fixed.py plus its local-disk cache and a pyarrow S3FileSystem.
"""

from __future__ import annotations

import json
import os
import sys
import time


def _stoker_batches(job):
    import stoker

    from .runners.stoker import _options

    opts = _options(job)
    if job.get("uri"):
        opts["storage_options"] = stoker_storage_options(job)
    if job.get("cache_dir"):
        opts["cache_dir"] = job["cache_dir"]
    loader = stoker.Loader(job.get("uri") or job["path"], **opts)
    job["_loader"] = loader
    for batch in loader:
        yield len(batch["label"])


class _ArrowFsOpen:
    """The `open`-style filesystem the bench's legacy-Petastorm shim expects, over pyarrow's S3."""

    def __init__(self, fs):
        self.fs = fs

    def open(self, path, mode="rb"):
        return self.fs.open_input_file(path)

    def exists(self, path):
        from pyarrow.fs import FileType

        return self.fs.get_file_info(path).type != FileType.NotFound

    def isdir(self, path):
        from pyarrow.fs import FileType

        return self.fs.get_file_info(path).type == FileType.Directory

    def isfile(self, path):
        from pyarrow.fs import FileType

        return self.fs.get_file_info(path).type == FileType.File

    def ls(self, path):
        from pyarrow.fs import FileSelector

        return sorted(i.path for i in self.fs.get_file_info(FileSelector(path)))


def _petastorm_batches(job):
    kwargs = {"reader_pool_type": "thread", "workers_count": job["threads"],
              "convert_early_to_numpy": True, "seed": job["seed"], "shuffle_row_groups": True}
    if job.get("cache_dir"):
        kwargs.update(cache_type="local-disk", cache_location=job["cache_dir"],
                      cache_size_limit=20 << 30, cache_row_size_estimate=job["row_bytes"],
                      # Its default (cleanup=True) deletes the cache when the reader stops, so a
                      # later epoch in a new process would start cold again.
                      cache_extra_settings={"cleanup": False})
    for n, _batch in petastorm_reader_batches(job, kwargs):
        yield n


def petastorm_reader_batches(job, kwargs):
    """(rows, batch) of one Petastorm reader over job["uri"] (S3) or job["path"] (local), with
    make_batch_reader `kwargs`; bench/study.py uses it with Petastorm's defaults too."""
    import torch
    from petastorm import make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    from .runners import _petastorm_common as common
    from .runners import _petastorm_compat
    from .runners.common import all_tabular_columns, feature_names

    _petastorm_compat.apply()
    kwargs = dict(kwargs)
    if job.get("uri"):
        wrapped = _petastorm_s3(job)
        urls = [job["uri"].rstrip("/") + "/" + f for f in job["files"]]
        kwargs["filesystem"] = wrapped
    else:
        urls = "file://" + job["path"]
    feats = feature_names()
    with make_batch_reader(urls, schema_fields=all_tabular_columns(), num_epochs=1,
                           transform_spec=common.transform_spec(), **kwargs) as reader:
        loader = BatchedDataLoader(reader, batch_size=job["batch_size"])
        for batch in loader:
            n = len(batch["label"])
            features = torch.empty((n, len(feats)), dtype=torch.float32)
            for j, name in enumerate(feats):
                features[:, j] = batch[name]
            yield n, features


def _petastorm_s3(job):
    """What Petastorm needs to read S3 at all here (see NOTES in bench/remote.py)."""
    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    st = job["storage"]
    s3 = pafs.S3FileSystem(endpoint_override=st["endpoint"], scheme="http",
                           region="us-east-1", access_key=st["access_key"],
                           secret_key=st["secret_key"])
    wrapped = _ArrowFsOpen(s3)
    # The shim's pieces read footers with a local path; read them through the filesystem.
    piece = pq.ParquetDatasetPiece
    piece._file = lambda self: pq.ParquetFile(wrapped.open(self.path))
    # Petastorm strips the scheme with fsspec, which wants s3fs for s3:// even though the
    # pyarrow filesystem is given; strip it ourselves (bucket/key is what pyarrow's S3 takes).
    from petastorm import fs_utils

    if not getattr(fs_utils, "_stoker_bench_patched", False):
        original = fs_utils.get_dataset_path
        fs_utils.get_dataset_path = (lambda parsed: parsed.netloc + parsed.path
                                     if parsed.scheme == "s3" else original(parsed))
        fs_utils._stoker_bench_patched = True
    return wrapped


def stoker_storage_options(job):
    st = job["storage"]
    return dict(endpoint_override=st["endpoint"], scheme="http", region="us-east-1",
                access_key=st["access_key"], secret_key=st["secret_key"])


def _raw_batches(job):
    """The link's own ceiling: every object read whole, all files at once, no decoding."""
    from concurrent.futures import ThreadPoolExecutor

    import pyarrow.fs as pafs
    import pyarrow.parquet as pq

    st = job["storage"]
    s3 = pafs.S3FileSystem(endpoint_override=st["endpoint"], scheme="http", region="us-east-1",
                           access_key=st["access_key"], secret_key=st["secret_key"])
    bucket = job["uri"][len("s3://"):].strip("/")

    def read(name):
        total = 0
        with s3.open_input_stream(bucket + "/" + name) as f:
            while True:
                chunk = f.read(8 << 20)
                if not chunk:
                    return total
                total += len(chunk)

    with ThreadPoolExecutor(len(job["files"])) as pool:
        sizes = list(pool.map(read, job["files"]))
    rows = sum(pq.ParquetFile(os.path.join(job["path"], n)).metadata.num_rows for n in job["files"])
    job["_raw_bytes"] = sum(sizes)
    yield rows


def main() -> None:
    job = json.loads(sys.stdin.read())
    gen = {"stoker": _stoker_batches, "petastorm": _petastorm_batches, "raw": _raw_batches}[job["system"]]
    if job["system"] == "raw":
        import pyarrow.fs  # noqa: F401
    elif job["system"] == "stoker":
        import stoker  # noqa: F401  imported before the clock starts
        import torch  # noqa: F401
    else:
        from .runners import _petastorm_compat

        _petastorm_compat.apply()
        import petastorm  # noqa: F401
        import torch  # noqa: F401
    t0 = time.perf_counter()
    rows = 0
    first = None
    for n in gen(job):
        rows += n
        if first is None:
            first = time.perf_counter() - t0
    seconds = time.perf_counter() - t0
    out = {"rows": rows, "seconds": seconds, "first_batch_s": first}
    loader = job.get("_loader")
    if loader is not None:
        try:
            stats = loader.stats()
            try:
                out["loader_stats"] = json.loads(json.dumps(stats, default=str))
            except Exception:  # noqa: BLE001  an object rather than a dict: keep its text
                out["loader_stats"] = repr(stats)[:4000]
        except Exception as error:  # noqa: BLE001
            out["loader_stats"] = f"unavailable: {type(error).__name__}: {error}"
    print("RESULT " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
