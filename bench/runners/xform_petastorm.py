"""Petastorm with the study's settings (thread pool, convert_early_to_numpy, seed) and the
transform as a pandas TransformSpec in its workers; features and ids stacked in the consumer."""

from __future__ import annotations

import numpy as np

from . import _petastorm_common
from ._xform_common import columns, pandas_transform
from .petastorm_fixed import _kwargs  # the study's settings, as in the tabular runner
from ..transforms import MAX_TAGS, cat_names, float_names

NAME = "xform_petastorm"
WORKLOADS = ("tabular-xform",)
available = _petastorm_common.available


def config(job):
    return {"api": "petastorm.make_batch_reader(transform_spec=...) + BatchedDataLoader",
            **_kwargs(job), "batch_size": job["batch_size"],
            "transform_spec": "bench/runners/_xform_common.py pandas_transform",
            "stacking": "features [B, 200] and ids [B, 20] in the consumer"}


def batches(job):
    import torch
    from petastorm import TransformSpec, make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    from . import _petastorm_compat

    _petastorm_compat.apply()
    spec = TransformSpec(pandas_transform,
                         edit_fields=[(c, np.int64, (), False) for c in cat_names()] +
                         [("tags", np.int64, (MAX_TAGS,), False),
                          ("tags_lengths", np.int64, (), False)])
    floats, cats = float_names(), cat_names()
    with make_batch_reader("file://" + job["path"], schema_fields=columns(), num_epochs=1,
                           transform_spec=spec, **_kwargs(job)) as reader:
        for batch in BatchedDataLoader(reader, batch_size=job["batch_size"]):
            n = len(batch["label"])
            yield n, {"features": torch.stack([batch[f] for f in floats], 1),
                      "ids": torch.stack([batch[c] for c in cats], 1), "tags": batch["tags"],
                      "tags_lengths": batch["tags_lengths"], "label": batch["label"]}
