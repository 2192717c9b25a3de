"""The Loader: iterate a Parquet dataset as batches of ready tensors."""

from __future__ import annotations

import atexit
import os
import re
import secrets
import sys
import weakref
from typing import Any, Dict, Iterator, Mapping, Optional, Sequence, Union

from . import _stoker
from ._ragged import Ragged
from .errors import InvalidOptionError, StateMismatchError

__all__ = ["Loader"]

Source = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

_STATE_VERSION = 1
# Next() waits this long before returning to Python, so Ctrl-C is seen promptly.
_POLL_MS = 100
_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}
_LIVE_ENGINES: "weakref.WeakSet[Loader]" = weakref.WeakSet()

# pyarrow.fs registers the S3 finaliser with atexit on import. atexit runs hooks last-in
# first-out, so importing it before registering ours stops every loader (and its S3 reads)
# before S3 is finalised.
import pyarrow.fs  # noqa: E402,F401


def _stop_all_at_exit() -> None:
    for loader in list(_LIVE_ENGINES):
        loader.close()


atexit.register(_stop_all_at_exit)


def parse_size(value: Union[int, str], option: str) -> int:
    """``1048576``, ``"64MiB"``, ``"1.5GB"`` -> bytes. Errors name ``option``."""
    if isinstance(value, bool):
        raise InvalidOptionError(f"{option} must be a byte count or a size like '64MiB', got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, str):
        match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*([a-zA-Z]*)\s*", value)
        if match and match.group(2).lower() in _SIZE_UNITS:
            return int(float(match.group(1)) * _SIZE_UNITS[match.group(2).lower()])
    raise InvalidOptionError(f"{option} must be a byte count or a size like '64MiB', got {value!r}")


def _normalise_sources(source: Source) -> list:
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    if not items:
        raise InvalidOptionError("source is empty: give a file, folder, glob or URI")
    out = []
    for item in items:
        text = os.fspath(item)
        if not isinstance(text, str) or not text:
            raise InvalidOptionError(f"source {item!r} is not a path or URI")
        out.append(text if "://" in text else os.path.abspath(os.path.expanduser(text)))
    return out


def _resolve_rank(rank: Optional[int], world_size: Optional[int]) -> tuple:
    if (rank is None) != (world_size is None):
        raise InvalidOptionError("give both rank and world_size, or neither")
    if rank is not None:
        return int(rank), int(world_size)
    # A process group exists only if the program imported torch; importing it here would cost
    # seconds of start-up for everyone else.
    if "torch" in sys.modules:
        try:
            import torch.distributed as dist

            if dist.is_available() and dist.is_initialized():
                return dist.get_rank(), dist.get_world_size()
        except ImportError:
            pass
    env_rank, env_world = os.environ.get("RANK"), os.environ.get("WORLD_SIZE")
    if (env_rank is None) != (env_world is None):
        raise InvalidOptionError(
            f"the environment sets {'RANK' if env_world is None else 'WORLD_SIZE'} but not "
            f"{'WORLD_SIZE' if env_world is None else 'RANK'}; set both, or pass rank= and "
            "world_size=")
    if env_rank is not None and env_world is not None:
        try:
            return int(env_rank), int(env_world)
        except ValueError:
            raise InvalidOptionError(
                f"RANK={env_rank!r} / WORLD_SIZE={env_world!r} in the environment are not integers"
            ) from None
    return 0, 1


def _storage_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _per_column(value: Any, option: str) -> tuple:
    """An option given for every column (a scalar) or per column (a dict) -> (default, dict)."""
    if isinstance(value, Mapping):
        return None, dict(value)
    return value, {}


class Loader:
    """Streams a Parquet dataset as batches of numpy arrays or torch tensors.

    Fetching, decoding, conversion and batching happen in C++ threads; Python only receives
    finished batches. The batches of an epoch are a pure function of (dataset, options, seed,
    epoch, rank, world_size): identical across runs, ``num_threads`` and ``prefetch_bytes``.

    Args:
        source: A file, a folder (read recursively), a glob, a URI, or a list of these.
        columns: Columns delivered as one array each. ``None`` with no ``features``: every column.
        features: Scalar numeric/bool columns stacked into one ``[B, F]`` array named
            ``features_name``, cast to ``features_dtype``.
        batch_size: Rows per batch.
        shuffle: Shuffle row groups per epoch and rows inside the shuffle window.
        seed: Seed of every random choice. ``None`` draws one; read it back from ``loader.seed``.
        shuffle_window: Rows shuffled together (an int), or a byte size such as ``"256MiB"``.
        drop_last: Drop the rows that do not fill the last batch of every rank (equal, full
            batches everywhere). ``False`` pads ranks by wrapping around to equal row counts
            and keeps a short last batch.
        rank, world_size: This process's shard. Default: torch.distributed when initialised,
            else ``RANK``/``WORLD_SIZE`` from the environment, else 0 and 1.
        num_threads: CPU worker threads (default: the number of cores).
        num_io_threads: I/O threads: footers are read this many at once (default:
            max(4, num_threads)); for remote sources, when given, it also sizes Arrow's
            process-wide I/O pool that runs the concurrent range reads.
        prefetch_bytes: Bound on decoded data in flight, an int or a size such as ``"512MiB"``.
        output: ``"numpy"`` or ``"torch"`` (zero-copy via DLPack).
        lists: For variable-length list columns: ``"padded"`` or ``"ragged"``, for all or as a
            dict per column.
        pad_value: Value that pads ``"padded"`` lists (all, or a dict per column).
        fill_null: Value that replaces nulls (all columns, or a dict per column).
        null_mask: ``True`` or a list of columns that get a ``<name>_mask`` bool array (valid
            rows are ``True``); null values are zero.
        features_dtype: dtype of the stacked features (default ``"float32"``).
        features_name: Key of the stacked features in each batch.
        allow_lossy_cast: Allow feature casts that can lose information (int64 -> float32).
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
    """

    def __init__(
        self,
        source: Source,
        columns: Optional[Sequence[str]] = None,
        features: Optional[Sequence[str]] = None,
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
        lists: Union[None, str, Mapping[str, str]] = None,
        pad_value: Union[float, Mapping[str, float]] = 0,
        fill_null: Union[None, float, Mapping[str, float]] = None,
        null_mask: Union[bool, Sequence[str]] = False,
        features_dtype: str = "float32",
        features_name: str = "features",
        allow_lossy_cast: bool = False,
        padding_mask: bool = False,
        task_bytes: Union[int, str] = "16MiB",
        storage_options: Optional[Mapping[str, Any]] = None,
        max_retries: int = 5,
        retry_base_delay: float = 0.1,
        cache_dir: Optional[Union[str, os.PathLike]] = None,
        cache_bytes: Union[int, str] = "50GiB",
        cache_min_free_bytes: Union[int, str] = "1GiB",
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
                            ("num_io_threads", num_io_threads)):
            if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
                raise InvalidOptionError(f"{name} must be an integer, got {value!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or
                                 not 0 <= seed < 2**64):
            raise InvalidOptionError(f"seed must be an integer in [0, 2**64) or None, got {seed!r}")

        self._seed_given = seed is not None
        self._seed = int(seed) if seed is not None else secrets.randbits(63)
        self._output = output
        self._epoch = 0
        self._position = 0  # batches of the current epoch handed to the caller
        self._resume_batch: Optional[int] = None
        self._generation = 0  # counts iter() calls; only the newest iterator may run
        self._engine = None

        opts = _stoker.LoaderOptions()
        opts.sources = _normalise_sources(source)
        opts.columns = list(columns) if columns is not None else []
        opts.features = list(features) if features is not None else []
        opts.features_name = features_name
        opts.features_dtype = features_dtype
        opts.allow_lossy_cast = bool(allow_lossy_cast)
        opts.batch_size = batch_size
        opts.shuffle = bool(shuffle)
        opts.seed = self._seed
        if isinstance(shuffle_window, int) and not isinstance(shuffle_window, bool):
            opts.shuffle_window_rows = shuffle_window
        else:
            opts.shuffle_window_bytes = parse_size(shuffle_window, "shuffle_window")
        opts.drop_last = bool(drop_last)
        opts.padding_mask = bool(padding_mask)
        opts.rank, opts.world_size = _resolve_rank(rank, world_size)
        opts.num_threads = num_threads or 0
        opts.num_io_threads = num_io_threads or 0
        opts.prefetch_bytes = parse_size(prefetch_bytes, "prefetch_bytes")
        opts.task_bytes = parse_size(task_bytes, "task_bytes")
        if storage_options is not None:
            if not isinstance(storage_options, Mapping):
                raise InvalidOptionError("storage_options must be a dict of strings")
            opts.storage_options = {str(k): _storage_value(v) for k, v in storage_options.items()}
        if isinstance(max_retries, bool) or not isinstance(max_retries, int):
            raise InvalidOptionError(f"max_retries must be an integer, got {max_retries!r}")
        opts.max_retries = max_retries
        opts.retry_base_delay_s = float(retry_base_delay)
        opts.cache_dir = os.path.abspath(os.fspath(cache_dir)) if cache_dir is not None else ""
        opts.cache_bytes = parse_size(cache_bytes, "cache_bytes")
        opts.cache_min_free_bytes = parse_size(cache_min_free_bytes, "cache_min_free_bytes")
        opts.default_column_options, opts.column_options = self._column_options(
            lists, pad_value, fill_null, null_mask, opts.columns + opts.features)
        self._options = opts
        self._engine = _stoker.Engine.open(opts)
        self._columns = {info.name: info for info in self._engine.columns()}
        self._check_output_names()
        _LIVE_ENGINES.add(self)

    @staticmethod
    def _column_options(lists, pad_value, fill_null, null_mask, requested) -> tuple:
        modes = {"padded": _stoker.ListMode.padded, "ragged": _stoker.ListMode.ragged}
        list_default, list_by = _per_column(lists, "lists")
        pad_default, pad_by = _per_column(pad_value, "pad_value")
        pad_default = 0 if pad_default is None else pad_default
        fill_default, fill_by = _per_column(fill_null, "fill_null")
        if isinstance(null_mask, bool):
            mask_default, mask_by = null_mask, {}
        elif isinstance(null_mask, str):
            raise InvalidOptionError("null_mask takes True or a list of column names, not a string")
        else:
            mask_default, mask_by = False, {name: True for name in null_mask}
        for option, by in (("lists", list_by), ("pad_value", pad_by), ("fill_null", fill_by),
                           ("null_mask", mask_by)):
            for name in by:
                if requested and name not in requested:
                    raise InvalidOptionError(
                        f"{option} names column {name!r}, which is not in columns or features")

        def make(mode, pad, fill, mask, where):
            col = _stoker.ColumnOptions()
            if mode is not None:
                if mode not in modes:
                    raise InvalidOptionError(f"lists{where} must be 'padded' or 'ragged', got {mode!r}")
                col.list_mode = modes[mode]
            col.pad_value = float(pad)
            if fill is not None:
                col.has_fill_null = True
                col.fill_null = float(fill)
            col.null_mask = bool(mask)
            return col

        default = make(list_default, pad_default, fill_default, mask_default, "")
        per_column = {}
        for name in set(list_by) | set(pad_by) | set(fill_by) | set(mask_by):
            per_column[name] = make(
                list_by.get(name, list_default), pad_by.get(name, pad_default),
                fill_by.get(name, fill_default), mask_by.get(name, mask_default),
                f"[{name!r}]")
        return default, per_column

    def _check_output_names(self) -> None:
        names = set(self._columns)
        known = names | set(self._options.features)
        for name in self._options.column_options:
            if name not in known:
                raise InvalidOptionError(
                    f"a per-column option names column {name!r}, which the loader does not read")
        if self._options.padding_mask and self._options.padding_name in names:
            raise InvalidOptionError(
                f"padding_mask=True adds {self._options.padding_name!r}, which is also a column")
        for info in self._columns.values():
            extra = []
            if info.kind == _stoker.ColumnKind.padded:
                extra.append(info.name + "_lengths")
            opts = self._options.column_options.get(info.name, self._options.default_column_options)
            if opts.null_mask:
                extra.append(info.name + "_mask")
            for key in extra:
                if key in names:
                    raise InvalidOptionError(
                        f"output key {key!r} for column {info.name!r} clashes with a column of "
                        "that name; rename one of them")
                names.add(key)

    # ----------------------------------------------------------------------------------- facts

    @property
    def seed(self) -> int:
        """The seed in use (drawn at construction when ``seed=None``)."""
        return self._seed

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def columns(self) -> Dict[str, Any]:
        """What each output column is: name, Arrow type, kind, dtype, per-row shape, annotation
        (the unit of temporal columns, "utf8"/"binary" for strings)."""
        return dict(self._columns)

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

    def __repr__(self) -> str:
        if self._engine is None:
            return "Loader(closed)"
        return (f"Loader(files={self._engine.num_files}, rows={self._engine.dataset_rows}, "
                f"batches={len(self)}, batch_size={self._options.batch_size}, "
                f"rank={self._options.rank}/{self._options.world_size}, seed={self._seed})")

    # ------------------------------------------------------------------------------- iteration

    def set_epoch(self, epoch: int) -> None:
        """Selects the epoch the next iteration delivers (its order depends on it)."""
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise InvalidOptionError(f"epoch must be a non-negative integer, got {epoch!r}")
        self._epoch = epoch
        self._position = 0
        self._resume_batch = None

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        engine = self._live()
        # One iteration at a time: a newer iter(loader) restarts the engine, and this one ends.
        self._generation += 1
        generation = self._generation
        start = self._resume_batch if self._resume_batch is not None else 0
        self._resume_batch = None
        engine.start_epoch(self._epoch, start)
        self._position = start
        try:
            while True:
                if generation != self._generation:
                    raise InvalidOptionError(
                        "this iterator was replaced by a newer iter(loader): a Loader runs one "
                        "iteration at a time")
                batch, done = engine.next(_POLL_MS)
                if batch is None:
                    if done:
                        return
                    continue  # timeout: lets Python deliver signals (Ctrl-C)
                self._position += 1
                yield self._to_python(batch)
        finally:
            if generation == self._generation:  # never stop a newer iteration's engine
                engine.stop()

    def _to_python(self, batch: Any) -> Dict[str, Any]:
        if self._output == "torch":
            import torch

            convert = torch.from_dlpack
        else:
            def convert(array):
                return array
        out: Dict[str, Any] = {}
        for column in batch.columns:
            kind = column.kind
            if kind == _stoker.ColumnKind.dense:
                out[column.name] = convert(column.values)
            elif kind == _stoker.ColumnKind.padded:
                out[column.name] = convert(column.values)
                out[column.name + "_lengths"] = convert(column.lengths)
            else:
                label = column.annotation if kind == _stoker.ColumnKind.strings else "list"
                out[column.name] = Ragged(convert(column.values), convert(column.offsets), label)
            if column.has_mask:
                out[column.name + "_mask"] = convert(column.mask)
        return out

    # ---------------------------------------------------------------------------------- resume

    def state_dict(self) -> Dict[str, int]:
        """Where this loader is: epoch, batches delivered in it, seed and options fingerprint."""
        return {
            "version": _STATE_VERSION,
            "epoch": self._epoch,
            "batch": self._position if self._resume_batch is None else self._resume_batch,
            "seed": self._seed,
            "fingerprint": self._live().fingerprint,
        }

    def load_state_dict(self, state: Mapping[str, int]) -> None:
        """Makes the next iteration yield exactly the batches the saved loader would have."""
        missing = {"version", "epoch", "batch", "seed", "fingerprint"} - set(state)
        if missing:
            raise StateMismatchError(f"state_dict is missing {sorted(missing)}")
        if state["version"] != _STATE_VERSION:
            raise StateMismatchError(
                f"state_dict version {state['version']} is not supported (expected {_STATE_VERSION})")
        engine = self._live()
        if state["fingerprint"] != engine.fingerprint:
            raise StateMismatchError(
                "state_dict was saved by a loader with other options or another dataset "
                f"(fingerprint {state['fingerprint']:#x}, this loader {engine.fingerprint:#x}); "
                "the dataset's files and these options must match: source, columns, features, "
                "features_name, features_dtype, allow_lossy_cast, batch_size, shuffle, "
                "shuffle_window, drop_last, padding_mask, rank, world_size and the column options "
                "(lists, pad_value, fill_null, null_mask)")
        if state["seed"] != self._seed:
            if self._seed_given:
                raise StateMismatchError(
                    f"state_dict has seed={state['seed']} but this loader was created with "
                    f"seed={self._seed}; pass seed={state['seed']} or seed=None")
            self._reopen_with_seed(int(state["seed"]))
        if not 0 <= state["batch"] <= len(self):
            raise StateMismatchError(
                f"state_dict batch={state['batch']} is outside this epoch's {len(self)} batches")
        self._epoch = int(state["epoch"])
        self._resume_batch = int(state["batch"])
        self._position = self._resume_batch

    def _reopen_with_seed(self, seed: int) -> None:
        self._engine.stop()
        self._options.seed = seed
        self._seed = seed
        self._engine = _stoker.Engine.open(self._options)

    # ------------------------------------------------------------------------------ lifecycle

    def stats(self) -> Dict[str, Any]:
        """Per-stage busy and wait times (seconds, summed over threads), items and bytes."""
        raw = self._live().stats()
        return {
            "stages": {
                stage.name: {
                    "busy_s": stage.busy_s,
                    "wait_input_s": stage.wait_input_s,
                    "wait_output_s": stage.wait_output_s,
                    "items": stage.items,
                    "bytes": stage.bytes,
                }
                for stage in raw.stages
            },
            "cache": {name: getattr(raw.cache, name) for name in (
                "hits", "misses", "writes", "not_stored", "corrupt", "evictions", "bytes_read",
                "bytes_written", "waits")},
            "storage": {name: getattr(raw.storage, name) for name in (
                "requests", "retries", "failures", "backoff_s")},
            "batches": raw.batches,
            "rows": raw.rows,
            "consumer_wait_s": raw.consumer_wait_s,
            "peak_inflight_bytes": raw.peak_inflight_bytes,
        }

    def close(self) -> None:
        """Stops every thread. The loader cannot be used afterwards."""
        engine, self._engine = self._engine, None
        if engine is not None:
            engine.stop()

    def _live(self):
        if self._engine is None:
            raise InvalidOptionError("this Loader is closed")
        return self._engine

    def __enter__(self) -> "Loader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        engine = getattr(self, "_engine", None)
        if engine is not None:
            engine.stop()
