"""The Python stages of a loader: the user's callables (``transform=``, ``augment=``) wired to
one runner (threads, or ``python_workers`` processes), and their counters.

``transform=`` runs on the engine's worker threads, called through :class:`TransformGlue` once
per decoded row group; ``augment=`` runs on the batches the engine delivers, a few ahead of the
training loop (:class:`AugmentStage`). Both go through one runner, so ``python_workers`` serves
both. Each stage counts what the engine's stages count (``cpp/include/stoker/stats.h``:
``name``, ``pool``, ``threads``, ``busy_s``, ``wait_in_s``, ``wait_out_s``, ``items``,
``bytes``), reported in ``loader.stats()["stages"]``:

- ``transform``: ``busy_s`` the seconds inside the callable's runner call (in process mode, the
  shared-memory hand-over included), summed over the calling threads; ``items`` row groups
  transformed, ``bytes`` the bytes of the arrays it returned. It is called by the engine, never
  waits for input or output: both waits stay 0. Its time is also part of the ``decode`` stage's.
- ``augment``: the same for batches; ``wait_in_s`` the time the stage waited for the engine's
  next batch, ``wait_out_s`` the time it held its full read-ahead waiting for the training loop
  to ask for the next batch.

Pools: with ``python_workers=N`` both stages run in the pool ``python_workers`` (N processes,
which they share); with threads, ``transform`` runs in pool ``python`` (the engine's worker
threads, taking turns at the GIL) and ``augment`` in pool ``augment`` (its own threads).
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Tuple

import numpy as np

from ._augment import AugmentStage
from ._pyworkers import make_runner
from ._ragged import Ragged
from ._user_transform import TransformGlue

__all__ = ["PythonStages", "StageCounter", "augment_keys"]

# augment= threads in thread mode (python_workers=0).
_AUGMENT_THREADS = 2


def _nbytes(value: Any) -> int:
    if isinstance(value, Ragged):
        return _nbytes(value.values) + _nbytes(value.offsets)
    return int(value.nbytes) if isinstance(value, np.ndarray) else 0


class StageCounter:
    """One Python stage's counters, with the fields of the engine's ``StageStats``; safe to
    update from any thread."""

    def __init__(self, name: str, pool: str, threads: int) -> None:
        self.name, self.pool, self.threads = name, pool, threads
        self._lock = threading.Lock()
        self._busy_s = self._wait_in_s = self._wait_out_s = 0.0
        self._items = self._bytes = 0

    def add_call(self, busy_s: float, out: Optional[Mapping[str, Any]]) -> None:
        """A call that took ``busy_s`` seconds and returned ``out`` (None: it failed)."""
        produced = sum(_nbytes(v) for v in out.values()) if out is not None else 0
        with self._lock:
            self._busy_s += busy_s
            if out is not None:
                self._items += 1
                self._bytes += produced

    def add_wait(self, wait_in_s: float = 0.0, wait_out_s: float = 0.0) -> None:
        with self._lock:
            self._wait_in_s += wait_in_s
            self._wait_out_s += wait_out_s

    def fresh_lock(self) -> None:
        """After fork(): another thread may have held the lock."""
        self._lock = threading.Lock()

    def snapshot(self) -> Dict[str, Any]:
        with self._lock:
            return {"name": self.name, "pool": self.pool, "threads": self.threads,
                    "busy_s": self._busy_s, "wait_in_s": self._wait_in_s,
                    "wait_out_s": self._wait_out_s, "items": self._items, "bytes": self._bytes}


class _CountedRunner:
    """A runner whose calls of one function are counted."""

    def __init__(self, runner: Any, counter: StageCounter) -> None:
        self._runner = runner
        self._counter = counter

    def call(self, name: str, arrays: Any, where: str,
             rng_key: Optional[Tuple[int, ...]] = None) -> Dict[str, Any]:
        started = time.perf_counter()
        out = None
        try:
            out = self._runner.call(name, arrays, where, rng_key)
            return out
        finally:
            self._counter.add_call(time.perf_counter() - started, out)


class PythonStages:
    """The runner, the ``transform=`` glue and the ``augment=`` stage of one loader."""

    def __init__(self, built: Any, python_workers: int, start_method: str) -> None:
        """The stages of ``built`` (an ``_options.Built``): its callables, run by one runner;
        with transform=, its glue is set on ``built.options`` for the engine to call."""
        functions, num_threads = built.functions, built.options.num_threads
        self.glue: Optional[TransformGlue] = None
        self.augment: Optional[AugmentStage] = None
        self._counters: List[StageCounter] = []
        # One runner (thread or process pool) for every Python callable of the loader.
        self.runner = make_runner(functions, python_workers, start_method) if functions else None
        try:
            self._wire(built, python_workers, num_threads)
        except BaseException:
            self.close()
            raise

    def _wire(self, built: Any, python_workers: int, num_threads: int) -> None:
        functions = built.functions
        if "transform" in functions:
            counter = StageCounter("transform", "python_workers" if python_workers else "python",
                                   python_workers or num_threads)
            self._counters.append(counter)
            self.glue = TransformGlue(_CountedRunner(self.runner, counter))
            # The engine holds the glue weakly: the loader owns it, through self (see the binding).
            built.options.set_user_transform(self.glue, built.transform_fingerprint)
        if "augment" in functions:
            threads = python_workers or _AUGMENT_THREADS
            counter = StageCounter("augment", "python_workers" if python_workers else "augment",
                                   threads)
            self._counters.append(counter)
            self.augment = AugmentStage(_CountedRunner(self.runner, counter), threads, counter)

    def augmented(self, host: Iterator[Dict[str, Any]], at: Any, seed: int, opts: Any,
                  route: Any, check_live: Callable[[], None], on_wait: Callable[[float], None]
                  ) -> Iterator[Dict[str, Any]]:
        """The host batches of the epoch at ``at`` (an EpochCursor) run through ``augment=``, a
        few ahead, as the caller receives them (``route``)."""
        def convert(out: Dict[str, Any], where: str) -> Dict[str, Any]:
            return route.output(route.from_user(out, where), where)

        keyed = augment_keys(host, at.position, seed, at.epoch, opts.rank, opts.world_size,
                             at.elastic_offset(), route.user_view)
        return self.augment.run(keyed, check_live, on_wait, convert)

    def stats(self) -> List[Dict[str, Any]]:
        """The stages' counters, in data-flow order (``transform`` before ``augment``)."""
        return [counter.snapshot() for counter in self._counters]

    def fresh_locks(self) -> None:
        for counter in self._counters:
            counter.fresh_lock()

    def close(self) -> None:
        runner, self.runner = self.runner, None
        if runner is not None:
            runner.close()  # a call in flight raises LoaderClosedError


def augment_keys(host: Iterator[Dict[str, Any]], first: int, seed: int, epoch: int, rank: int,
                 world_size: int, offset: int, view: Callable[[Dict[str, Any]], Dict[str, Any]]
                 ) -> Iterator[Tuple[Dict[str, Any], Tuple[int, int, int], str]]:
    """(batch, rng key, where) for the augment stage: batch ``first + k`` of the epoch as
    ``augment=`` sees it (``view``), keyed by (seed, epoch, global batch index). ``offset``: the
    batches the old ranks delivered, during the rest of an epoch resumed on another world size
    (they come first, so no two batches of the epoch share a key)."""
    for index, batch in enumerate(host, first):
        where = f"epoch {epoch}, batch {index}" + (f" of rank {rank}" if world_size > 1 else "")
        yield view(batch), (seed, epoch, offset + index * world_size + rank), where
