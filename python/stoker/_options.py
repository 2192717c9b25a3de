"""Loader options: Python arguments -> the engine's ``LoaderOptions``, checked with errors that
name the option."""

from __future__ import annotations

import dataclasses
import os
import re
from typing import Any, Callable, Mapping, Optional, Sequence, Union

from . import _stoker
from ._dtypes import dtype_name
from .errors import InvalidOptionError

__all__ = ["Source", "parse_size", "normalise_sources", "storage_value", "column_options",
           "check_int", "transform_chains", "set_transforms", "output_columns", "set_features",
           "feature_columns", "feature_group_names", "set_categories", "TIME_UNITS",
           "DECIMAL_MODES", "check_storage_options", "Built", "build"]

Source = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

_SIZE_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "kib": 2**10, "mib": 2**20, "gib": 2**30, "tib": 2**40,
}


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


def check_int(name: str, value: Any) -> None:
    """Raises unless ``value`` is None or an int (bools are refused)."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise InvalidOptionError(f"{name} must be an integer, got {value!r}")


def normalise_sources(source: Source) -> list:
    """A source or list of sources -> absolute local paths and URIs, as the engine takes them."""
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


def storage_value(value: Any) -> str:
    """A storage option's value as the engine's string (bools as true/false)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _chain(chain: Any, where: str) -> list:
    if isinstance(chain, Mapping):
        chain = [chain]
    if not isinstance(chain, Sequence) or isinstance(chain, str) or not chain:
        raise InvalidOptionError(f"{where} must be a non-empty list of ops (stoker.ops.*)")
    for position, op in enumerate(chain):
        if not isinstance(op, Mapping) or not isinstance(op.get("op"), str):
            raise InvalidOptionError(
                f"{where}[{position}] is {op!r}, not an op: use stoker.ops "
                "(e.g. stoker.ops.resize(224)) or a dict {'op': name, **params}")
    return [_dtype_param(dict(op), f"{where}[{position}]") for position, op in enumerate(chain)]


def _dtype_param(op: dict, where: str) -> dict:
    if "dtype" in op:
        op["dtype"] = dtype_name(op["dtype"], f"{where} ({op['op']}) dtype")
    return op


def transform_chains(transforms: Any) -> dict:
    """``{column: [op, ...]}`` or ``{column: {output: [op, ...], ...}}`` (several outputs of one
    column) checked for shape (ops are dicts with an "op" name, as :mod:`stoker.ops` makes
    them); the engine checks names, parameters and types."""
    if not isinstance(transforms, Mapping):
        raise InvalidOptionError("transforms must be a dict {column: [op, ...]}")
    out: dict = {}
    for column, chain in transforms.items():
        if not isinstance(column, str):
            raise InvalidOptionError(f"transforms keys are column names, got {column!r}")
        if isinstance(chain, Mapping) and "op" not in chain:
            if not chain:
                raise InvalidOptionError(f"transforms[{column!r}] names no outputs")
            outputs = {}
            for output, ops in chain.items():
                if not isinstance(output, str) or not output:
                    raise InvalidOptionError(
                        f"transforms[{column!r}] keys are output names, got {output!r}")
                outputs[output] = _chain(ops, f"transforms[{column!r}][{output!r}]")
            out[column] = outputs
        else:
            out[column] = _chain(chain, f"transforms[{column!r}]")
    return out


def set_transforms(opts: Any, chains: Mapping[str, Any]) -> None:
    """Hands checked chains (transform_chains) to the engine's options."""
    opts.set_transforms({c: ops for c, ops in chains.items() if not isinstance(ops, Mapping)})
    opts.set_transform_outputs({c: list(ops.items()) for c, ops in chains.items()
                                if isinstance(ops, Mapping)})


def output_columns(chains: Mapping[str, Any]) -> set:
    """Names of the outputs made by transforms (a column's own name, or its outputs' names)."""
    names = set()
    for column, ops in chains.items():
        names.update(ops if isinstance(ops, Mapping) else (column,))
    return names


# time_unit: a calendar day, hour, minute, second, millisecond, microsecond, nanosecond.
TIME_UNITS = ("D", "h", "m", "s", "ms", "us", "ns")
DECIMAL_MODES = ("float64", "float32", "scaled_int64")


def _per_column(value: Any) -> tuple:
    """An option given for every column (a scalar) or per column (a dict) -> (default, dict)."""
    if isinstance(value, Mapping):
        return None, dict(value)
    return value, {}


