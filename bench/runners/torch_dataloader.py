"""What most teams write: torch DataLoader over an IterableDataset reading pyarrow iter_batches.

Tabular: each worker takes every k-th row group of a seeded row-group order, reads it with
``ParquetFile.iter_batches(batch_size, columns)`` and builds numpy arrays (features stacked to
[B, F] float32, embeddings [B, D], tags padded + lengths); the DataLoader turns them into tensors
(``batch_size=None``: the dataset yields whole batches). Images: PIL decode, torchvision-style
RandomResizedCrop(224) + horizontal flip, CHW uint8, collated in the workers. The study's
many-separate-outputs workload (``job["workload"] == "many"``): ``job["columns"]``, each column
its own tensor.
"""

from __future__ import annotations

import random

import numpy as np

from .common import all_tabular_columns, decode_transform, record_batch_to_numpy

try:
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # available() reports it
    _Base = object

NAME = "torch_dataloader"
WORKLOADS = ("tabular-snappy", "tabular-zstd", "images")


def available():
    try:
        import torch  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"import torch failed: {error}"
    return None


def config(job):
    return {"api": "torch.utils.data.DataLoader(IterableDataset)", "num_workers": job["threads"],
            "batch_size": "None (dataset yields whole batches)", "pin_memory": False,
            "persistent_workers": False, "prefetch_factor": 2,
            "reader": "pyarrow.parquet.ParquetFile.iter_batches(batch_size, columns) per row group",
            "shuffle": "row-group order, seeded; no row shuffle",
            "per_batch": ("features np.empty [B,220] float32 filled per column, emb via flatten+reshape, "
                          "tags padded with numpy") if job["workload"] != "images" else
                         "PIL decode + RandomResizedCrop(224) + flip + CHW uint8, np.stack"}


def _row_groups(paths):
    import pyarrow.parquet as pq

    return [(p, g) for p in paths for g in range(pq.ParquetFile(p).metadata.num_row_groups)]


class _Sharded(_Base):
    """Each DataLoader worker takes every k-th row group of a seeded row-group order."""

    def __init__(self, paths, batch_size, seed):
        self.paths, self.batch_size, self.seed = paths, batch_size, seed

    def _my_row_groups(self):
        import torch

        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        groups = _row_groups(self.paths)
        random.Random(self.seed).shuffle(groups)
        return wid, groups[wid::nw]


class _Tabular(_Sharded):
    def __iter__(self):
        import pyarrow.parquet as pq
        import torch

        _, mine = self._my_row_groups()
        columns = all_tabular_columns()
        for path, g in mine:
            pf = pq.ParquetFile(path)
            for rb in pf.iter_batches(batch_size=self.batch_size, row_groups=[g], columns=columns,
                                      use_threads=False):
                out = record_batch_to_numpy(rb)
                yield {k: torch.from_numpy(v) for k, v in out.items()}


class _Many(_Sharded):
    """Every column of ``columns`` as its own tensor (the study's many-separate-outputs set)."""

    def __init__(self, paths, batch_size, seed, columns):
        super().__init__(paths, batch_size, seed)
        self.columns = columns

    def __iter__(self):
        import pyarrow.parquet as pq
        import torch

        _, mine = self._my_row_groups()
        for path, g in mine:
            pf = pq.ParquetFile(path)
            for rb in pf.iter_batches(batch_size=self.batch_size, row_groups=[g],
                                      columns=self.columns, use_threads=False):
                yield {name: torch.from_numpy(rb.column(j).to_numpy(zero_copy_only=False))
                       for j, name in enumerate(self.columns)}


class _Images(_Sharded):
    def __iter__(self):
        import pyarrow.parquet as pq
        import torch

        wid, mine = self._my_row_groups()
        rng = random.Random(self.seed * 1000 + wid)
        for path, g in mine:
            pf = pq.ParquetFile(path)
            for rb in pf.iter_batches(batch_size=self.batch_size, row_groups=[g],
                                      columns=["image", "label"], use_threads=False):
                blobs = rb.column(0).to_pylist()
                images = np.stack([decode_transform(b, rng) for b in blobs])
                yield {"image": torch.from_numpy(images),
                       "label": torch.from_numpy(rb.column(1).to_numpy())}


def batches(job):
    import warnings

    import torch

    # pyarrow's zero-copy arrays are read-only; the tensors are never written.
    warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
    if job["workload"] == "many":
        dataset = _Many(job["files"], job["batch_size"], job["seed"], job["columns"])
    else:
        cls = _Images if job["workload"] == "images" else _Tabular
        dataset = cls(job["files"], job["batch_size"], job["seed"])
    loader = torch.utils.data.DataLoader(dataset, batch_size=None, num_workers=job["threads"],
                                         prefetch_factor=2 if job["threads"] > 0 else None)
    count = job.get("count", "label")
    for batch in loader:
        yield len(batch[count]), batch
