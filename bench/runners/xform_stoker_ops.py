"""stoker's native ops on the transforms workload: standardize per feature before stacking,
hash_bucket per string column, tags padded; everything in C++ on the workers."""

from __future__ import annotations

from ..transforms import BUCKETS, cat_names, float_names, moments
from .xform_stoker_plain import available  # noqa: F401

NAME = "xform_stoker_ops"
WORKLOADS = ("tabular-xform",)


def options(job):
    from stoker import ops

    transforms = {name: [ops.standardize(mean, std)] for name, (mean, std) in moments().items()}
    transforms.update({name: [ops.hash_bucket(BUCKETS)] for name in cat_names()})
    return dict(features=float_names(), columns=cat_names() + ["tags", "label"], lists="padded",
                transforms=transforms, batch_size=job["batch_size"], seed=job["seed"],
                drop_last=False, num_threads=job["threads"], output="torch", rank=0, world_size=1)


def config(job):
    return {"api": "stoker.Loader(transforms=...)",
            "features": "200 float32, standardize(mean, std) each, stacked to [B, 200]",
            "ids": "hash_bucket(2**20) per string column (FNV-1a), stacked to [B, 20] by torch.stack",
            **{k: v for k, v in options(job).items() if k not in ("features", "columns", "transforms")}}


def batches(job):
    import stoker
    import torch

    cats = cat_names()
    with stoker.Loader(job["path"], **options(job)) as loader:
        for batch in loader:
            ids = torch.stack([batch.pop(c) for c in cats], 1)
            yield len(batch["label"]), {**batch, "ids": ids}
