"""The transform every Python-side runner of ``bench.transforms`` runs, in its workers: the same
numpy/pandas code for stoker ``transform=``, Petastorm's TransformSpec and the DataLoader."""

from __future__ import annotations

from typing import Dict

import numpy as np

from ..transforms import BUCKETS, MAX_TAGS, cat_names, float_names, moments

_MOMENTS = moments()


def pad_lists(values: np.ndarray):
    """An object array of 1-D int64 arrays -> (padded [n, MAX_TAGS], lengths [n])."""
    lengths = np.fromiter((len(v) for v in values), dtype=np.int64, count=len(values))
    padded = np.zeros((len(values), MAX_TAGS), dtype=np.int64)
    if len(values) and lengths.sum():
        flat = np.concatenate(list(values))
        rows = np.repeat(np.arange(len(values)), lengths)
        cols = np.arange(flat.size) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        padded[rows, cols] = flat
    return padded, lengths


def hash_strings(values: np.ndarray) -> np.ndarray:
    import pandas as pd

    return (pd.util.hash_array(np.asarray(values, dtype=object)) % BUCKETS).astype(np.int64)


def numpy_transform(arrays: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """Raw columns (floats 1-D, strings as object arrays, tags as an object array of arrays) ->
    features [n, 200] float32 standardised, ids [n, 20] int64, tags padded + lengths, label."""
    n = len(arrays["label"])
    features = np.empty((n, len(_MOMENTS)), dtype=np.float32)
    for j, (name, (mean, std)) in enumerate(_MOMENTS.items()):
        features[:, j] = (arrays[name] - np.float32(mean)) / np.float32(std)
    ids = np.empty((n, len(cat_names())), dtype=np.int64)
    for j, name in enumerate(cat_names()):
        ids[:, j] = hash_strings(arrays[name])
    tags, lengths = pad_lists(arrays["tags"])
    return {"features": features, "ids": ids, "tags": tags, "tags_lengths": lengths,
            "label": np.asarray(arrays["label"], dtype=np.int64)}


def pandas_transform(df):
    """The same work on a pandas DataFrame, as a Petastorm TransformSpec function."""
    for name, (mean, std) in _MOMENTS.items():
        df[name] = ((df[name].to_numpy() - np.float32(mean)) / np.float32(std)).astype(np.float32)
    for name in cat_names():
        df[name] = hash_strings(df[name].to_numpy())
    tags, lengths = pad_lists(df["tags"].to_numpy())
    df["tags"] = list(tags)
    df["tags_lengths"] = lengths
    return df


def columns():
    return float_names() + cat_names() + ["tags", "label"]
