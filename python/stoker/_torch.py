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
from ._option_names import check_names, parameters
from .errors import InvalidOptionError
from .loader import Loader

__all__ = ["IterableDataset"]

_PER_BATCH_ONLY = ("augment", "python_workers", "python_start_method", "device", "pin_memory")


class IterableDataset(torch.utils.data.IterableDataset):
    """An ``IterableDataset`` of stoker batches, safe with any ``num_workers``.

    Args:
        source: As for :class:`stoker.Loader`.
        num_workers: The DataLoader's ``num_workers`` (default 0), for ``len()`` only: the batch
            count of one rank depends on how many workers share it. An iteration whose
            DataLoader runs a different number of workers after ``len()`` was taken raises
            ``InvalidOptionError`` instead of delivering a count that differs from ``len()``.
        **loader_options: Any :class:`stoker.Loader` argument except ``output`` (always torch).
            ``seed`` is required when the dataset is read by several workers or ranks (each
            worker builds its own Loader; they must agree on the seed). ``rank`` and
            ``world_size`` default as for Loader.

    ``set_epoch(epoch)`` selects the epoch the next iteration of every worker delivers (call it
    before each epoch, as with ``DistributedSampler``; with ``persistent_workers=True`` call it
    before creating the iterator). ``len()`` is the batches one rank's DataLoader delivers per
    epoch (it reads the footers once, on first use).
    """

    def __init__(self, source: Any, num_workers: int = 0, **loader_options: Any) -> None:
        super().__init__()
        check_names(loader_options, [n for n in parameters(Loader.__init__) if n != "source"],
                    "stoker.IterableDataset()")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise InvalidOptionError(
                f"num_workers (the DataLoader's, for len()) must be an int >= 0, got "
                f"{num_workers!r}")
        self._num_workers = num_workers
        self._length: Optional[int] = None
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
        if self._length is not None and workers != max(1, self._num_workers):
            raise InvalidOptionError(
                f"IterableDataset(num_workers={self._num_workers}) reported len() = "
                f"{self._length}, but the DataLoader runs {workers if info else 0} workers: give "
                "IterableDataset the DataLoader's num_workers")
        return self._rank * workers + worker, self._world * workers, workers

    def __len__(self) -> int:
        """Batches per epoch of this rank's DataLoader: every worker delivers the same count."""
        if self._length is None:
            workers = max(1, self._num_workers)
            # The count depends on the rows and the batching, not on the seed or the callables
            # that run per batch (augment= in processes would start them here).
            options = {k: v for k, v in self._options.items() if k not in _PER_BATCH_ONLY}
            options["seed"] = options.get("seed") or 0
            options.setdefault("num_threads", 1)
            with Loader(self._source, rank=self._rank * workers,
                        world_size=self._world * workers, **options) as loader:
                self._length = workers * len(loader)
        return self._length

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
