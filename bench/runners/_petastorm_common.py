"""Shared by the two Petastorm runners: make_batch_reader + BatchedDataLoader on tabular-wide.

Petastorm cannot batch a variable-length list into a tensor (its converter insists that every
row of a list column has the same length), so, as its documentation suggests, a TransformSpec
pads ``tags`` to the dataset's longest row (16) in the workers, on the pandas DataFrame, and adds
``tags_lengths``. The 220 feature columns arrive as separate tensors and are stacked into one
[B, 220] float32 tensor in the consumer (Petastorm has no stacking of its own).

The study's many-separate-outputs workload (``job["workload"] == "many"``, ``job["columns"]``):
plain numeric columns, no TransformSpec, every column delivered as its own tensor.
"""

from __future__ import annotations

import numpy as np

from .common import all_tabular_columns, feature_names

MAX_TAGS = 16


def available():
    try:
        from . import _petastorm_compat

        _petastorm_compat.apply()
        import petastorm  # noqa: F401
        from petastorm.pytorch import BatchedDataLoader  # noqa: F401
    except Exception as error:  # noqa: BLE001
        return f"petastorm import failed: {type(error).__name__}: {error}"
    return None


def _pad_tags(df):
    values = df["tags"].to_numpy()
    lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    padded = np.zeros((len(values), MAX_TAGS), dtype=np.int64)
    if len(values):
        flat = np.concatenate(values)
        rows = np.repeat(np.arange(len(values)), lengths)
        cols = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        padded[rows, cols] = flat
    df["tags"] = list(padded)
    df["tags_lengths"] = lengths
    return df


def transform_spec():
    from petastorm import TransformSpec

    return TransformSpec(_pad_tags, edit_fields=[("tags", np.int64, (MAX_TAGS,), False),
                                                 ("tags_lengths", np.int64, (), False)])


def batches(job, reader_kwargs, loader_kwargs):
    import torch
    from petastorm import make_batch_reader
    from petastorm.pytorch import BatchedDataLoader

    from . import _petastorm_compat

    _petastorm_compat.apply()
    url = "file://" + job["path"]
    if job.get("workload") == "many":
        columns, count = job["columns"], job["count"]
        with make_batch_reader(url, schema_fields=columns, num_epochs=1, **reader_kwargs) as reader:
            loader = BatchedDataLoader(reader, batch_size=job["batch_size"], **loader_kwargs)
            for batch in loader:
                yield len(batch[count]), {name: batch[name] for name in columns}
        return
    feats = feature_names()
    with make_batch_reader(url, schema_fields=all_tabular_columns(), num_epochs=1,
                           transform_spec=transform_spec(), **reader_kwargs) as reader:
        loader = BatchedDataLoader(reader, batch_size=job["batch_size"], **loader_kwargs)
        for batch in loader:
            n = len(batch["label"])
            features = torch.empty((n, len(feats)), dtype=torch.float32)
            for j, name in enumerate(feats):
                features[:, j] = batch[name]
            out = {"features": features, "label": batch["label"], "emb16": batch["emb16"],
                   "emb64": batch["emb64"], "tags": batch["tags"],
                   "tags_lengths": batch["tags_lengths"]}
            yield n, out
