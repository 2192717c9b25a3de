"""Ragged: a batch of variable-length rows as flat values plus offsets."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["Ragged", "to_pylist"]


class Ragged:
    """Rows of different lengths: row ``i`` is ``values[offsets[i]:offsets[i + 1]]``.

    Strings and binary columns arrive as a ``Ragged`` of ``uint8`` bytes with ``kind`` ``"utf8"`` or
    ``"binary"``; variable-length list columns with ``lists="ragged"`` as a ``Ragged`` of their
    value dtype. ``values`` and ``offsets`` are numpy arrays (or torch tensors with
    ``output="torch"``) viewing stoker's batch memory without a copy.

    Lists of lists and lists of strings (``lists="ragged"``) nest: ``values`` is itself a
    ``Ragged`` whose rows are the inner lists (or the strings), so row ``i`` is the inner rows
    ``offsets[i]`` to ``offsets[i + 1]``; ``flat_values`` and ``nested_offsets`` give the
    innermost values and every level's offsets (outer first).

    With the column in ``null_mask``, the batch's ``<name>_mask_1``, ``<name>_mask_2``... are
    flat bool arrays aligned with each level's items (``<name>_mask_1`` has ``offsets[-1]``
    entries: the values of a list of numbers, the inner lists of a list of lists, the strings of a
    list of strings), ``False`` where the item is null (it is then empty, or 0).
    """

    __slots__ = ("values", "offsets", "kind")

    def __init__(self, values: Any, offsets: Any, kind: str = "list") -> None:
        self.values = values
        self.offsets = offsets
        self.kind = kind

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> Any:
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(f"row {i} out of range for {n} rows")
        begin, end = int(self.offsets[i]), int(self.offsets[i + 1])
        if isinstance(self.values, Ragged):
            return [self.values[j] for j in range(begin, end)]
        row = self.values[begin:end]
        if self.kind == "utf8":
            return bytes(np.asarray(row)).decode("utf-8")
        if self.kind == "binary":
            return bytes(np.asarray(row))
        return row

    def tolist(self) -> list:
        """Python objects: ``str`` for utf8, ``bytes`` for binary, lists of numbers otherwise."""
        offsets = np.asarray(self.offsets).tolist()
        if isinstance(self.values, Ragged):
            inner = self.values.tolist()
            return [inner[begin:end] for begin, end in zip(offsets, offsets[1:])]
        if self.kind in ("utf8", "binary"):
            # One bytes object for the batch, then cheap slices (not one numpy view per row).
            data = np.asarray(self.values).tobytes()
            rows = [data[begin:end] for begin, end in zip(offsets, offsets[1:])]
            return [row.decode("utf-8") for row in rows] if self.kind == "utf8" else rows
        values = np.asarray(self.values)
        return [values[begin:end].tolist() for begin, end in zip(offsets, offsets[1:])]

    @property
    def flat_values(self) -> Any:
        """The innermost values (the same as ``values`` for one level)."""
        values = self.values
        while isinstance(values, Ragged):
            values = values.values
        return values

    @property
    def nested_offsets(self) -> list:
        """Every level's offsets, outer first (``[offsets]`` for one level)."""
        out, level = [], self
        while isinstance(level, Ragged):
            out.append(level.offsets)
            level = level.values
        return out

    def __repr__(self) -> str:
        return f"Ragged(kind={self.kind!r}, rows={len(self)}, values={len(self.values)})"


def to_pylist(column: Any) -> list:
    """Turns any batch column (array, tensor or :class:`Ragged`) into a Python list."""
    if isinstance(column, Ragged):
        return column.tolist()
    return column.tolist()