def column_options(lists: Union[None, str, Mapping[str, str]],
                   pad_value: Union[float, Mapping[str, float]],
                   fill_null: Union[None, float, Mapping[str, float]],
                   null_mask: Union[bool, Sequence[str]],
                   requested: Sequence[str],
                   on_error: Union[str, Mapping[str, str]] = "raise",
                   time_unit: Union[None, str, Mapping[str, str]] = None,
                   decimals: Union[None, str, Mapping[str, str]] = None) -> tuple:
    """The per-column options -> (default ColumnOptions, {column: ColumnOptions})."""
    modes = {"padded": _stoker.ListMode.padded, "ragged": _stoker.ListMode.ragged}
    list_default, list_by = _per_column(lists)
    pad_default, pad_by = _per_column(pad_value)
    pad_default = 0 if pad_default is None else pad_default
    fill_default, fill_by = _per_column(fill_null)
    if isinstance(null_mask, bool):
        mask_default, mask_by = null_mask, {}
    elif isinstance(null_mask, str):
        raise InvalidOptionError("null_mask takes True or a list of column names, not a string")
    else:
        mask_default, mask_by = False, {name: True for name in null_mask}
    error_default, error_by = _per_column(on_error)
    error_default = "raise" if error_default is None else error_default
    unit_default, unit_by = _per_column(time_unit)
    decimal_default, decimal_by = _per_column(decimals)
    for option, by in (("lists", list_by), ("pad_value", pad_by), ("fill_null", fill_by),
                       ("null_mask", mask_by), ("on_error", error_by), ("time_unit", unit_by),
                       ("decimals", decimal_by)):
        for name in by:
            # A struct's name stands for its leaves, and a leaf may be named below a parent.
            if requested and not any(r == name or r.startswith(name + ".") or
                                     name.startswith(r + ".") for r in requested):
                raise InvalidOptionError(
                    f"{option} names column {name!r}, which is not in columns or features")

    def make(mode, pad, fill, mask, error, where, unit=None, decimal=None):
        col = _stoker.ColumnOptions()
        for option, value, allowed in (("time_unit", unit, TIME_UNITS),
                                       ("decimals", decimal, DECIMAL_MODES)):
            if value is None:
                continue
            if value not in allowed:
                raise InvalidOptionError(
                    f"{option}{where} must be one of {', '.join(map(repr, allowed))}, "
                    f"got {value!r}")
            setattr(col, option, value)
        if error not in ("raise", "zero"):
            raise InvalidOptionError(f"on_error{where} must be 'raise' or 'zero', got {error!r}")
        col.on_error_zero = error == "zero"
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

    default = make(list_default, pad_default, fill_default, mask_default, error_default, "",
                   unit_default, decimal_default)
    per_column = {}
    for name in (set(list_by) | set(pad_by) | set(fill_by) | set(mask_by) | set(error_by) |
                 set(unit_by) | set(decimal_by)):
        per_column[name] = make(
            list_by.get(name, list_default), pad_by.get(name, pad_default),
            fill_by.get(name, fill_default), mask_by.get(name, mask_default),
            error_by.get(name, error_default), f"[{name!r}]",
            unit_by.get(name, unit_default), decimal_by.get(name, decimal_default))
    return default, per_column


def _names(value: Any, where: str) -> list:
    if isinstance(value, str) or not isinstance(value, Sequence) or \
            not all(isinstance(name, str) for name in value):
        raise InvalidOptionError(f"{where} takes a list of column names, got {value!r}")
    return list(value)


