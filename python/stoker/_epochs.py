"""Which epoch a loader's next iteration delivers, and where in it: the epoch rule, the position,
the iterator ``iter(loader)`` returns, and the stall meter of an iteration.

Epoch rule: an iteration delivers the epoch chosen by set_epoch() or load_state_dict(); without
such a choice, an iteration that follows a completed epoch delivers the next epoch (what
Lightning and plain ``for epoch in ...: for batch in loader`` loops expect), and one that
follows an unfinished iteration starts the same epoch again from its beginning.

The loader changes an :class:`EpochCursor` only while holding its hand-over lock (loader.py).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

from .errors import LoaderStateError

__all__ = ["MAX_EPOCH", "EpochCursor", "EpochIterator", "StallMeter"]

MAX_EPOCH = 2**63 - 1  # the engine's epoch is an int64


class EpochCursor:
    """The epoch of the running (or next) iteration and the batches of it handed out."""

    def __init__(self) -> None:
        self.epoch = 0
        self.position = 0  # batches of self.epoch handed to the caller
        self.resume_batch: Optional[int] = None  # load_state_dict's start, until iter()
        # Every batch of self.epoch has been handed out (whether or not the iterator was then
        # exhausted: Lightning stops after len(loader) batches without asking for more).
        self.done = False
        self.batches = 0  # batches of the running (or last) iteration's epoch
        self.chosen = False  # set_epoch()/load_state_dict() picked the next epoch
        # (old world size, batches each old rank delivered) while self.epoch is the rest of an
        # epoch resumed on another world size; None otherwise.
        self.elastic: Optional[tuple] = None

    def completed(self) -> bool:
        """Every batch of self.epoch was handed out, and no epoch was chosen since."""
        return self.done and not self.chosen and self.resume_batch is None

    def next_epoch(self) -> int:
        if self.completed() and self.epoch < MAX_EPOCH:
            return self.epoch + 1
        return self.epoch  # after the last epoch: the state reads (last, every batch)

    def choose(self, epoch: int) -> None:
        """set_epoch(epoch): its start."""
        self.epoch, self.chosen, self.done = epoch, True, False
        self.position, self.resume_batch, self.elastic = 0, None, None

    def resume(self, epoch: int, elastic: Optional[tuple], batch: int) -> None:
        """load_state_dict: batch ``batch`` of ``epoch`` (of its elastic rest, if any)."""
        self.epoch, self.chosen, self.done = epoch, True, False
        self.elastic, self.resume_batch, self.position = elastic, batch, batch

    def begin(self, engine: Any) -> None:
        """iter(): starts the engine on the epoch this iteration delivers, at its first batch."""
        if self.completed() and self.epoch == MAX_EPOCH:
            raise LoaderStateError(
                f"epoch {MAX_EPOCH} (2**63 - 1) was the last one an engine can deliver; "
                "choose the next with set_epoch()")
        epoch = self.next_epoch()
        if epoch != self.epoch:
            self.elastic = None  # the epoch after an elastic rest is a normal one
        self.epoch = epoch
        start = self.resume_batch if self.resume_batch is not None else 0
        self.resume_batch = None
        self.chosen = self.done = False
        if self.elastic is not None:
            self.batches = engine.start_elastic_epoch(self.epoch, self.elastic[0],
                                                      self.elastic[1], start)
        else:
            engine.start_epoch(self.epoch, start)
            self.batches = engine.num_batches
        self.position = start

    def handed_out(self) -> None:
        """One more batch went to the caller."""
        self.position += 1
        if self.position >= self.batches:
            self.done = True

    def elastic_offset(self) -> int:
        """Batches the old ranks delivered, during the rest of an epoch resumed on another
        world size (they come first in the epoch); 0 otherwise."""
        return self.elastic[0] * self.elastic[1] if self.elastic is not None else 0

    def saved(self, running: bool) -> Tuple[int, int, Optional[tuple]]:
        """(epoch, batch, elastic) of ``state_dict()``: what the caller has received (a
        completed epoch reads as the start of the next)."""
        epoch = self.next_epoch()
        if epoch != self.epoch:  # every batch of self.epoch was delivered: the next one's start
            return epoch, 0, None
        if self.resume_batch is not None:
            return epoch, self.resume_batch, self.elastic
        if not running and self.chosen:
            return epoch, 0, self.elastic
        return epoch, self.position, self.elastic


class EpochIterator:
    """What ``iter(loader)`` returns: the epoch's batches. The epoch starts (and prefetches) at
    ``iter()``; dropping or closing the iterator stops it, even before the first ``next()``."""

    __slots__ = ("_batches", "_stop")

    def __init__(self, batches: Iterator[Dict[str, Any]], stop: Callable[[], None]) -> None:
        self._batches = batches
        self._stop = stop

    def __iter__(self) -> "EpochIterator":
        return self

    def __next__(self) -> Dict[str, Any]:
        return next(self._batches)

    def close(self) -> None:
        """Ends the iteration and stops the engine's epoch (as ``break`` out of a loop does)."""
        self._batches.close()
        self._stop()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001  (interpreter exit: nothing left to stop)
            pass


class StallMeter:
    """The stall meter of the current (or last) iteration: the training loop's time, from
    ``iter()`` to now (or to the end of the epoch), and the part of it spent waiting for the
    next batch (``stats()["loop_s"]``, ``stats()["stall_fraction"]``)."""

    def __init__(self) -> None:
        self._start: Optional[float] = None
        self._end: Optional[float] = None
        self.wait_s = 0.0  # added to by the iteration (under the loader's hand-over lock)

    def start(self) -> None:
        self._start, self._end, self.wait_s = time.perf_counter(), None, 0.0

    def end(self) -> None:
        self._end = time.perf_counter()

    def read(self) -> Dict[str, float]:
        loop_s = 0.0
        if self._start is not None:
            loop_s = (self._end or time.perf_counter()) - self._start
        return {"loop_s": loop_s,
                "stall_fraction": min(1.0, self.wait_s / loop_s) if loop_s > 0 else 0.0}
