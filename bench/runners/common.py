"""Helpers shared by the runners: feature lists, padding variable-length lists, image transforms."""

from __future__ import annotations

import io
import math
import random
from typing import Dict, List, Tuple

import numpy as np

from ..generators import tabular_columns

IMAGE_SIZE = 224
MEAN = np.array([0.485, 0.456, 0.406], np.float32) * 255
STD = np.array([0.229, 0.224, 0.225], np.float32) * 255


def feature_names() -> List[str]:
    cols = tabular_columns()
    return cols["float_features"] + cols["int_features"]


def other_columns() -> List[str]:
    cols = tabular_columns()
    return cols["label"] + cols["embeddings"] + cols["varlen"]


def all_tabular_columns() -> List[str]:
    return feature_names() + other_columns()


def pad_list_array(arr) -> Tuple[np.ndarray, np.ndarray]:
    """A pyarrow ListArray -> (values padded to the longest row [B, L], lengths [B]) in numpy."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    lengths = pc.list_value_length(arr).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
    flat = pc.list_flatten(arr).to_numpy(zero_copy_only=False)
    width = int(lengths.max()) if len(lengths) else 0
    out = np.zeros((len(lengths), width), dtype=flat.dtype if flat.size else np.int64)
    if flat.size:
        rows = np.repeat(np.arange(len(lengths)), lengths)
        starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
        out[rows, np.arange(flat.size) - starts] = flat
    return out, lengths


def fixed_list_to_numpy(arr) -> np.ndarray:
    """A pyarrow FixedSizeListArray (or chunked) -> numpy [B, D]."""
    import pyarrow as pa

    if isinstance(arr, pa.ChunkedArray):
        arr = arr.combine_chunks()
    dim = arr.type.list_size
    values = arr.flatten().to_numpy(zero_copy_only=False)
    return values.reshape(len(arr), dim)


def record_batch_to_numpy(rb) -> Dict[str, np.ndarray]:
    """What a hand-written loader builds: features [B, F] float32 plus the other columns."""
    feats = feature_names()
    names = rb.schema.names
    features = np.empty((rb.num_rows, len(feats)), dtype=np.float32)
    for j, name in enumerate(feats):
        features[:, j] = rb.column(names.index(name)).to_numpy(zero_copy_only=False)
    out = {"features": features,
           "label": rb.column(names.index("label")).to_numpy(zero_copy_only=False)}
    for name in tabular_columns()["embeddings"]:
        out[name] = fixed_list_to_numpy(rb.column(names.index(name)))
    tags, lengths = pad_list_array(rb.column(names.index("tags")))
    out["tags"] = tags
    out["tags_lengths"] = lengths
    return out


# ---------------------------------------------------------------------------- image transforms

def random_crop_box(width: int, height: int, rng: random.Random, scale=(0.08, 1.0),
                    ratio=(3 / 4, 4 / 3)) -> Tuple[int, int, int, int]:
    """torchvision's RandomResizedCrop sampling rule: (x, y, w, h), the whole image after 10
    misses."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(*scale)
        aspect = math.exp(rng.uniform(math.log(ratio[0]), math.log(ratio[1])))
        w = int(round(math.sqrt(target * aspect)))
        h = int(round(math.sqrt(target / aspect)))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    return 0, 0, width, height


def random_resized_crop_flip(img, rng: random.Random, size: int = IMAGE_SIZE,
                             scale=(0.08, 1.0), ratio=(3 / 4, 4 / 3)):
    """torchvision's RandomResizedCrop (bilinear) + RandomHorizontalFlip, on a PIL image."""
    from PIL import Image

    x, y, w, h = random_crop_box(img.size[0], img.size[1], rng, scale, ratio)
    out = img.resize((size, size), Image.BILINEAR, box=(x, y, x + w, y + h))
    if rng.random() < 0.5:
        out = out.transpose(Image.FLIP_LEFT_RIGHT)
    return out


def decode_transform(blob: bytes, rng: random.Random) -> np.ndarray:
    """JPEG bytes -> decode -> random-resized-crop 224 -> flip -> CHW uint8."""
    from PIL import Image

    img = Image.open(io.BytesIO(blob))
    img = img.convert("RGB")
    out = random_resized_crop_flip(img, rng)
    return np.asarray(out).transpose(2, 0, 1)


def normalise(batch_uint8: np.ndarray) -> np.ndarray:
    """[B, 3, H, W] uint8 -> float32 normalised with the ImageNet mean and std."""
    return (batch_uint8.astype(np.float32) - MEAN[None, :, None, None]) / STD[None, :, None, None]