def set_features(opts: Any, features: Any, features_dtype: Any, features_name: str,
                 null_mask: Any) -> Any:
    """Sets the stacked features on the engine's options and returns ``null_mask`` without the
    group names it named (those masks are the groups').

    ``features`` is a list (one group named ``features_name``) or ``{group: [columns]}``;
    ``features_dtype`` a dtype name for every group or ``{group: dtype}`` (groups it leaves out
    are float32). ``null_mask`` may name groups: ``True`` masks every group."""
    if features is None:
        if isinstance(features_dtype, Mapping):
            raise InvalidOptionError("features_dtype is a dict but features is not given")
        opts.features_dtype = dtype_name(features_dtype, "features_dtype")
        opts.features_name = features_name
        return null_mask
    grouped = isinstance(features, Mapping)
    if grouped:
        if features_name != "features":
            raise InvalidOptionError(
                "features_name names the group of a list of features; with a dict, its keys "
                "name the groups")
        if not features:
            raise InvalidOptionError("features is an empty dict: give {group: [columns]}")
        groups = {}
        for name, columns in features.items():
            if not isinstance(name, str) or not name:
                raise InvalidOptionError(f"features keys are group names, got {name!r}")
            groups[name] = _names(columns, f"features[{name!r}]")
    else:
        groups = {features_name: _names(features, "features")}
    if isinstance(features_dtype, Mapping):
        unknown = sorted(set(features_dtype) - set(groups))
        if unknown:
            raise InvalidOptionError(
                f"features_dtype names group(s) {unknown}, which features does not define; "
                f"groups: {sorted(groups)}")
        dtypes = {name: dtype_name(features_dtype.get(name, "float32"),
                                   f"features_dtype[{name!r}]") for name in groups}
    else:
        one = dtype_name(features_dtype, "features_dtype (a dtype, or a dict {group: dtype})")
        dtypes = {name: one for name in groups}
    masked: set = set()
    rest = null_mask
    if null_mask is True:
        masked = set(groups)
    elif not isinstance(null_mask, (bool, str)) and isinstance(null_mask, Sequence):
        masked = {name for name in null_mask if name in groups}
        rest = [name for name in null_mask if name not in groups]
    if not grouped and not masked:
        # One group as before (its fingerprint unchanged); null_mask=True masks it.
        opts.features = groups[features_name]
        opts.features_name = features_name
        opts.features_dtype = dtypes[features_name]
        return rest
    made = []
    for name, columns in groups.items():
        group = _stoker.FeatureGroup()
        group.name = name
        group.columns = columns
        group.dtype = dtypes[name]
        group.null_mask = name in masked
        made.append(group)
    opts.feature_groups = made
    opts.features_name = features_name
    return rest


def feature_columns(opts: Any) -> list:
    """Every column the stacked features read, group after group."""
    if opts.feature_groups:
        return [column for group in opts.feature_groups for column in group.columns]
    return list(opts.features)


def feature_group_names(opts: Any) -> list:
    if opts.feature_groups:
        return [group.name for group in opts.feature_groups]
    return [opts.features_name] if opts.features else []


def set_categories(opts: Any, categories: Any) -> None:
    """``{column: "auto" | [values] | path of a text file, one value per line}`` -> the engine's
    ``{column: [values]}`` ([] for "auto"). A file is read here (UTF-8; blank lines skipped)."""
    if categories is None:
        return
    if not isinstance(categories, Mapping):
        raise InvalidOptionError(
            "categories must be a dict {column: 'auto' | list of str | path of a text file}")
    out = {}
    for column, given in categories.items():
        where = f"categories[{column!r}]"
        if not isinstance(column, str):
            raise InvalidOptionError(f"categories keys are column names, got {column!r}")
        if isinstance(given, str) and given == "auto":
            out[column] = []
            continue
        if isinstance(given, (str, os.PathLike)):
            path = os.fspath(given)
            try:
                with open(path, encoding="utf-8") as handle:
                    values = [line for line in handle.read().splitlines() if line.strip()]
            except OSError as exc:
                raise InvalidOptionError(
                    f"{where}: cannot read the vocabulary file {path!r}: {exc.strerror or exc}"
                ) from None
            except UnicodeDecodeError:
                raise InvalidOptionError(
                    f"{where}: the vocabulary file {path!r} is not UTF-8 text") from None
            where = f"{where} (file {path!r})"
        elif isinstance(given, Sequence) and all(isinstance(value, str) for value in given):
            values = list(given)
        else:
            raise InvalidOptionError(
                f"{where} must be 'auto', a list of str or the path of a text file, got "
                f"{given!r}")
        if not values:
            raise InvalidOptionError(f"{where} is empty: give at least one value, or 'auto'")
        seen: set = set()
        for value in values:
            if value in seen:
                raise InvalidOptionError(f"{where} lists {value!r} twice; each value gets one id")
            seen.add(value)
        out[column] = values
    opts.categories = out


def check_storage_options(sources: Sequence[str], storage_options: Any) -> None:
    """``storage_options`` configure remote filesystems: given (non-empty) with nothing but local
    paths, they would be ignored, so this raises naming the option. An empty dict is allowed
    (code that always passes one)."""
    if not storage_options:
        return
    local = [s for s in sources if "://" not in s or s.startswith("file://")]
    if len(local) == len(sources):
        raise InvalidOptionError(
            f"storage_options ({', '.join(sorted(map(str, storage_options)))}) configure remote "
            f"filesystems (s3://, gs://, hdfs://, ...), but source {local[0]!r} is a local path, "
            "where they would be ignored: drop storage_options, or give the remote URI")


# ------------------------------------------------------------------------------------- build


