"""Petastorm's ``petastorm.pytorch.DataLoader`` and ``BatchedDataLoader`` over stoker readers.

Same arguments and outputs (a dict of tensors per batch; strings stay lists; bool becomes uint8,
uint16 int32, uint32 int64, as Petastorm does). Batches are cut from the reader's column batches
without building a Python object per row, unless a ``collate_fn`` other than the default is
given. The shuffling queue (``shuffling_queue_capacity > 0``) draws from a generator seeded with
the reader's seed, so the order is reproducible (Petastorm's is not).
"""

from __future__ import annotations

import collections.abc
import decimal
from typing import Any, Callable, Dict, Iterator, List, Optional

import numpy as np

from ..errors import InvalidOptionError, LoaderStateError
from . import Reader

__all__ = ["DataLoader", "BatchedDataLoader", "decimal_friendly_collate"]

_SANITIZE = {np.dtype(np.uint16): np.int32, np.dtype(np.uint32): np.int64,
             np.dtype(np.bool_): np.uint8}


def decimal_friendly_collate(batch: List[Any]) -> Any:
    """Petastorm's default collate: torch's ``default_collate`` that leaves Decimal and strings
    as lists."""
    from torch.utils.data.dataloader import default_collate

    first = batch[0]
    if isinstance(first, decimal.Decimal) or isinstance(first, (str, bytes)):
        return batch
    if isinstance(first, collections.abc.Mapping):
        return {key: decimal_friendly_collate([d[key] for d in batch]) for key in first}
    if isinstance(first, collections.abc.Sequence):
        return [decimal_friendly_collate(list(samples)) for samples in zip(*batch)]
    return default_collate(batch)


def _sanitize_array(name: str, value: Any) -> Any:
    if isinstance(value, np.ndarray):
        target = _SANITIZE.get(value.dtype)
        if target is not None:
            return value.astype(target)
        if value.dtype.kind in "SUO":
            raise TypeError(f"Pytorch does not support arrays of string or object classes. "
                            f"Found in field {name}.")
    return value


def _sanitize_row(row: Dict[str, Any]) -> Dict[str, Any]:
    for name, value in row.items():
        if value is None:
            raise TypeError(f"Pytorch does not support nullable fields. Found None in {name}")
        if isinstance(value, np.bool_):
            row[name] = np.uint8(value)
        else:
            row[name] = _sanitize_array(name, value)
    return row


def _to_tensor_column(name: str, value: Any) -> Any:
    import torch

    if isinstance(value, np.ndarray) and value.dtype.kind not in "SUO":
        return torch.as_tensor(_sanitize_array(name, value))
    values = list(value)
    if any(v is None for v in values):
        raise TypeError(f"Pytorch does not support nullable fields. Found None in {name}")
    if values and isinstance(values[0], (str, bytes)):
        return values
    if values and all(isinstance(v, np.ndarray) for v in values):
        if len({v.shape for v in values}) == 1:
            return torch.as_tensor(_sanitize_array(name, np.stack(values)))
        raise TypeError(f"field {name!r} has rows of different shapes; pass a collate_fn "
                        "(or a transform) that makes them one shape")
    return torch.as_tensor(np.asarray(values))


def _concat(parts: List[Any]) -> Any:
    if all(isinstance(p, np.ndarray) for p in parts):
        return parts[0] if len(parts) == 1 else np.concatenate(parts)
    out: List[Any] = []
    for p in parts:
        out.extend(list(p))
    return out


