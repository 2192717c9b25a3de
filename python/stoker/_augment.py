"""``augment=``: the user's per-batch callable, run ahead of the training loop.

Batch ``i`` of an epoch (counted from the epoch's start on this rank) is augmented with
``fn(batch, augment_rng((seed, epoch, global_index)))`` where ``global_index = i * world_size +
rank`` (plus the batches the old ranks delivered, during the rest of an epoch resumed on another
world size). The key depends on nothing else, so a batch's augmentation is the same across
``num_threads``, ``python_workers``, cache states and resume.

The calls run on a few background threads (thread mode) or through the process pool
(``python_workers``), at most ``depth`` batches ahead of the consumer, and come back in order. The
output schema (keys, dtypes, per-row shapes) is checked on the consumer's thread, in batch order,
so the error for a bad batch does not depend on which call finished first.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from concurrent.futures import Future, TimeoutError as FutureTimeout
from typing import Any, Callable, Dict, Iterator, Optional, Tuple

import numpy as np

from ._ragged import Ragged
from .errors import TransformError

__all__ = ["AugmentStage"]

# The consumer checks this often, while it waits for a batch, whether the loader was closed or
# the iteration ended (and lets Python deliver Ctrl-C).
_POLL_S = 0.1


class _Pool:
    """Daemon threads running submitted calls; never joined, so exit and close stay prompt."""

    def __init__(self, threads: int) -> None:
        self._queue: "queue.SimpleQueue[Any]" = queue.SimpleQueue()
        self._threads = threads
        for index in range(threads):
            threading.Thread(target=self._work, daemon=True,
                             name=f"stoker-augment-{index}").start()

    def _work(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            future, fn, args = item
            del item
            if future.set_running_or_notify_cancel():
                try:
                    future.set_result(fn(*args))
                except BaseException as error:
                    future.set_exception(error)
            del future, fn, args  # drop the batch before waiting for the next one

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future:
        future: Future = Future()
        self._queue.put((future, fn, args))
        return future

    def shutdown(self) -> None:
        for _ in range(self._threads):
            self._queue.put(None)


def _describe(value: Any) -> Optional[tuple]:
    if isinstance(value, np.ndarray):
        return ("array", value.dtype, value.shape[1:])
    if isinstance(value, Ragged) and isinstance(value.offsets, np.ndarray):
        # A nested Ragged (lists of lists, lists of strings) is described level by level.
        inner = _describe(value.values)
        if inner is not None:
            return ("ragged", value.kind, inner, value.offsets.dtype)
    return None


def _show(description: tuple) -> str:
    if description[0] == "array":
        return f"dtype {description[1]}, rows of shape {tuple(description[2])}"
    _, kind, inner, offsets = description
    if inner[0] == "array":
        return (f"Ragged(kind={kind!r}) of {inner[1]}, rows of shape {tuple(inner[2])}, "
                f"offsets {offsets}")
    return f"Ragged(kind={kind!r}) of [{_show(inner)}], offsets {offsets}"


class AugmentStage:
    """Runs ``augment=`` through a runner (thread or process mode) ahead of the consumer."""

    def __init__(self, runner: Any, threads: int, counter: Any = None) -> None:
        self._runner = runner
        self._threads = threads
        self._counter = counter  # a StageCounter (waits) or None
        self._depth = threads + 1  # every thread busy, and one result waiting
        self._schema: Optional[Dict[str, tuple]] = None

    def _check(self, out: Dict[str, Any], where: str) -> None:
        found = {}
        for key, value in out.items():
            description = _describe(value)
            if description is None:
                raise TransformError(
                    f"{where}: augment= returned {type(value).__name__} for key {key!r}; it must "
                    "return numpy arrays or CPU torch tensors (or stoker.Ragged of numpy arrays)")
            found[key] = description
        if self._schema is None:
            self._schema = found
            return
        for key, expected in self._schema.items():
            if key not in found:
                raise TransformError(
                    f"{where}: augment= output is missing key {key!r}, which the first batch's "
                    "output had (augment= must return the same keys, dtypes and per-row shapes "
                    "for every batch)")
            if found[key] != expected:
                raise TransformError(
                    f"{where}: augment= output {key!r} has {_show(found[key])}; the first "
                    f"batch's had {_show(expected)} (only the batch dimension may change)")
        extra = [key for key in found if key not in self._schema]
        if extra:
            raise TransformError(
                f"{where}: augment= output has key {extra[0]!r}, which the first batch's output "
                "did not have (augment= must return the same keys for every batch)")

    def run(self, batches: Iterator[Tuple[Dict[str, Any], Tuple[int, int, int], str]],
            check_live: Callable[[], None], on_wait: Callable[[float], None],
            convert: Optional[Callable[[Dict[str, Any], str], Dict[str, Any]]] = None
            ) -> Iterator[Dict[str, Any]]:
        """Augments ``(batch, rng_key, where)`` items in order, ``depth`` ahead. ``check_live``
        raises if the loader was closed or the iteration ended; ``on_wait`` gets the seconds the
        consumer waited; ``convert`` (e.g. to torch) runs on each checked output."""
        pool = _Pool(self._threads)
        pending: "collections.deque[Tuple[Future, str]]" = collections.deque()
        exhausted = False
        try:
            while True:
                while not exhausted and len(pending) < self._depth:
                    asked = time.perf_counter()
                    try:
                        batch, key, where = next(batches)
                    except StopIteration:
                        exhausted = True
                        break
                    finally:
                        if self._counter is not None:
                            self._counter.add_wait(wait_in_s=time.perf_counter() - asked)
                    pending.append((pool.submit(self._runner.call, "augment", batch, where, key),
                                    where))
                    del batch
                if not pending:
                    return
                future, where = pending.popleft()
                waited = time.perf_counter()
                while True:
                    try:
                        out = future.result(timeout=_POLL_S)
                        break
                    except FutureTimeout:
                        check_live()
                on_wait(time.perf_counter() - waited)
                del future
                check_live()
                self._check(out, where)
                if convert is not None:
                    out = convert(out, where)
                handed = time.perf_counter()
                yield out
                if self._counter is not None:  # read-ahead full, until the loop asked again
                    self._counter.add_wait(wait_out_s=time.perf_counter() - handed)
                del out
        finally:
            for future, _ in pending:
                future.cancel()
            pool.shutdown()
