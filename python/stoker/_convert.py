"""Engine batches -> dicts of numpy arrays or torch tensors, without copying."""

from __future__ import annotations

from typing import Any, Dict

from . import _stoker
from ._ragged import Ragged

__all__ = ["to_python"]


def to_python(batch: Any, output: str) -> Dict[str, Any]:
    """One engine batch as ``{name: array}``; padded lists add ``<name>_lengths``, masks
    ``<name>_mask``; ragged lists and strings become :class:`Ragged`."""
    if output == "torch":
        import torch

        convert = torch.from_dlpack
    else:
        def convert(array):
            return array
    out: Dict[str, Any] = {}
    for column in batch.columns:
        kind = column.kind
        if kind == _stoker.ColumnKind.dense:
            out[column.name] = convert(column.values)
        elif kind == _stoker.ColumnKind.padded:
            out[column.name] = convert(column.values)
            out[column.name + "_lengths"] = convert(column.lengths)
        else:
            label = column.annotation if kind == _stoker.ColumnKind.strings else "list"
            out[column.name] = Ragged(convert(column.values), convert(column.offsets), label)
        if column.has_mask:
            out[column.name + "_mask"] = convert(column.mask)
    return out