class _Base:
    def __init__(self, reader: Reader, batch_size: int, shuffling_queue_capacity: int) -> None:
        if not isinstance(reader, Reader):
            raise InvalidOptionError(
                "reader must come from stoker.petastorm.make_reader / make_batch_reader, got "
                f"{type(reader).__name__}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise InvalidOptionError(f"batch_size must be a positive integer, got {batch_size!r}")
        if isinstance(shuffling_queue_capacity, bool) or not isinstance(
                shuffling_queue_capacity, int) or shuffling_queue_capacity < 0:
            raise InvalidOptionError(
                f"shuffling_queue_capacity must be a non-negative integer, got "
                f"{shuffling_queue_capacity!r}")
        self.reader = reader
        self.batch_size = batch_size
        self.shuffling_queue_capacity = shuffling_queue_capacity
        self._in_iter: Optional[bool] = None
        self._passes = 0

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        if self._in_iter:
            raise LoaderStateError(
                "You must finish a full pass of the DataLoader before making another pass from "
                "the beginning (or create a new reader and DataLoader)")
        if self._in_iter is not None:
            self.reader.reset()
        self._in_iter = True
        self._passes += 1
        return self._guarded()

    def _guarded(self) -> Iterator[Dict[str, Any]]:
        try:
            yield from self._iter_impl()
        finally:
            self._in_iter = False

    def _rng(self) -> np.random.Generator:
        return np.random.default_rng([self.reader.seed, self._passes])

    def _column_chunks(self) -> Iterator[Dict[str, Any]]:
        """The reader's column batches, through the shuffling queue when one is asked for."""
        columns = self.reader._column_batches()
        if not self.shuffling_queue_capacity:
            yield from columns
            return
        # A buffer of at least `capacity` rows; each step emits a random batch_size of them.
        rng = self._rng()
        held: Dict[str, Any] = {}
        size = 0
        for chunk in columns:
            held = {n: _concat([held[n], v]) if n in held else v for n, v in chunk.items()}
            size = len(next(iter(held.values())))
            while size >= self.shuffling_queue_capacity + self.batch_size:
                held, size, out = self._draw(held, size, rng)
                yield out
        while size:
            held, size, out = self._draw(held, size, rng)
            yield out

    def _draw(self, held: Dict[str, Any], size: int, rng: np.random.Generator) -> tuple:
        take = min(self.batch_size, size)
        picked = rng.choice(size, take, replace=False)
        rest = np.setdiff1d(np.arange(size), picked, assume_unique=True)

        def select(value: Any, index: np.ndarray) -> Any:
            return value[index] if isinstance(value, np.ndarray) else [value[i] for i in index]

        out = {n: select(v, picked) for n, v in held.items()}
        return {n: select(v, rest) for n, v in held.items()}, size - take, out

    def _rebatched(self) -> Iterator[Dict[str, Any]]:
        """Column dicts of exactly batch_size rows (the last may be short)."""
        pending: Dict[str, List[Any]] = {}
        count = 0
        for chunk in self._column_chunks():
            n = len(next(iter(chunk.values())))
            start = 0
            while start < n:
                take = min(self.batch_size - count, n - start)
                for name, value in chunk.items():
                    pending.setdefault(name, []).append(value[start:start + take])
                count += take
                start += take
                if count == self.batch_size:
                    yield {name: _concat(parts) for name, parts in pending.items()}
                    pending, count = {}, 0
        if count:
            yield {name: _concat(parts) for name, parts in pending.items()}

    def __enter__(self) -> "_Base":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.reader.stop()
        self.reader.join()

    def terminate(self) -> None:
        self.reader.stop()


class DataLoader(_Base):
    """``petastorm.pytorch.DataLoader(reader, batch_size=1, collate_fn=decimal_friendly_collate,
    shuffling_queue_capacity=0)`` over a ``stoker.petastorm`` reader."""

    def __init__(self, reader: Reader, batch_size: int = 1,
                 collate_fn: Callable[[List[Any]], Any] = decimal_friendly_collate,
                 shuffling_queue_capacity: int = 0) -> None:
        super().__init__(reader, batch_size, shuffling_queue_capacity)
        # A make_batch_reader reader works too: its batches are cut into rows, as in Petastorm.
        self.collate_fn = collate_fn

    def _iter_impl(self) -> Iterator[Any]:
        if self.collate_fn is decimal_friendly_collate:
            for columns in self._rebatched():
                yield {n: _to_tensor_column(n, v) for n, v in columns.items()}
            return
        # A custom collate sees what Petastorm gives it: a list of row dicts.
        for columns in self._rebatched():
            names = list(columns)
            rows = [_sanitize_row(dict(zip(names, values)))
                    for values in zip(*(list(columns[n]) for n in names))]
            yield self.collate_fn(rows)


class BatchedDataLoader(_Base):
    """``petastorm.pytorch.BatchedDataLoader(reader, batch_size=1, transform_fn=None,
    shuffling_queue_capacity=0)`` over a ``stoker.petastorm.make_batch_reader`` (or
    ``make_reader``) reader."""

    def __init__(self, reader: Reader, batch_size: int = 1,
                 transform_fn: Optional[Callable[[Dict[str, Any]], Any]] = None,
                 shuffling_queue_capacity: int = 0) -> None:
        super().__init__(reader, batch_size, shuffling_queue_capacity)
        self.transform_fn = transform_fn

    def _iter_impl(self) -> Iterator[Any]:
        for columns in self._rebatched():
            batch = {n: _to_tensor_column(n, v) for n, v in columns.items()}
            yield self.transform_fn(batch) if self.transform_fn is not None else batch
