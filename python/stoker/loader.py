"""The Loader: iterate a Parquet dataset as batches of ready tensors.

Option parsing lives in ``_options``, rank discovery in ``_distributed``, the conversion of
engine batches in ``_convert``; this module holds the iteration, resume and lifecycle rules.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
import weakref
import zlib
from typing import Any, Callable, Dict, Iterator, List, Mapping, Optional, Sequence, Union

import numpy as np

from . import _stoker
from ._augment import AugmentStage
from ._convert import Route
from ._device import DeviceFeeder, parse_device
from ._distributed import agree_on_seed, default_num_threads, resolve_rank
from ._pyworkers import make_runner
from ._state import STATE_VERSION, check_state
from ._user_transform import TransformGlue, user_transform
from ._option_names import suggest_unknown_options
from ._options import (Source, check_int, check_storage_options, column_options, feature_columns,
                       normalise_sources, output_columns, parse_size, set_categories, set_features,
                       set_transforms, storage_value, transform_chains)
from ._pyworkers import check_python_options, make_runner
from .errors import (InternalError, InvalidOptionError, LoaderClosedError, LoaderStateError,
                     StateMismatchError)

__all__ = ["Loader", "parse_size"]

_MAX_EPOCH = 2**63 - 1  # the engine's epoch is an int64
# Next() waits this long before returning to Python, so Ctrl-C is seen promptly.
_POLL_MS = 100
_LIVE_ENGINES: "weakref.WeakSet[Loader]" = weakref.WeakSet()

# pyarrow.fs registers the S3 finaliser with atexit on import. atexit runs hooks last-in
# first-out, so importing it before registering ours stops every loader (and its S3 reads)
# before S3 is finalised.
import pyarrow.fs  # noqa: E402,F401


def _stop_all_at_exit() -> None:
    for loader in list(_LIVE_ENGINES):
        loader.close()
    # Requests still under way (fetch-ahead reads of closed loaders, interrupted opens) stop
    # retrying; wait for them (bounded) while Arrow's S3 state and memory pools still exist.
    _stoker._stop_remote_requests()


atexit.register(_stop_all_at_exit)


def _fresh_locks_after_fork() -> None:
    # Another thread may have held a loader's locks at fork(): the child's copies would stay
    # held, and its iter() would wait forever instead of raising LoaderClosedError.
    for loader in list(_LIVE_ENGINES):
        loader._generation_lock = threading.Lock()
        loader._handover = threading.RLock()


os.register_at_fork(after_in_child=_fresh_locks_after_fork)


def _column_options_of(options: Any, name: str) -> Any:
    """A column's options: its own, else its nearest struct parent's, else the defaults."""
    key = name
    while True:
        if key in options.column_options:
            return options.column_options[key]
        if "." not in key:
            return options.default_column_options
        key = key.rsplit(".", 1)[0]


class _EpochIterator:
    """What ``iter(loader)`` returns: the epoch's batches. The epoch starts (and prefetches) at
    ``iter()``; dropping or closing the iterator stops it, even before the first ``next()``."""

    __slots__ = ("_batches", "_stop")

    def __init__(self, batches: Iterator[Dict[str, Any]], stop: Callable[[], None]) -> None:
        self._batches = batches
        self._stop = stop

    def __iter__(self) -> "_EpochIterator":
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


class Loader:
    """Streams a Parquet dataset as batches of numpy arrays or torch tensors.

    Fetching, decoding, conversion and batching happen in C++ threads; Python only receives
    finished batches. The batches of an epoch are a pure function of (dataset, options, seed,
    epoch, rank, world_size): identical across runs, ``num_threads`` and ``prefetch_bytes``.

    Args:
        source: A file, a folder (read recursively), a glob, a URI, or a list of these.
        columns: Columns delivered as one array each. ``None`` with no ``features``: every column.
        features: Scalar numeric/bool columns stacked into one ``[B, F]`` array named
            ``features_name``, cast to ``features_dtype``; or several groups
            ``{"dense": [...], "ids": [...]}``, each stacked into its own ``[B, F_group]`` array
            named after the group. Integer hive partition columns and categorical columns
            (``categories``) may be features.
        batch_size: Rows per batch.
        shuffle: Shuffle row groups per epoch and rows inside the shuffle window.
        seed: Seed of every random choice. ``None`` draws one (rank 0's draw, shared through
            torch.distributed when ``world_size > 1``); read it back from ``loader.seed``.
        shuffle_window: Rows shuffled together (an int), or a byte size such as ``"256MiB"``.
        drop_last: Drop the rows that do not fill the last batch of every rank (equal, full
            batches everywhere). ``False`` pads ranks by wrapping around to equal row counts
            and keeps a short last batch.
        rank, world_size: This process's shard. Default: torch.distributed when initialised,
            else ``RANK``/``WORLD_SIZE`` from the environment, else 0 and 1.
        num_threads: CPU worker threads (default: the CPUs this process may use, by affinity
            and cgroup quota, divided by ``LOCAL_WORLD_SIZE`` when torchrun sets it).
        num_io_threads: I/O threads: footers are read this many at once (default:
            max(4, num_threads)); for remote sources, when given, it also sizes Arrow's
            process-wide I/O pool that runs the concurrent range reads.
        prefetch_bytes: Bound on decoded data in flight, an int or a size such as ``"512MiB"``.
        output: ``"numpy"`` or ``"torch"`` (zero-copy via DLPack).
        device: ``None`` (CPU) or ``"cuda"`` / ``"cuda:N"`` (needs ``output="torch"``): batches
            arrive on that GPU, copied from pinned slabs on a side stream, the next batch's copy
            in flight while the caller's step runs.
        pin_memory: Allocate batch slabs page-locked (needs a CUDA build of torch). Default:
            on with a CUDA ``device``, else off.
        lists: For variable-length list columns: ``"padded"`` or ``"ragged"``, for all or as a
            dict per column.
        pad_value: Value that pads ``"padded"`` lists (all, or a dict per column).
        fill_null: Value that replaces nulls (all columns, or a dict per column); for list
            columns it replaces null number or bool elements (0 or 1 for bools).
        null_mask: ``True`` or a list of columns and feature groups that get a ``<name>_mask``
            bool array (valid rows are ``True``; ``[B, F]`` for a feature group); null values
            are zero (or ``fill_null``). ``True`` masks every column and every group. A list
            column also gets ``<name>_mask_1``, ``<name>_mask_2``... for each level below the
            rows (inner lists, strings, elements; shaped like that level's lengths or offsets,
            or like the values of a fixed-size list): null inner lists and strings arrive
            empty, null elements as 0 (or ``fill_null``).
        features_dtype: dtype of the stacked features (default ``"float32"``), or
            ``{group: dtype}`` (groups left out are float32).
        features_name: Key of the stacked features when ``features`` is a list.
        allow_lossy_cast: Allow feature casts that can lose information, and ``time_unit`` /
            ``decimals`` conversions that round. Integer columns cast to floats are exact, and
            allowed, when every row group's footer statistics keep ``|v| <= 2**53`` (float64)
            or ``2**24`` (float32).
        categories: ``{column: "auto" | [values] | path of a text file, one value per line}``:
            string columns (plain, large or dictionary-encoded, and hive partition columns)
            delivered as int64 ids, 0 for values outside the vocabulary and ``i + 1`` for its
            ``i``-th value. ``"auto"``: the sorted distinct values of the dataset, built at
            open. Nulls follow ``fill_null`` / ``null_mask`` (an error otherwise).
            ``loader.vocabulary(column)`` returns the list.
        padding_mask: Add a bool ``__padding__`` array marking rows repeated by ``drop_last=False``.
        task_bytes: Target uncompressed size of one decode task (row groups are split by columns).
        storage_options: Settings for remote filesystems, with Arrow's names (``endpoint_override``,
            ``region``, ``scheme``, ``access_key``, ``secret_key``, ``session_token``,
            ``anonymous``, ...). They can also be given as URI query parameters or through the
            standard AWS environment variables and config files. Never logged or shown.
        max_retries: Retries of a transient storage error (5xx, SlowDown, reset, timeout).
        retry_base_delay: First backoff delay in seconds; it doubles per retry, with jitter.
        cache_dir: Node-local cache folder shared by every process on the node (``None``: off).
        cache_bytes: Byte budget of the cache (least recently used entries are evicted).
        cache_min_free_bytes: Free space the cache always leaves on its disk.
        transforms: ``{column: [op, ...]}`` with ops from :mod:`stoker.ops`, run in C++ on the
            workers; the column becomes a dense tensor of the chain's output. The deterministic
            prefix is cached with ``cache_dir``; random ops are keyed by (seed, epoch, row id).
            On a list column the ops apply per element (it stays a list); on a feature column
            the chain gives the number stacked. ``{column: {output: [op, ...], ...}}`` makes
            several outputs of one column (e.g. an image and ``ops.shape()`` of it), sharing
            the ops their chains start with.
        on_error: What a row that a column's transforms cannot take (a corrupt image or array,
            a value an op refuses, a null) does: ``"raise"`` (default) fails the epoch with an
            error naming file, row group, row and column; ``"zero"`` delivers a zero tensor of
            the chain's output shape and a bool ``<column>_valid`` array, ``False`` for such
            rows. All columns with transforms, or a dict per column.
        augment: ``fn(batch, rng) -> dict``, run on every batch after the engine (after the
            cache) and before the conversion to torch and the device copy. ``batch`` is a dict
            of numpy arrays (``stoker.Ragged`` for strings and ragged lists); ``rng`` is a
            ``numpy.random.Generator`` on Philox keyed by (seed, epoch, global batch index),
            where the global batch index is ``i * world_size + rank`` for batch ``i`` of this
            rank's epoch: the same augmentation for a batch whatever ``num_threads``,
            ``python_workers``, the cache or a resume, and a different one next epoch. Runs a
            few batches ahead of the training loop on background threads (or processes). The
            output's keys, dtypes and per-row shapes must match the first batch's output.
        python_workers: Run the Python callables (``transform``, ``augment``) in this many worker processes
            instead of threads: pure-Python code then runs in parallel, free of the GIL. The
            callables must be picklable (module-level functions); arrays move through shared
            memory. ``0`` (default): threads.
        python_start_method: How the worker processes start: ``"spawn"`` (default) or
            ``"forkserver"`` (never ``"fork"``: the loader runs C++ threads).
        transform: Your own function ``fn(dict[str, np.ndarray]) -> dict[str, np.ndarray]``, run
            on the engine's worker threads once per decoded row group (its whole rows), before
            the cache: with ``cache_dir``, later epochs read its output from the cache without
            calling it. The keys it returns are the dataset's columns for every other option
            (``columns``, ``features``, ``transforms``, ``lists``, ``fill_null``, ...). It is
            called once at open on the first rows to learn its output keys, dtypes and inner
            shapes; every later call must match them. A :class:`stoker.TransformSpec` (or
            Petastorm's) is accepted too. Python holds the GIL: pure-Python work runs one row
            group at a time. See the user guide, "User code: transform=".
        transform_columns: The file columns ``transform`` receives (default: all).
        transform_version: A string that is part of the transform's cache key and resume
            fingerprint; change it when code the function calls changes (stoker fingerprints
            the function's own code, defaults and plain-data closure values only).
        petastorm: A Petastorm store (a Unischema in ``_common_metadata``, read by a restricted
            unpickler) has its codec fields decoded on the workers into the arrays Petastorm's
            reader returns. ``None``: detected on local sources; ``True``: on remote sources
            too (one more request, for ``_common_metadata``); ``False``: every column as stored.
        time_unit: Deliver timestamp, date, time and duration columns (and features) as
            ``float64`` counts of this unit since the Unix epoch (1970-01-01T00:00 UTC for
            timestamps with a time zone; the naive clock's midnight for those without; since
            midnight for times of day; the length for durations): ``"D"``, ``"h"``, ``"m"``,
            ``"s"``, ``"ms"``, ``"us"`` or ``"ns"``, for all such columns or a dict per column.
            ``None``: ``int64`` counts of the stored unit (``loader.columns[c].annotation`` names
            it). A conversion float64 cannot hold exactly (counts beyond 2**52, by the footers'
            statistics: nanosecond timestamps of today) needs ``allow_lossy_cast=True``.
        decimals: Deliver decimal columns as ``"float64"`` (exact up to precision 15),
            ``"float32"`` (the float64 value rounded; exact up to precision 6) or
            ``"scaled_int64"`` (the unscaled integer, ``value * 10**scale``; precision up to 18),
            for all decimal columns or a dict per column. A precision above what the choice
            holds exactly needs ``allow_lossy_cast=True``. ``None``: decimal columns raise
            :class:`~stoker.errors.UnsupportedTypeError` naming this option.
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
        shuffle_window: Union[int, str] = 65536,
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
        features_dtype: Union[str, Mapping[str, str]] = "float32",
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
        if output not in ("numpy", "torch"):
            raise InvalidOptionError(f"output must be 'numpy' or 'torch', got {output!r}")
        if output == "torch":
            try:
                import torch  # noqa: F401
            except ImportError:
                raise InvalidOptionError("output='torch' needs PyTorch: pip install torch") from None
        if isinstance(columns, str) or isinstance(features, str):
            raise InvalidOptionError("columns and features take a list of names, not a string")
        for name, value in (("batch_size", batch_size), ("num_threads", num_threads),
                            ("num_io_threads", num_io_threads), ("max_retries", max_retries)):
            check_int(name, value)
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or
                                 not 0 <= seed < 2**64):
            raise InvalidOptionError(f"seed must be an integer in [0, 2**64) or None, got {seed!r}")
        check_python_options(python_workers, python_start_method)
        if augment is not None and not callable(augment):
            raise InvalidOptionError(
                f"augment must be a callable fn(batch, rng) -> dict, got {type(augment).__name__}")
        functions = {"augment": augment} if augment is not None else {}
        transform_fn, self._transform_fingerprint = None, ""
        if transform is not None:
            transform_fn, self._transform_fingerprint = user_transform(transform,
                                                                       transform_version)
            functions["transform"] = transform_fn
        elif transform_columns is not None or transform_version is not None:
            raise InvalidOptionError("transform_columns and transform_version need transform=")
        if python_workers and not functions:
            raise InvalidOptionError(
                f"python_workers={python_workers} has nothing to run: it runs augment= (or "
                "transform=) in worker processes")

        self._engine = None
        self._runner = None
        self._augment: Optional[AugmentStage] = None
        self._output = output
        self._route = Route(output)  # with the bfloat16 columns once the engine is open
        self._feeder = None
        device = parse_device(device) if device is not None else None
        if device is not None:
            if output != "torch":
                raise InvalidOptionError(f"device={str(device)!r} needs output='torch'")
            self._feeder = DeviceFeeder.cuda(device)
        if pin_memory is not None and not isinstance(pin_memory, bool):
            raise InvalidOptionError(f"pin_memory must be True, False or None, got {pin_memory!r}")
        self._epoch = 0
        self._position = 0  # batches of self._epoch handed to the caller
        self._resume_batch: Optional[int] = None
        # Every batch of self._epoch has been handed out (whether or not the iterator was then
        # exhausted: Lightning stops after len(loader) batches without asking for more).
        self._epoch_done = False
        self._epoch_batches = 0  # batches of the running (or last) iteration's epoch
        self._epoch_chosen = False  # set_epoch()/load_state_dict() picked the next epoch
        # (old world size, batches each old rank delivered) while self._epoch is the rest of an
        # epoch resumed on another world size; None otherwise.
        self._elastic: Optional[tuple] = None
        self._generation = 0  # counts iterations; only the newest may run
        self._generation_lock = threading.Lock()  # bumps of _generation (held only briefly)
        # Held while an iterator takes a batch from the engine (generation check + next()) and
        # while a newer iter(), set_epoch() or load_state_dict() stops or starts the engine's
        # epoch, so a batch of the new epoch never goes to an older iterator (see __iter__).
        self._handover = threading.RLock()
        self._running: Optional[int] = None  # generation of the live iterator, if any
        self._ended_by = ""  # why the previous iterator was ended, for its error
        # Stall meter of the current (or last) iteration: the consumer's loop time and the part
        # of it spent waiting for the next batch.
        self._loop_start: Optional[float] = None
        self._loop_end: Optional[float] = None
        self._loop_wait_s = 0.0

        opts = _stoker.LoaderOptions()
        opts.sources = normalise_sources(source)
        opts.columns = list(columns) if columns is not None else []
        null_mask = set_features(opts, features, features_dtype, features_name, null_mask)
        set_categories(opts, categories)
        opts.allow_lossy_cast = bool(allow_lossy_cast)
        opts.batch_size = batch_size
        opts.shuffle = bool(shuffle)
        if isinstance(shuffle_window, int) and not isinstance(shuffle_window, bool):
            opts.shuffle_window_rows = shuffle_window
        else:
            opts.shuffle_window_bytes = parse_size(shuffle_window, "shuffle_window")
        opts.drop_last = bool(drop_last)
        opts.padding_mask = bool(padding_mask)
        opts.rank, opts.world_size = resolve_rank(rank, world_size)
        self._seed_given = seed is not None
        self._seed = agree_on_seed(seed, opts.world_size, opts.shuffle)
        opts.seed = self._seed
        opts.num_threads = num_threads or default_num_threads()
        opts.num_io_threads = num_io_threads or 0
        opts.prefetch_bytes = parse_size(prefetch_bytes, "prefetch_bytes")
        opts.pin_memory = device is not None if pin_memory is None else pin_memory
        opts.task_bytes = parse_size(task_bytes, "task_bytes")
        if storage_options is not None:
            if not isinstance(storage_options, Mapping):
                raise InvalidOptionError("storage_options must be a dict of strings")
            check_storage_options(opts.sources, storage_options)
            opts.storage_options = {str(k): storage_value(v) for k, v in storage_options.items()}
        opts.max_retries = max_retries
        opts.retry_base_delay_s = float(retry_base_delay)
        opts.cache_dir = os.path.abspath(os.fspath(cache_dir)) if cache_dir is not None else ""
        opts.cache_bytes = parse_size(cache_bytes, "cache_bytes")
        opts.cache_min_free_bytes = parse_size(cache_min_free_bytes, "cache_min_free_bytes")
        self._transforms = transform_chains(transforms) if transforms is not None else {}
        # A Petastorm store's codec fields become decode ops; plain Parquet is left alone.
        self._petastorm_store = None
        self._reshape: Dict[str, tuple] = {}
        self._variable: Dict[str, tuple] = {}  # Petastorm arrays made ragged/padded here
        if petastorm is not None and not isinstance(petastorm, bool):
            raise InvalidOptionError(f"petastorm must be None, True or False, got {petastorm!r}")
        if petastorm is not False:
            from ._petastorm import detect, plan_columns

            self._petastorm_store = detect(opts.sources, storage_options,
                                           remote=petastorm is True)
            if self._petastorm_store is not None and transform_fn is not None:
                # transform= sees decoded arrays, as a Petastorm TransformSpec does: the codec
                # fields are decoded before it (in Python); its outputs get no codec ops.
                from ._petastorm import DecodedInput, codec_kinds

                functions["transform"] = DecodedInput(codec_kinds(self._petastorm_store),
                                                      transform_fn)
                self._transform_fingerprint += "|petastorm-decoded"
            elif self._petastorm_store is not None:
                wanted = None if columns is None else list(columns)
                self._transforms, self._reshape, self._variable = plan_columns(
                    self._petastorm_store, wanted, self._transforms, lists)
                self._pad_value = pad_value
        if self._transforms:
            set_transforms(opts, self._transforms)
        if transform_fn is not None and transform_columns is not None:
            if isinstance(transform_columns, str) or not all(
                    isinstance(name, str) for name in transform_columns):
                raise InvalidOptionError("transform_columns takes a list of column names")
            if not transform_columns:
                raise InvalidOptionError("transform_columns is empty: name at least one "
                                         "column, or pass None for all")
            opts.transform_columns = list(transform_columns)
        opts.default_column_options, opts.column_options = column_options(
            lists, pad_value, fill_null, null_mask, opts.columns + feature_columns(opts),
            on_error, time_unit, decimals)
        self._options = opts
        # One runner (thread or process pool) for every Python callable of this loader.
        self._runner = make_runner(functions, python_workers, python_start_method) \
            if functions else None
        try:
            if transform_fn is not None:
                # The engine holds the glue weakly: this loader owns it (see the binding).
                self._transform_glue = TransformGlue(self._runner)
                opts.set_user_transform(self._transform_glue, self._transform_fingerprint)
            if augment is not None:
                self._augment = AugmentStage(self._runner, python_workers or 2)
            self._engine = _stoker.Engine.open(opts)
            self._columns = {info.name: info for info in self._engine.columns()}
            if self._reshape or self._variable:  # Petastorm fields finished in Python
                from ._petastorm import column_infos

                self._columns = column_infos(self._columns, self._reshape, self._variable)
            self._check_output_names()
            for info in self._columns.values():
                if str(info.dtype) == "bfloat16" and output != "torch":
                    raise InvalidOptionError(
                        f"column {info.name!r} is bfloat16 (its transforms end in "
                        "normalize(dtype='bfloat16') or cast(dtype='bfloat16')), which numpy "
                        "cannot hold: pass output='torch' for torch.bfloat16, or choose "
                        "float16/float32")
            self._route = Route(output, frozenset(
                name for name, info in self._columns.items() if str(info.dtype) == "bfloat16"))
        except BaseException:
            self.close()
            raise
        _LIVE_ENGINES.add(self)

    def _check_output_names(self) -> None:
        names = set(self._columns)
        known = names | set(feature_columns(self._options)) | set(self._transforms)
        transformed = output_columns(self._transforms)
        for name in self._options.column_options:
            # A struct's name stands for its leaves ("s" for "s.a", "s.b").
            if name not in known and not any(k.startswith(name + ".") for k in known):
                raise InvalidOptionError(
                    f"a per-column option names column {name!r}, which the loader does not read")
        if self._options.padding_mask and self._options.padding_name in names:
            raise InvalidOptionError(
                f"padding_mask=True adds {self._options.padding_name!r}, which is also a column")
        for info in self._columns.values():
            extra = []
            # How to do without each added key, for the clash's message.
            without = {info.name + "_lengths": f"lists={{{info.name!r}: 'ragged'}}",
                       info.name + "_mask": f"leave {info.name!r} out of null_mask",
                       info.name + "_valid": f"leave {info.name!r} out of on_error"}
            if info.kind == _stoker.ColumnKind.padded:
                extra.append(info.name + "_lengths")
            opts = _column_options_of(self._options, info.name)
            if info.arrow_type == "stacked features":
                masked = any(g.null_mask for g in self._options.feature_groups
                             if g.name == info.name) or (
                    not self._options.feature_groups and
                    self._options.default_column_options.null_mask)
                if masked:
                    extra.append(info.name + "_mask")
            elif opts.null_mask:
                extra.append(info.name + "_mask")
                extra.extend(f"{info.name}_mask_{level}"
                             for level in range(1, info.mask_levels + 1))
            if opts.on_error_zero and info.name in transformed:
                extra.append(info.name + "_valid")
            for key in extra:
                if key in names:
                    instead = without.get(key, f"leave {info.name!r} out of null_mask")
                    raise InvalidOptionError(
                        f"output key {key!r} for column {info.name!r} clashes with a column of "
                        f"that name; leave {key!r} out of columns, or {instead}")
                names.add(key)

    # ----------------------------------------------------------------------------------- facts

    @property
    def seed(self) -> int:
        """The seed in use (drawn at construction when ``seed=None``; shared by every rank)."""
        return self._seed

    @property
    def epoch(self) -> int:
        """The epoch the next iteration delivers: the running one's, or the next once every
        batch of it has been handed out."""
        return self._next_epoch()

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

    def __getitem__(self, index: Any) -> Any:
        # torch's DataLoader(loader) takes a class with __len__ for a map-style dataset.
        raise TypeError(
            "stoker.Loader is not indexable (loader[i]): it delivers whole batches from its own "
            "threads. Iterate it (for batch in loader), or give torch's DataLoader "
            "stoker.IterableDataset(source, **options) with batch_size=None")

    def __repr__(self) -> str:
        if self._engine is None:
            return "Loader(closed)"
        return (f"Loader(files={self._engine.num_files}, rows={self._engine.dataset_rows}, "
                f"batches={len(self)}, batch_size={self._options.batch_size}, "
                f"rank={self._options.rank}/{self._options.world_size}, seed={self._seed})")

    # ------------------------------------------------------------------------------- iteration
    #
    # Epoch rule: an iteration delivers the epoch chosen by set_epoch() or load_state_dict();
    # without such a choice, an iteration that follows a completed epoch delivers the next epoch
    # (what Lightning and plain `for epoch in ...: for batch in loader` loops expect), and one
    # that follows an unfinished iteration starts the same epoch again from its beginning.
    #
    # Hand-over rule (iterators in several threads): every iter(), set_epoch() and
    # load_state_dict() takes a new generation; only the iterator of the newest generation may
    # take batches. An iterator takes a batch while holding _handover, checking its generation
    # before and after the engine's next(); the engine's epoch is stopped and started only under
    # _handover, by the holder of the newest generation. So a batch of a newer epoch never goes
    # to an older iterator (which would leave the newer one short), and an older iterator never
    # stops a newer epoch. The generation is taken before waiting for _handover: an iterator
    # inside next() sees it when next() returns (within _POLL_MS) and lets go.

    def _completed(self) -> bool:
        """Every batch of self._epoch was handed out, and no epoch was chosen since."""
        return self._epoch_done and not self._epoch_chosen and self._resume_batch is None

    def _next_epoch(self) -> int:
        if self._completed() and self._epoch < _MAX_EPOCH:
            return self._epoch + 1
        return self._epoch  # after the last epoch: the state reads (last, every batch)

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
        if isinstance(epoch, bool) or not isinstance(epoch, int) or not 0 <= epoch <= _MAX_EPOCH:
            raise InvalidOptionError(
                f"epoch must be an integer in [0, 2**63 - 1], got {epoch!r}")
        reason = f"set_epoch({epoch})"
        self._new_generation(reason)  # an iterator waiting in next() lets go of _handover
        with self._handover:
            self._end_running(reason)  # also one that an iter() started meanwhile
            self._epoch = epoch
            self._epoch_chosen = True
            self._epoch_done = False
            self._position = 0
            self._resume_batch = None
            self._elastic = None

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        engine = self._live()
        # One iteration at a time: a newer iter(loader) restarts the engine, and this one ends.
        generation = self._new_generation("a newer iter(loader)")
        with self._handover:
            if generation != self._generation:
                # A newer iter(), set_epoch() or load_state_dict() came first: this iterator is
                # ended before it started (its first next() says by what).
                return _EpochIterator(self._ended(generation), lambda: None)
            self._running = None
            if self._completed() and self._epoch == _MAX_EPOCH:
                raise LoaderStateError(
                    f"epoch {_MAX_EPOCH} (2**63 - 1) was the last one an engine can deliver; "
                    "choose the next with set_epoch()")
            epoch = self._next_epoch()
            if epoch != self._epoch:
                self._elastic = None  # the epoch after an elastic rest is a normal one
            self._epoch = epoch
            start = self._resume_batch if self._resume_batch is not None else 0
            self._resume_batch = None
            self._epoch_chosen = False
            self._epoch_done = False
            if self._elastic is not None:
                self._epoch_batches = engine.start_elastic_epoch(
                    self._epoch, self._elastic[0], self._elastic[1], start)
            else:
                engine.start_epoch(self._epoch, start)
                self._epoch_batches = engine.num_batches
            self._position = start
            self._running = generation
            self._loop_start, self._loop_end, self._loop_wait_s = time.perf_counter(), None, 0.0
        return _EpochIterator(self._iterate(engine, generation),
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
                self._loop_end = time.perf_counter()
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
            self._loop_wait_s += time.perf_counter() - waited
            if batch is None:
                if done:
                    return
                continue  # timeout: lets Python deliver signals (Ctrl-C)
            out = route.host(batch)
            del batch
            for name, shape in self._reshape.items():  # e.g. Petastorm's [H, W] gray images
                if name in out:
                    out[name] = out[name].reshape((len(out[name]),) + shape)
            if self._variable:
                out = self._decode_variable(out)
            yield route.output(out) if convert else out

    def _decode_variable(self, out: Dict[str, Any]) -> Dict[str, Any]:
        """Petastorm array fields whose first dimension varies, as ``lists`` asks (decoded here,
        in Python: the workers' ops make fixed shapes only)."""
        from ._petastorm import decode_variable

        result = {}
        for key, value in out.items():
            if key not in self._variable:
                result[key] = value
                continue
            mode, field = self._variable[key]
            pad = self._pad_value.get(key, 0) if isinstance(self._pad_value, Mapping) \
                else self._pad_value
            value, lengths = decode_variable(key, value, out.get(key + "_mask"), mode, field,
                                             pad)
            result[key] = value
            if lengths is not None:
                result[key + "_lengths"] = lengths
        return result

    def _augment_keys(self, host: Iterator[Dict[str, Any]], first: int
                      ) -> Iterator[tuple]:
        """(batch, rng key, where) for the augment stage; batch ``first + k`` of the epoch, as
        augment= sees it."""
        rank, world = self._options.rank, self._options.world_size
        # During the rest of an epoch resumed on another world size, the old ranks' batches
        # come first, so no two batches of the epoch share a key.
        offset = self._elastic[0] * self._elastic[1] if self._elastic is not None else 0
        epoch, seed = self._epoch, self._seed
        for index, batch in enumerate(host, first):
            where = f"epoch {epoch}, batch {index}" + (f" of rank {rank}" if world > 1 else "")
            key = (seed, epoch, offset + index * world + rank)
            yield self._route.user_view(batch), key, where

    def _augmented(self, host: Iterator[Dict[str, Any]], generation: int
                   ) -> Iterator[Dict[str, Any]]:
        def check_live() -> None:
            self._live()
            self._check_generation(generation)

        def on_wait(seconds: float) -> None:
            if generation == self._generation:
                self._loop_wait_s += seconds

        route = self._route

        def convert(out: Dict[str, Any], where: str) -> Dict[str, Any]:
            return route.output(route.from_user(out, where), where)

        return self._augment.run(self._augment_keys(host, self._position), check_live, on_wait,
                                 convert)

    def _iterate(self, engine: Any, generation: int) -> Iterator[Dict[str, Any]]:
        # The position counts batches handed to the caller, here at the outermost yield (the
        # augment stage and the device feeder run ahead of the caller).
        augment = self._augment is not None
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
                    self._position += 1
                    if self._position >= self._epoch_batches:
                        self._epoch_done = True
                yield batch
            with self._handover:
                if generation == self._generation:
                    self._epoch_done = True
        finally:
            for stage in reversed(stages):
                stage.close()
            with self._handover:
                if generation == self._generation:  # never stop a newer iteration's engine
                    self._running = None
                    self._loop_end = time.perf_counter()
                    engine.stop()

    # ---------------------------------------------------------------------------------- resume

    def state_dict(self) -> Dict[str, int]:
        """Exactly what the caller has received: the epoch and the batches of it delivered (a
        completed epoch reads as the start of the next), plus the seed and options fingerprint.
        Plain ints: ``torch.save`` / ``torch.load(weights_only=True)`` keep it as is."""
        elastic = self._elastic
        epoch = self._next_epoch()
        if epoch != self._epoch:  # every batch of self._epoch was delivered: the next one's start
            batch, elastic = 0, None
        elif self._resume_batch is not None:
            batch = self._resume_batch
        elif self._running is None and self._epoch_chosen:
            batch = 0
        else:
            batch = self._position
        engine = self._live()
        return {
            "version": STATE_VERSION,
            "epoch": epoch,
            "batch": batch,
            "seed": self._seed,
            "fingerprint": engine.fingerprint,
            "data_fingerprint": engine.data_fingerprint,
            "rank": self._options.rank,
            "world_size": self._options.world_size,
            # Set while delivering the rest of an epoch resumed on another world size.
            "elastic_world_size": elastic[0] if elastic else 0,
            "elastic_batch": elastic[1] if elastic else 0,
            # What the fingerprints cover, as plain ints, so a mismatch names what differs.
            "options": self._option_summary(),
        }

    def _option_summary(self) -> Dict[str, int]:
        opts = self._options

        def crc(*parts: Any) -> int:
            return zlib.crc32(repr(parts).encode())

        def column_options(o: Any) -> tuple:
            # on_error joins only when set, so that states saved before it still match.
            return ((str(o.list_mode), o.pad_value, o.has_fill_null, o.fill_null, o.null_mask) +
                    (("on_error=zero",) if o.on_error_zero else ()))

        return {
            "dataset": self._live().dataset_fingerprint,
            "batch_size": opts.batch_size,
            "shuffle": int(opts.shuffle),
            "shuffle_window": self._live().shuffle_window_rows,
            "drop_last": int(opts.drop_last),
            "padding_mask": int(opts.padding_mask),
            "columns": crc(sorted(opts.columns)),
            "features": crc(list(opts.features), opts.features_name, str(opts.features_dtype),
                            opts.allow_lossy_cast) if not opts.feature_groups else
            crc([(g.name, list(g.columns), g.dtype, g.null_mask) for g in opts.feature_groups],
                opts.allow_lossy_cast),
            # Only when set, so states of loaders without categories are unchanged.
            **({"categories": crc(sorted(opts.categories.items()))} if opts.categories else {}),
            "column_options": crc(column_options(opts.default_column_options),
                                  sorted((k, column_options(v))
                                         for k, v in opts.column_options.items())),
            "transforms": crc(self._transforms),
            # Only with transform=, so states of loaders without one are unchanged.
            **({"transform": crc(self._transform_fingerprint, list(opts.transform_columns))}
               if self._runner is not None else {}),
        }

    def _differences(self, state: Mapping[str, Any]) -> str:
        saved = state.get("options")
        if not isinstance(saved, Mapping):
            return ("the dataset's files and these options must match: source, columns, "
                    "features, features_name, features_dtype, allow_lossy_cast, batch_size, "
                    "shuffle, shuffle_window, drop_last, padding_mask, transforms and the column "
                    "options (lists, pad_value, fill_null, null_mask, on_error)")
        mine = self._option_summary()
        names = {"dataset": "the dataset (its files, sizes or row counts)",
                 "features": "features (or features_name, features_dtype, allow_lossy_cast)",
                 "column_options": "the column options (lists, pad_value, fill_null, null_mask, "
                                   "on_error)"}
        differ = [names.get(k, k) + (f" (saved {saved[k]}, now {mine[k]})"
                                     if k in ("batch_size", "shuffle", "shuffle_window",
                                              "drop_last", "padding_mask") else "")
                  for k in mine if saved.get(k) != mine[k]]
        return ("these differ: " + "; ".join(differ)) if differ else \
            "the sources differ (the same files under other paths)"

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Makes the next iteration yield exactly the batches the saved loader would have.

        A state saved by another rank of the same world size is this rank's position too (the
        ranks of a data-parallel job are at the same step), so a checkpoint saved on rank 0 serves
        every rank. A state saved at another world size (every rank at the same step) resumes
        elastically: the next iteration delivers this rank's share of the
        rows the old ranks had not delivered yet, then epochs go on at this world size.

        Ends a live iterator of this loader, as ``set_epoch`` does.
        """
        state = check_state(state)  # every key's type and range, before anything is used
        engine = self._live()
        saved_rank = (state.get("rank"), state.get("world_size"))
        mine = (self._options.rank, self._options.world_size)
        saved_elastic = (state.get("elastic_world_size", 0), state.get("elastic_batch", 0))
        elastic = None
        if (saved_rank[1] is not None and saved_rank[1] != mine[1]
                and state.get("data_fingerprint") == engine.data_fingerprint):
            if saved_elastic[0]:
                raise StateMismatchError(
                    f"this state was saved during the rest of an epoch resumed on world_size="
                    f"{saved_rank[1]}; it resumes only at world_size={saved_rank[1]} (or start "
                    f"the next epoch with set_epoch({state['epoch'] + 1}))")
            elastic = (saved_rank[1], state["batch"])
        elif (saved_rank[1] == mine[1] and saved_rank[0] != mine[0]
              and state.get("data_fingerprint") == engine.data_fingerprint):
            # Another rank of the same job: the ranks of a data-parallel job are at the same step
            # (equal batches per rank, lockstep), so its position is this rank's position too.
            # This is what "save the checkpoint on rank 0" (Lightning, most DDP scripts) needs.
            pass
        elif state["fingerprint"] != engine.fingerprint:
            raise StateMismatchError(
                "state_dict was saved by a loader with other options or another dataset "
                f"(fingerprint {state['fingerprint']:#x}, this loader {engine.fingerprint:#x}); "
                + self._differences(state))
        if state["seed"] != self._seed:
            if self._seed_given:
                raise StateMismatchError(
                    f"state_dict has seed={state['seed']} but this loader was created with "
                    f"seed={self._seed}; pass seed={state['seed']} or seed=None")
        if elastic is not None and elastic[1] > engine.num_batches_at(elastic[0]):
            raise StateMismatchError(
                f"state_dict batch={elastic[1]} is outside the "
                f"{engine.num_batches_at(elastic[0])} batches per rank at world_size={elastic[0]}")
        if elastic is None and saved_elastic[0]:
            elastic = saved_elastic  # the rest of an elastic epoch, resumed at the same size
            if elastic[1] > engine.num_batches_at(elastic[0]):
                raise StateMismatchError(
                    f"state_dict elastic_batch={elastic[1]} is outside the "
                    f"{engine.num_batches_at(elastic[0])} batches per rank at "
                    f"world_size={elastic[0]}")
        elif elastic is None and not 0 <= state["batch"] <= len(self):
            raise StateMismatchError(
                f"state_dict batch={state['batch']} is outside this epoch's {len(self)} batches")
        self._new_generation("load_state_dict()")  # an iterator waiting in next() lets go
        with self._handover:
            self._end_running("load_state_dict()")
            if state["seed"] != self._seed:
                # The seed only enters the per-epoch plan: nothing is re-read.
                self._seed = state["seed"]
                engine.set_seed(self._seed)
            self._epoch = state["epoch"]
            self._epoch_chosen = True
            self._epoch_done = False
            self._elastic = elastic
            resumed_here = elastic is None or saved_elastic[0]
            self._resume_batch = state["batch"] if resumed_here else 0
            self._position = self._resume_batch

    # ------------------------------------------------------------------------------ lifecycle

    def stats(self) -> Dict[str, Any]:
        """Counters since the loader was opened, as the engine reports them.

        ``stages`` is a list in data-flow order; each has ``name``, ``pool`` (the threads it
        runs on: stages of one pool share its time), ``threads``, ``busy_s``, ``wait_in_s``,
        ``wait_out_s`` (seconds summed over threads), ``items`` and ``bytes``. Also ``cache``,
        ``storage``, ``batches``, ``rows``, ``consumer_wait_s`` and ``peak_inflight_bytes``.

        ``stall_fraction`` is the stall meter of the current (or last) iteration: the share of
        the training loop's time, from ``iter()`` to now (or to the end of the epoch), spent
        waiting for the next batch; the CPU-side stand-in for accelerator idle time.
        ``loop_s`` is that loop time.
        """
        stats = self._live().stats()
        loop_s = 0.0
        if self._loop_start is not None:
            loop_s = (self._loop_end or time.perf_counter()) - self._loop_start
        stats["loop_s"] = loop_s
        stats["stall_fraction"] = min(1.0, self._loop_wait_s / loop_s) if loop_s > 0 else 0.0
        return stats

    def flush_cache(self) -> None:
        """Waits until the ``cache_dir`` entries queued so far are written.

        Entries are stored behind the pipeline: an epoch ends with its last batch, and entries
        still queued are written during the next one (which reads them from the queue
        meanwhile). Call this when other processes should find them on disk now (e.g. before
        starting another job on the node that reads the same cache). ``close()`` does not wait:
        it drops the queue and counts the dropped entries in ``stats()["cache"]["write_skipped"]``.
        No-op without ``cache_dir``.
        """
        self._live().flush_cache()

    def close(self) -> None:
        """Stops every thread; safe from any thread. A live iteration (in this or another
        thread) then raises :class:`~stoker.errors.LoaderClosedError`. The loader cannot be used
        afterwards."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.close()  # permanent: an iter() racing this close cannot start an epoch
        self._close_runner()

    def _close_runner(self) -> None:
        runner, self._runner = getattr(self, "_runner", None), None
        if runner is not None:
            runner.close()  # a call in flight raises LoaderClosedError

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
        runner = getattr(self, "_runner", None)
        if runner is not None:
            runner.close()