@dataclasses.dataclass
class Built:
    """What :func:`build` made of a Loader's (or ``describe``'s) keyword arguments."""

    options: Any  # _stoker.LoaderOptions
    transforms: dict  # checked transforms= chains, with a Petastorm store's codec ops
    seed_given: bool = False
    device: Any = None  # the parsed device=, or None (CPU)
    functions: dict = dataclasses.field(default_factory=dict)  # Python callables by name
    transform_fn: Optional[Callable[..., Any]] = None  # transform= as a plain callable
    transform_fingerprint: str = ""
    finishing: Any = None  # _petastorm.Finishing: Petastorm fields finished in Python, or None


def build(source: Source, columns: Optional[Sequence[str]], features: Any, *,
          describe: bool = False, **kw: Any) -> Built:
    """A Loader's keyword arguments (``kw``: every other ``Loader.__init__`` argument) checked,
    with errors that name the option, and turned into the engine's ``LoaderOptions``.

    ``describe=True``: what ``stoker.describe`` needs, the same way: the options that change a
    description are set (the others are checked only where a Loader would check them cheaply;
    no rank, seed or device is resolved, so nothing talks to torch.distributed), and a Petastorm
    store's fields are planned one by one (a field the Loader refuses is described as stored).
    """
    if not describe:
        output = kw["output"]
        if output not in ("numpy", "torch"):
            raise InvalidOptionError(f"output must be 'numpy' or 'torch', got {output!r}")
        if output == "torch":
            try:
                import torch  # noqa: F401
            except ImportError:
                raise InvalidOptionError("output='torch' needs PyTorch: pip install torch") from None
    if isinstance(columns, str) or isinstance(features, str):
        raise InvalidOptionError("columns and features take a list of names, not a string")
    checked_ints = ("num_io_threads",) if describe else \
        ("batch_size", "num_threads", "num_io_threads", "max_retries")
    for name in checked_ints:
        check_int(name, kw[name])
    built = Built(options=_stoker.LoaderOptions(), transforms={})
    if not describe:
        _check_loader_only(built, kw)
    opts = built.options
    opts.sources = normalise_sources(source)
    opts.columns = list(columns) if columns is not None else []
    null_mask = set_features(opts, features, kw["features_dtype"], kw["features_name"],
                             kw["null_mask"])
    set_categories(opts, kw["categories"])
    opts.allow_lossy_cast = bool(kw["allow_lossy_cast"])
    if not describe:
        _set_loader_only(built, kw)
    else:
        opts.num_io_threads = kw["num_io_threads"] or 0
    storage_options = kw["storage_options"]
    if storage_options is not None:
        if not isinstance(storage_options, Mapping):
            raise InvalidOptionError("storage_options must be a dict of strings")
        check_storage_options(opts.sources, storage_options)
        opts.storage_options = {str(k): storage_value(v) for k, v in storage_options.items()}
    if describe:
        check_int("max_retries", kw["max_retries"])
    opts.max_retries = kw["max_retries"]
    opts.retry_base_delay_s = float(kw["retry_base_delay"])
    if describe:
        # Sizes are checked as a Loader checks them, though they do not change the description.
        for name in ("prefetch_bytes", "task_bytes", "cache_bytes", "cache_min_free_bytes"):
            parse_size(kw[name], name)
    else:
        cache_dir = kw["cache_dir"]
        opts.cache_dir = os.path.abspath(os.fspath(cache_dir)) if cache_dir is not None else ""
        opts.cache_bytes = parse_size(kw["cache_bytes"], "cache_bytes")
        opts.cache_min_free_bytes = parse_size(kw["cache_min_free_bytes"],
                                               "cache_min_free_bytes")
    transforms = kw["transforms"]
    built.transforms = transform_chains(transforms) if transforms is not None else {}
    _plan_petastorm(built, columns, kw, describe)
    if built.transforms:
        set_transforms(opts, built.transforms)
    transform_columns = kw.get("transform_columns")
    if built.transform_fn is not None and transform_columns is not None:
        if isinstance(transform_columns, str) or not all(
                isinstance(name, str) for name in transform_columns):
            raise InvalidOptionError("transform_columns takes a list of column names")
        if not transform_columns:
            raise InvalidOptionError("transform_columns is empty: name at least one "
                                     "column, or pass None for all")
        opts.transform_columns = list(transform_columns)
    opts.default_column_options, opts.column_options = column_options(
        kw["lists"], kw["pad_value"], kw["fill_null"], null_mask,
        opts.columns + feature_columns(opts), kw["on_error"], kw["time_unit"], kw["decimals"])
    return built


