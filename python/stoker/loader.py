"""The Loader: iterate a Parquet dataset as batches of ready tensors.

Construction, iteration and lifecycle. Option building: ``_options.build`` (shared with
``describe``); resume: ``_resume``; the Python stages (``transform=``, ``augment=``,
``python_workers``): ``_pystages``; the epoch rule and stall meter: ``_epochs``; exit and fork
hooks: ``_live``; engine batches to numpy/torch: ``_convert``; ranks: ``_distributed``.
"""

from __future__ import annotations

import os
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _live, _stoker
from ._convert import Route
from ._device import DeviceFeeder
from ._epochs import MAX_EPOCH, EpochCursor, EpochIterator, StallMeter
from ._loader_doc import ARGS
from ._option_names import suggest_unknown_options
from ._options import Source, build, parse_size
from ._pystages import PythonStages
from ._resume import Resumable
from .errors import InternalError, InvalidOptionError, LoaderClosedError, LoaderStateError

__all__ = ["Loader", "parse_size"]

# Next() waits this long before returning to Python, so Ctrl-C is seen promptly.
_POLL_MS = 100


class Loader(Resumable):
    """Streams a Parquet dataset as batches of numpy arrays or torch tensors.

    Fetching, decoding, conversion and batching happen in C++ threads; Python only receives
    finished batches. The batches of an epoch are a pure function of (dataset, options, seed,
    epoch, rank, world_size): identical across runs, ``num_threads`` and ``prefetch_bytes``.

    Every argument is described in ``help(stoker.Loader)`` (below) and, as a table, in
    docs/user-guide.md, "Options". ``state_dict`` and ``load_state_dict`` (resume) come from
    :class:`stoker._resume.Resumable`.
    """

    @suggest_unknown_options("stoker.Loader()")
    def __init__(
        self,
        source: Source,
        columns: Optional[Sequence[str]] = None,
        features: Union[None, Sequence[str], Mapping[str, Sequence[str]]] = None,
        batch_size: int = 1024,
        shuffle: bool = True,
        seed: Optional[int] = None,
        shuffle_window: Union[None, int, str] = None,
        drop_last: bool = True,
        rank: Optional[int] = None,
        world_size: Optional[int] = None,
        num_threads: Optional[int] = None,
        num_io_threads: Optional[int] = None,
        prefetch_bytes: Union[int, str] = "256MiB",
        output: str = "numpy",
        device: Any = None,
        pin_memory: Optional[bool] = None,
        lists: Union[None, str, Mapping[str, str]] = None,
        pad_value: Union[float, Mapping[str, float]] = 0,
        fill_null: Union[None, float, Mapping[str, float]] = None,
        null_mask: Union[bool, Sequence[str]] = False,
        features_dtype: Union[str, Any, Mapping[str, Any]] = "float32",  # or a numpy/torch dtype
        features_name: str = "features",
        allow_lossy_cast: bool = False,
        categories: Optional[Mapping[str, Union[str, os.PathLike, Sequence[str]]]] = None,
        padding_mask: bool = False,
        task_bytes: Union[int, str] = "16MiB",
        storage_options: Optional[Mapping[str, Any]] = None,
        max_retries: int = 5,
        retry_base_delay: float = 0.1,
        cache_dir: Optional[Union[str, os.PathLike]] = None,
        cache_bytes: Union[int, str] = "50GiB",
        cache_min_free_bytes: Union[int, str] = "1GiB",
        transforms: Optional[Mapping[str, Sequence[Mapping[str, Any]]]] = None,
        on_error: Union[str, Mapping[str, str]] = "raise",
        augment: Optional[Callable[[Dict[str, Any], Any], Mapping[str, Any]]] = None,
        python_workers: int = 0,
        python_start_method: str = "spawn",
        transform: Optional[Callable[[Dict[str, np.ndarray]], Mapping[str, Any]]] = None,
        transform_columns: Optional[Sequence[str]] = None,
        transform_version: Optional[str] = None,
        petastorm: Optional[bool] = None,
        time_unit: Union[None, str, Mapping[str, str]] = None,
        decimals: Union[None, str, Mapping[str, str]] = None,
    ) -> None:
        self._engine = None  # first: close() and __del__ work whatever raises below
        self._stages: Optional[PythonStages] = None
        self._runner = None
        built = build(**{name: value for name, value in locals().items() if name != "self"})
        self._options = opts = built.options
        self._seed, self._seed_given = opts.seed, built.seed_given
        self._transforms = built.transforms  # checked chains, with a Petastorm store's codec ops
        self._transform_fingerprint = built.transform_fingerprint
        self._finishing = built.finishing  # Petastorm fields finished in Python, or None
        self._route = Route(output)  # with the bfloat16 columns once the engine is open
        self._feeder = DeviceFeeder.cuda(built.device) if built.device is not None else None
        self._at = EpochCursor()  # the epoch of the running (or next) iteration, the position
        self._generation = 0  # counts iterations; only the newest may run
        self._generation_lock = threading.Lock()  # bumps of _generation (held only briefly)
        # Held while an iterator takes a batch from the engine (generation check + next()) and
        # while a newer iter(), set_epoch() or load_state_dict() stops or starts the engine's
        # epoch, so a batch of the new epoch never goes to an older iterator (see __iter__).
        self._handover = threading.RLock()
        self._running: Optional[int] = None  # generation of the live iterator, if any
        self._ended_by = ""  # why the previous iterator was ended, for its error
        self._stall = StallMeter()  # of the current (or last) iteration
        try:
            if built.functions:
                self._stages = PythonStages(built, python_workers, python_start_method)
                self._runner = self._stages.runner
            self._engine = _stoker.Engine.open(opts)
            # Checked at open: every name a batch holds is distinct. The route converts the
            # engine's batches, before the fields finished in Python.
            engine_columns = {info.name: info for info in self._engine.columns()}
            self._columns = engine_columns if self._finishing is None else \
                self._finishing.columns(engine_columns)
            self._route = Route.for_columns(output, engine_columns)
        except BaseException:
            self.close()
            raise
        _live.add(self)  # closed at exit, its locks made anew after fork()

    # ----------------------------------------------------------------------------------- facts

    @property
    def seed(self) -> int:
        """The seed in use (drawn at construction when ``seed=None``; shared by every rank)."""
        return self._seed

    @property
    def epoch(self) -> int:
        """The epoch the next iteration delivers: the running one's, or the next once every
        batch of it has been handed out."""
        return self._at.next_epoch()

    @property
    def columns(self) -> Dict[str, Any]:
        """What each output column is: name, Arrow type, kind, dtype, per-row shape, annotation
        (the unit of temporal columns, "utf8"/"binary" for strings, what a ``time_unit`` or
        ``decimals`` conversion delivers). ``kind`` also equals its name (``info.kind ==
        "dense"``); ``repr(info)`` shows every field."""
        return dict(self._columns)

    def vocabulary(self, column: str) -> List[str]:
        """The vocabulary of categorical column ``column`` (``categories=``): value ``i`` of the
        list is delivered as id ``i + 1``; id 0 is out-of-vocabulary."""
        return list(self._live().vocabulary(column))

    @property
    def num_rows(self) -> int:
        """Rows this rank yields per epoch (including padding rows with ``drop_last=False``)."""
        return self._live().num_rows

    @property
    def dataset_rows(self) -> int:
        return self._live().dataset_rows

    @property
    def shuffle_window_rows(self) -> int:
        return self._live().shuffle_window_rows

    def __len__(self) -> int:
        """Batches per epoch for this rank (the same on every rank)."""
        return self._live().num_batches

    def __getitem__(self, index: Any) -> Any:  # DataLoader(loader) indexes what has a __len__
        raise TypeError("stoker.Loader is not indexable (loader[i]): it delivers whole batches. "
                        "Iterate it, or give torch's DataLoader stoker.IterableDataset(source, "
                        "**options) with batch_size=None")

    def __repr__(self) -> str:
        if self._engine is None:
            return "Loader(closed)"
        return (f"Loader(files={self._engine.num_files}, rows={self._engine.dataset_rows}, "
                f"batches={len(self)}, batch_size={self._options.batch_size}, "
                f"rank={self._options.rank}/{self._options.world_size}, seed={self._seed})")

    # ------------------------------------------------------------------------------- iteration
    # Epoch rule: see _epochs.py (EpochCursor, changed only under _handover). Hand-over rule
    # (iterators in several threads): every iter(), set_epoch() and load_state_dict() takes a new
    # generation; only the iterator of the newest generation may take batches. An iterator takes a
    # batch while holding _handover, checking its generation before and after the engine's next();
    # the engine's epoch is stopped and started only under _handover, by the holder of the newest
    # generation. So a batch of a newer epoch never goes to an older iterator (which would leave the
    # newer one short), and an older iterator never stops a newer epoch. The generation is taken
    # before waiting for _handover: an iterator inside next() sees it when next() returns (within
    # _POLL_MS) and lets go.

    def _new_generation(self, reason: str) -> int:
        """Ends every iterator so far: their next step raises LoaderStateError naming
        ``reason``."""
        with self._generation_lock:
            self._generation += 1
            self._ended_by = reason
            return self._generation

    def _end_running(self, reason: str) -> None:
        """Ends the live iterator (if any) and stops its epoch; called holding _handover."""
        self._new_generation(reason)
        if self._running is not None:
            self._running = None
            if self._engine is not None:
                self._engine.stop()

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration delivers (its order depends on it).

        A live iterator of this loader is ended: its next step raises
        :class:`~stoker.errors.LoaderStateError`, and ``state_dict()`` describes the new epoch.
        """
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= MAX_EPOCH:
            raise InvalidOptionError(
                f"epoch must be an integer in [0, 2**63 - 1], got {epoch!r}")
        reason = f"set_epoch({epoch})"
        self._new_generation(reason)  # an iterator waiting in next() lets go of _handover
        with self._handover:
            self._end_running(reason)  # also one that an iter() started meanwhile
            self._at.choose(epoch)

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        engine = self._live()
        # One iteration at a time: a newer iter(loader) restarts the engine, and this one ends.
        generation = self._new_generation("a newer iter(loader)")
        with self._handover:
            if generation != self._generation:
                # A newer iter(), set_epoch() or load_state_dict() came first: this iterator is
                # ended before it started (its first next() says by what).
                return EpochIterator(self._ended(generation), lambda: None)
            self._running = None
            self._at.begin(engine)
            self._running = generation
            self._stall.start()
        return EpochIterator(self._iterate(engine, generation),
                              lambda: self._stop_unstarted(engine, generation))

    def _ended(self, generation: int) -> Iterator[Dict[str, Any]]:
        self._check_generation(generation)
        raise InternalError("an iterator ended before it started has the newest generation")
        yield  # noqa: unreachable (makes this a generator)

    def _stop_unstarted(self, engine: Any, generation: int) -> None:
        """What _iterate's `finally` does, for an iterator dropped or closed before its first
        next() (a generator that never started runs no `finally`)."""
        with self._handover:
            if generation == self._generation and self._running == generation:
                self._running = None
                self._stall.end()
                engine.stop()

    def _check_generation(self, generation: int) -> None:
        if generation != self._generation:
            raise LoaderStateError(
                f"this iterator was ended by {self._ended_by}: a Loader runs one iteration at a "
                "time")

    def _host_batches(self, engine: Any, generation: int,
                      convert: bool) -> Iterator[Dict[str, Any]]:
        """The engine's batches as numpy dicts (``convert``: as the caller receives them),
        until the epoch ends."""
        route = self._route
        while True:
            waited = time.perf_counter()
            with self._handover:
                self._check_generation(generation)
                try:
                    batch, done = engine.next(_POLL_MS)
                except LoaderClosedError:
                    # set_epoch/load_state_dict/iter() from another thread stopped the engine
                    # while this thread waited in it: report that, not a close.
                    self._check_generation(generation)
                    raise
                # Ended while this batch was in flight (the end of the epoch included).
                self._check_generation(generation)
            self._stall.wait_s += time.perf_counter() - waited
            if batch is None:
                if done:
                    return
                continue  # timeout: lets Python deliver signals (Ctrl-C)
            out = route.host(batch)
            del batch
            if self._finishing is not None:
                out = self._finishing.batch(out)
            yield route.output(out) if convert else out

    def _augmented(self, host: Iterator[Dict[str, Any]], generation: int
                   ) -> Iterator[Dict[str, Any]]:
        def check_live() -> None:
            self._live()
            self._check_generation(generation)

        def on_wait(seconds: float) -> None:
            if generation == self._generation:
                self._stall.wait_s += seconds

        return self._stages.augmented(host, self._at, self._seed, self._options, self._route,
                                      check_live, on_wait)

    def _iterate(self, engine: Any, generation: int) -> Iterator[Dict[str, Any]]:
        # The position counts batches handed to the caller, here at the outermost yield (the
        # augment stage and the device feeder run ahead of the caller).
        augment = self._stages is not None and self._stages.augment is not None
        host = self._host_batches(engine, generation, convert=not augment)
        stages = [host]
        if augment:
            stages.append(self._augmented(host, generation))
        if self._feeder is not None:
            stages.append(self._feeder(stages[-1]))
        batches = stages[-1]
        try:
            for batch in batches:
                with self._handover:
                    self._check_generation(generation)
                    self._at.handed_out()
                yield batch
            with self._handover:
                if generation == self._generation:
                    self._at.done = True
        finally:
            for stage in reversed(stages):
                stage.close()
            with self._handover:
                if generation == self._generation:  # never stop a newer iteration's engine
                    self._running = None
                    self._stall.end()
                    engine.stop()

    # ------------------------------------------------------------------------------ lifecycle

    def stats(self) -> Dict[str, Any]:
        """Counters since the loader was opened (docs/user-guide.md, "Statistics").

        ``stages`` is a list in data-flow order, each with ``name``, ``pool``, ``threads``,
        ``busy_s``, ``wait_in_s``, ``wait_out_s``, ``items`` and ``bytes``: the engine's, then
        ``transform`` and ``augment`` when those callables are given (``_pystages``). Also
        ``cache``, ``storage``, ``batches``, ``rows``, ``consumer_wait_s``,
        ``peak_inflight_bytes``, and the stall meter of the current (or last) iteration:
        ``loop_s`` (from ``iter()`` to now or the epoch's end) and ``stall_fraction`` (the share
        of it spent waiting for the next batch: the CPU-side stand-in for accelerator idle time).
        """
        stats = self._live().stats()
        if self._stages is not None:  # the Python stages come after the engine's
            stats["stages"] = list(stats["stages"]) + self._stages.stats()
        stats.update(self._stall.read())
        return stats

    def flush_cache(self) -> None:
        """Waits until the ``cache_dir`` entries queued so far are written (they are stored
        behind the pipeline), for other processes to find them on disk now. ``close()`` does not
        wait: it counts the dropped entries in ``stats()["cache"]["write_skipped"]``. No-op
        without ``cache_dir``. See docs/user-guide.md, "Cache"."""
        self._live().flush_cache()

    def close(self) -> None:
        """Stops every thread; safe from any thread. A live iteration (in this or another
        thread) then raises :class:`~stoker.errors.LoaderClosedError`. The loader cannot be used
        afterwards."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()  # permanent: an iter() racing this close cannot start an epoch
        stages, self._runner = getattr(self, "_stages", None), None
        if stages is not None:
            stages.close()  # a call in flight raises LoaderClosedError

    def _fresh_locks_after_fork(self) -> None:
        """In the child of a fork(): another thread may have held these locks."""
        self._generation_lock, self._handover = threading.Lock(), threading.RLock()
        if self._stages is not None:
            self._stages.fresh_locks()

    def _live(self):
        engine = self._engine
        if engine is None:
            raise LoaderClosedError("this Loader is closed")
        return engine

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.stop()
        stages = getattr(self, "_stages", None)
        if stages is not None:
            stages.close()


Loader.__doc__ += ARGS
