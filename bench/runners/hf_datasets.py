"""Hugging Face ``datasets``: streaming the same Parquet files, batched, torch tensors.

``load_dataset("parquet", data_files=files, split="train", streaming=True)`` reads the Parquet
files directly (no conversion to Arrow cache files); ``.iter(batch_size)`` yields Arrow-backed
batches that are turned into the same tensors as the hand-written loader. The streaming
IterableDataset is sharded over ``num_workers`` DataLoader workers, as HF's guide recommends.
"""

from __future__ import annotations

from .common import all_tabular_columns, record_batch_to_numpy

try:
    from torch.utils.data import IterableDataset as _Base
except ImportError:  # available() reports it
    _Base = object

NAME = "hf_datasets"
WORKLOADS = ("tabular-snappy", "tabular-zstd")


def available():
    try:
        import datasets  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"datasets import failed: {type(error).__name__}: {error}"
    return None


def config(job):
    return {"api": "datasets.load_dataset('parquet', streaming=True).with_format('arrow')"
                   ".iter(batch_size) in torch DataLoader workers",
            "num_workers": job["threads"], "batch_size": job["batch_size"],
            "columns": "all 225 read; features stacked in the workers"}


class _Shards(_Base):
    def __init__(self, files, batch_size):
        self.files, self.batch_size = files, batch_size

    def __iter__(self):
        import datasets
        import torch

        info = torch.utils.data.get_worker_info()
        wid, nw = (info.id, info.num_workers) if info else (0, 1)
        files = self.files[wid::nw]
        if not files:
            return
        ds = datasets.load_dataset("parquet", data_files=files, split="train", streaming=True,
                                   columns=all_tabular_columns())
        ds = ds.with_format("arrow")
        for table in ds.iter(batch_size=self.batch_size):
            rb = table.combine_chunks().to_batches()[0]
            out = record_batch_to_numpy(rb)
            yield {k: torch.from_numpy(v) for k, v in out.items()}


def batches(job):
    import torch

    loader = torch.utils.data.DataLoader(_Shards(job["files"], job["batch_size"]), batch_size=None,
                                         num_workers=job["threads"])
    for batch in loader:
        yield len(batch["label"]), batch
