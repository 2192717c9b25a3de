"""Shims that let Petastorm 0.13.1 run on pyarrow 25 and NumPy 2, applied in the bench process only.

Petastorm 0.13.1 (the newest release) still calls APIs that pyarrow removed in 15.0 (the legacy
``ParquetDataset(validate_schema=, metadata_nthreads=)`` with ``.pieces``/``.partitions``/``.fs``,
``ParquetDatasetPiece``, ``pyarrow.filesystem.LocalFileSystem``, ``pyarrow.localfs``,
``pyarrow.hdfs``) and NumPy
aliases removed in 2.0 (``np.string_``, ``np.unicode_``). Each shim below re-creates the small
part of the old API that ``make_batch_reader`` uses on a local folder, on top of the current
``pyarrow.parquet.ParquetFile``. Nothing outside ``bench/`` is touched.

``LegacyParquetDataset`` also reads a Petastorm store's ``_common_metadata`` (its Unischema and
row groups per file), so ``make_reader`` works on datasets written by ``materialize_dataset``.

A further shim teaches ``Unischema.from_arrow_schema`` that ``fixed_size_list<float>`` is a list
(it otherwise drops the embedding columns with a warning).

The last one fixes a race in Petastorm's own ``ThreadPool.get_results``: it asks whether every
worker is done and only then whether the ventilator has finished. If the ventilator thread hands
out every item (and finishes) between the two questions, the first answer (no item handed out,
so all done) and the second (finished) together end the epoch before any row is read: a reader
of a few row groups then yields nothing, without an error (reproduced: 2 of 200 three-file
readers with ``sys.setswitchinterval(1e-6)``; seen in CI as Petastorm's converter giving zero
rows). The shim asks the ventilator first; it never un-finishes, so the answer stays true.
"""

from __future__ import annotations

import os
import sys
import types

import numpy as np

_APPLIED = False


class LocalFileSystem:
    """The piece of ``pyarrow.filesystem.LocalFileSystem`` that Petastorm calls."""

    _instance = None

    @classmethod
    def get_instance(cls):
        if cls._instance is None:
            cls._instance = cls()
        return cls._instance

    def open(self, path, mode="rb"):
        return open(path, mode)

    def exists(self, path):
        return os.path.exists(path)

    def isdir(self, path):
        return os.path.isdir(path)

    def isfile(self, path):
        return os.path.isfile(path)

    def ls(self, path):
        return sorted(os.path.join(path, n) for n in os.listdir(path))


def _list_parquet(path_or_paths):
    paths = path_or_paths if isinstance(path_or_paths, (list, tuple)) else [path_or_paths]
    out = []
    for p in paths:
        if os.path.isdir(p):
            for root, dirs, files in os.walk(p):
                dirs[:] = sorted(d for d in dirs if not d.startswith((".", "_")))
                out += [os.path.join(root, f) for f in sorted(files)
                        if not f.startswith((".", "_")) and not f.endswith(".crc")]
        else:
            out.append(p)
    return sorted(out)


class ParquetDatasetPiece:
    """Legacy piece: one file, optionally one row group of it."""

    def __init__(self, path, open_file_func=None, row_group=None, partition_keys=None, file_options=None):
        self.path = path
        self.open_file_func = open_file_func or (lambda p: open(p, "rb"))
        self.row_group = row_group
        self.partition_keys = partition_keys or []

    def _file(self):
        import pyarrow.parquet as pq

        return pq.ParquetFile(self.path)

    def get_metadata(self):
        return self._file().metadata

    def read(self, columns=None, partitions=None, use_threads=True, use_pandas_metadata=False, **_):
        pf = self._file()
        columns = sorted(columns) if columns is not None else None
        if self.row_group is not None:
            return pf.read_row_group(self.row_group, columns=columns, use_threads=use_threads)
        return pf.read(columns=columns, use_threads=use_threads)

    def __repr__(self):
        return f"ParquetDatasetPiece({self.path!r}, row_group={self.row_group})"


