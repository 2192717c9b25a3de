"""A torch DataLoader whose workers read row groups with pyarrow and run the numpy transform."""

from __future__ import annotations

import random

from ._xform_common import columns, numpy_transform
from .torch_dataloader import _Sharded, available  # noqa: F401

NAME = "xform_dataloader"
WORKLOADS = ("tabular-xform",)


def config(job):
    return {"api": "torch.utils.data.DataLoader(IterableDataset)", "num_workers": job["threads"],
            "reader": "ParquetFile.iter_batches(batch_size, columns) per row group",
            "transform": "bench/runners/_xform_common.py numpy_transform per batch, in the workers"}


class _Transformed(_Sharded):
    def __iter__(self):
        import pyarrow.parquet as pq
        import torch

        _, mine = self._my_row_groups()
        for path, group in mine:
            pf = pq.ParquetFile(path)
            for rb in pf.iter_batches(batch_size=self.batch_size, row_groups=[group],
                                      columns=columns(), use_threads=False):
                arrays = {name: rb.column(i).to_numpy(zero_copy_only=False)
                          for i, name in enumerate(rb.schema.names)}
                yield {k: torch.from_numpy(v) for k, v in numpy_transform(arrays).items()}


def batches(job):
    import torch

    random.seed(job["seed"])
    loader = torch.utils.data.DataLoader(_Transformed(job["files"], job["batch_size"], job["seed"]),
                                         batch_size=None, num_workers=job["threads"],
                                         prefetch_factor=2)
    for batch in loader:
        yield len(batch["label"]), batch
