"""Engine batches -> dicts of numpy arrays or torch tensors, without copying."""

from __future__ import annotations

from typing import Any, Dict

from . import _stoker
from ._ragged import Ragged

__all__ = ["to_python"]


def to_python(batch: Any, output: str) -> Dict[str, Any]:
    """One engine batch as ``{name: array}``; padded lists add ``<name>_lengths`` (and
    ``<name>_lengths_1``... for lists of lists), masks
    ``<name>_mask`` (and, for list columns, ``<name>_mask_1``... per level below the rows),
    on_error='zero' transforms ``<name>_valid``; ragged lists and strings
    become :class:`Ragged`."""
    if output == "torch":
        import torch

        convert = torch.from_dlpack

        def convert_values(column):
            values = torch.from_dlpack(column.values)
            # bfloat16 travels as int16 bits (numpy has no bfloat16).
            return values.view(torch.bfloat16) if column.bfloat16 else values
    else:
        def convert(array):
            return array

        def convert_values(column):
            return column.values
    out: Dict[str, Any] = {}
    for column in batch.columns:
        kind = column.kind
        if kind == _stoker.ColumnKind.dense:
            out[column.name] = convert_values(column)
        elif kind == _stoker.ColumnKind.padded:
            out[column.name] = convert_values(column)
            out[column.name + "_lengths"] = convert(column.lengths)
            # Lists of lists: each inner level's lengths, [B, L0, ..., Ll] (level l + 1).
            for level, lengths in enumerate(column.inner_lengths, 1):
                out[f"{column.name}_lengths_{level}"] = convert(lengths)
        else:
            label = column.annotation if kind == _stoker.ColumnKind.strings else "list"
            inner = column.inner_offsets
            if inner:
                # Lists of lists (or of strings): one Ragged per level, the innermost holding
                # the values (bytes with kind "utf8"/"binary" for strings).
                label = column.annotation if column.annotation in ("utf8", "binary") else "list"
                value = Ragged(convert_values(column), convert(inner[-1]), label)
                for offsets in reversed(inner[:-1]):
                    value = Ragged(value, convert(offsets), "list")
                out[column.name] = Ragged(value, convert(column.offsets), "list")
            else:
                out[column.name] = Ragged(convert_values(column), convert(column.offsets), label)
        if column.has_mask:
            out[column.name + "_mask"] = convert(column.mask)
            # Lists: validity of each level below the rows (inner lists, strings, elements).
            for level, mask in enumerate(column.element_masks, 1):
                out[f"{column.name}_mask_{level}"] = convert(mask)
        if column.has_valid:
            out[column.name + "_valid"] = convert(column.valid)
    return out