class LegacyParquetDataset:
    """The attributes of the removed legacy ``ParquetDataset`` that Petastorm reads."""

    def __init__(self, path_or_paths, filesystem=None, **_ignored):
        self.paths = path_or_paths
        self.fs = filesystem if hasattr(filesystem, "open") else LocalFileSystem.get_instance()
        self.pieces = [ParquetDatasetPiece(p, self.fs.open) for p in _list_parquet(path_or_paths)]
        self.partitions = None
        self.metadata = None
        self.metadata_path = None
        self.common_metadata = None
        self.common_metadata_path = None
        # A Petastorm store (materialize_dataset) keeps its Unischema in _common_metadata, which
        # make_reader reads through these two attributes.
        if isinstance(path_or_paths, str) and os.path.isdir(path_or_paths):
            common = os.path.join(path_or_paths, "_common_metadata")
            if os.path.isfile(common):
                import pyarrow.parquet as pq

                self.common_metadata = pq.read_metadata(common)
                self.common_metadata_path = common

    @property
    def schema(self):
        return self.pieces[0].get_metadata().schema


def apply() -> None:
    """Installs the shims (idempotent)."""
    global _APPLIED
    if _APPLIED:
        return
    import pyarrow
    import pyarrow.parquet as pq

    if not hasattr(np, "string_"):
        np.string_ = np.bytes_
    if not hasattr(np, "unicode_"):
        np.unicode_ = np.str_
    if "pyarrow.filesystem" not in sys.modules:
        module = types.ModuleType("pyarrow.filesystem")
        module.LocalFileSystem = LocalFileSystem
        module.FileSystem = LocalFileSystem
        sys.modules["pyarrow.filesystem"] = module
        pyarrow.filesystem = module
    if "pyarrow.hdfs" not in sys.modules:
        # Imported at module level by petastorm.hdfs.namenode; never used for local data.
        module = types.ModuleType("pyarrow.hdfs")

        class HadoopFileSystem:  # noqa: D401 - placeholder type
            def __init__(self, *args, **kwargs):
                raise RuntimeError("HDFS is not available in this pyarrow (bench shim)")

        module.HadoopFileSystem = HadoopFileSystem
        module.connect = HadoopFileSystem
        sys.modules["pyarrow.hdfs"] = module
        pyarrow.hdfs = module
    if not hasattr(pyarrow, "localfs"):
        pyarrow.localfs = LocalFileSystem.get_instance()
    if not hasattr(pyarrow, "LocalFileSystem"):
        # Imported at module level by petastorm.spark (its delete handler's type check).
        pyarrow.LocalFileSystem = LocalFileSystem

    modern = pq.ParquetDataset

    def parquet_dataset(path_or_paths, *args, **kwargs):
        legacy = {"validate_schema", "metadata_nthreads", "split_row_groups", "use_legacy_dataset"}
        if legacy & set(kwargs) or isinstance(kwargs.get("filesystem"), LocalFileSystem):
            return LegacyParquetDataset(path_or_paths, **kwargs)
        return modern(path_or_paths, *args, **kwargs)

    pq.ParquetDataset = parquet_dataset
    pq.ParquetDatasetPiece = ParquetDatasetPiece

    from petastorm import unischema

    original = unischema._numpy_and_codec_from_arrow_type

    def numpy_type(field_type):
        if pyarrow.types.is_fixed_size_list(field_type):
            return original(field_type.value_type)
        return original(field_type)

    unischema._numpy_and_codec_from_arrow_type = numpy_type
    # from_arrow_schema gives list columns the shape (None,) only for ListType.
    unischema.ListType = (pyarrow.lib.ListType, pyarrow.lib.FixedSizeListType)

    from petastorm.workers_pool.thread_pool import ThreadPool

    workers_done = ThreadPool.all_workers_done

    def all_workers_done(self):
        # get_results raises EmptyResultError when this and then ventilator.completed() hold.
        ventilated_all = not self._ventilator or self._ventilator.completed()
        return ventilated_all and workers_done(self)

    all_workers_done.original = workers_done
    ThreadPool.all_workers_done = all_workers_done
    _APPLIED = True