def _check_loader_only(built: Built, kw: Mapping[str, Any]) -> None:
    """The Loader's checks of seed, the Python callables and the device, in the Loader's order
    (before any LoaderOptions field is set)."""
    from ._device import parse_device
    from ._pyworkers import check_python_options
    from ._user_transform import user_transform

    seed = kw["seed"]
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or
                             not 0 <= seed < 2**64):
        raise InvalidOptionError(f"seed must be an integer in [0, 2**64) or None, got {seed!r}")
    python_workers = kw["python_workers"]
    check_python_options(python_workers, kw["python_start_method"])
    augment, transform = kw["augment"], kw["transform"]
    if augment is not None and not callable(augment):
        raise InvalidOptionError(
            f"augment must be a callable fn(batch, rng) -> dict, got {type(augment).__name__}")
    if augment is not None:
        built.functions["augment"] = augment
    if transform is not None:
        built.transform_fn, built.transform_fingerprint = user_transform(
            transform, kw["transform_version"])
        built.functions["transform"] = built.transform_fn
    elif kw["transform_columns"] is not None or kw["transform_version"] is not None:
        raise InvalidOptionError("transform_columns and transform_version need transform=")
    if python_workers and not built.functions:
        raise InvalidOptionError(
            f"python_workers={python_workers} has nothing to run: it runs augment= (or "
            "transform=) in worker processes")
    device = kw["device"]
    built.device = parse_device(device) if device is not None else None
    if built.device is not None and kw["output"] != "torch":
        raise InvalidOptionError(f"device={str(built.device)!r} needs output='torch'")
    pin_memory = kw["pin_memory"]
    if pin_memory is not None and not isinstance(pin_memory, bool):
        raise InvalidOptionError(f"pin_memory must be True, False or None, got {pin_memory!r}")


def _set_loader_only(built: Built, kw: Mapping[str, Any]) -> None:
    """Batching, sharding, the seed, threads and memory: the options only a Loader has."""
    from ._distributed import agree_on_seed, default_num_threads, resolve_rank

    opts = built.options
    opts.batch_size = kw["batch_size"]
    opts.shuffle = bool(kw["shuffle"])
    shuffle_window = kw["shuffle_window"]
    if isinstance(shuffle_window, int) and not isinstance(shuffle_window, bool):
        opts.shuffle_window_rows = shuffle_window
    else:
        opts.shuffle_window_bytes = parse_size(shuffle_window, "shuffle_window")
    opts.drop_last = bool(kw["drop_last"])
    opts.padding_mask = bool(kw["padding_mask"])
    opts.rank, opts.world_size = resolve_rank(kw["rank"], kw["world_size"])
    built.seed_given = kw["seed"] is not None
    opts.seed = agree_on_seed(kw["seed"], opts.world_size, opts.shuffle)
    opts.num_threads = kw["num_threads"] or default_num_threads()
    opts.num_io_threads = kw["num_io_threads"] or 0
    opts.prefetch_bytes = parse_size(kw["prefetch_bytes"], "prefetch_bytes")
    pin_memory = kw["pin_memory"]
    opts.pin_memory = built.device is not None if pin_memory is None else pin_memory
    opts.task_bytes = parse_size(kw["task_bytes"], "task_bytes")


def _plan_petastorm(built: Built, columns: Optional[Sequence[str]], kw: Mapping[str, Any],
                    describe: bool) -> None:
    """A Petastorm store's codec fields become decode ops; plain Parquet is left alone."""
    petastorm = kw["petastorm"]
    if not describe and petastorm is not None and not isinstance(petastorm, bool):
        raise InvalidOptionError(f"petastorm must be None, True or False, got {petastorm!r}")
    if petastorm is False:
        return
    from ._petastorm import codec_kinds, DecodedInput, detect, Finishing, plan_columns

    store = detect(built.options.sources, kw["storage_options"], remote=petastorm is True)
    if store is None:
        return
    if describe:
        # Each field described as the Loader decodes it; one the Loader refuses (a None
        # dimension), as stored.
        from .errors import UnsupportedTypeError

        out = dict(built.transforms)
        for name in (columns if columns is not None else list(store.fields)):
            try:
                planned, _, _ = plan_columns(store, [name],
                                             {name: out[name]} if name in out else {})
            except UnsupportedTypeError:
                continue
            out.update(planned)
        built.transforms = out
    elif built.transform_fn is not None:
        # transform= sees decoded arrays, as a Petastorm TransformSpec does: the codec fields
        # are decoded before it (in Python); its outputs get no codec ops.
        built.functions["transform"] = DecodedInput(codec_kinds(store), built.transform_fn)
        built.transform_fingerprint += "|petastorm-decoded"
    else:
        wanted = None if columns is None else list(columns)
        built.transforms, reshape, variable = plan_columns(store, wanted, built.transforms,
                                                           kw["lists"])
        if reshape or variable:
            built.finishing = Finishing(reshape, variable, kw["pad_value"])
