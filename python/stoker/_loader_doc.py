"""The Loader's arguments, one paragraph each, appended to ``Loader.__doc__`` so that
``help(stoker.Loader)`` shows them; docs/user-guide.md, "Options", has the same as a table."""

ARGS = """
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
        shuffle_window: Rows shuffled together (an int), or a byte size such as ``"256MiB"``
            (of the columns' Parquet sizes, uncompressed). ``None``: 65,536 rows, or fewer where
            they would hold more than 256 MiB decoded (images).
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
