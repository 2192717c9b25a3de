"""``stoker.IterableDataset``: a Loader behind ``torch.utils.data.DataLoader``.

A stoker Loader already runs its own worker threads and delivers whole batches, so DataLoader
workers are not needed. Programs that are built around a DataLoader (``num_workers``,
``pin_memory``, a framework that insists on one) can still use stoker through this adaptor:

- The Loader is created lazily inside each DataLoader worker's ``__iter__`` (never inherited
  through ``fork()``), with ``num_threads`` divided among the workers.
- With ``num_workers = W`` on rank ``r`` of ``R``, worker ``w`` reads shard ``r * W + w`` of
  ``R * W``: every row once per epoch across ranks and workers, the same batch count everywhere
  (the DataLoader interleaves workers round-robin, so the order stays deterministic).
- Use ``DataLoader(dataset, batch_size=None)``: stoker's batches are already batched.
- ``augment=`` passes through to each Loader (with the worker's shard as its rank, so the
  augmentation keys stay distinct). ``python_workers > 0`` needs ``num_workers=0``: DataLoader
  workers are daemonic processes, which cannot start processes of their own.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional

import torch.utils.data

from ._distributed import default_num_threads, resolve_rank
from .errors import InvalidOptionError
from .loader import Loader

__all__ = ["IterableDataset"]


class IterableDataset(torch.utils.data.IterableDataset):
    """An ``IterableDataset`` of stoker batches, safe with any ``num_workers``.

    Args:
        source: As for :class:`stoker.Loader`.
        **loader_options: Any :class:`stoker.Loader` argument except ``output`` (always torch).
            ``seed`` is required when the dataset is read by several workers or ranks (each
            worker builds its own Loader; they must agree on the seed). ``rank`` and
            ``world_size`` default as for Loader.

    ``set_epoch(epoch)`` selects the epoch the next iteration of every worker delivers (call it
    before each epoch, as with ``DistributedSampler``; with ``persistent_workers=True`` call it
    before creating the iterator). There is no ``len()``: the batch count depends on the
    DataLoader's ``num_workers``, which the dataset does not know; ``len(stoker.Loader(...))`` with
    ``world_size = ranks x workers`` times the workers gives it.
    """

    def __init__(self, source: Any, **loader_options: Any) -> None:
        super().__init__()
        if "output" in loader_options and loader_options["output"] != "torch":
            raise InvalidOptionError("IterableDataset always delivers torch tensors (output='torch')")
        loader_options.pop("output", None)
        rank, world = resolve_rank(loader_options.pop("rank", None),
                                   loader_options.pop("world_size", None))
        self._source = source
        self._options = loader_options
        self._rank, self._world = rank, world
        self._epoch: Optional[int] = None

    def set_epoch(self, epoch: int) -> None:
        self._epoch = int(epoch)

    def _shard(self) -> tuple:
        info = torch.utils.data.get_worker_info()
        workers, worker = (info.num_workers, info.id) if info is not None else (1, 0)
        return self._rank * workers + worker, self._world * workers, workers

    def _make_loader(self) -> Loader:
        rank, world, workers = self._shard()
        options = dict(self._options)
        if world > 1 and options.get("seed") is None:
            raise InvalidOptionError(
                f"IterableDataset read by {world} workers/ranks needs seed=: each worker builds "
                "its own Loader, and they must share one seed")
        if options.get("num_threads") is None:
            options["num_threads"] = max(1, default_num_threads() // workers)
        return Loader(self._source, rank=rank, world_size=world, output="torch", **options)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        loader = self._make_loader()
        try:
            if self._epoch is not None:
                loader.set_epoch(self._epoch)
            yield from loader
        finally:
            loader.close()
