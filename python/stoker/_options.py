"""Loader options: Python arguments -> the engine's ``LoaderOptions``, checked with errors that
name the option."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from . import _stoker
from ._dtypes import dtype_name
from .errors import InvalidOptionError

__all__ = ["Source", "parse_size", "transform_chains",
           "set_transforms", "output_columns", "feature_columns", "feature_group_names",
           "TIME_UNITS", "DECIMAL_MODES", "Built", "build"]

Source = Union[str, os.PathLike, Sequence[Union[str, os.PathLike]]]

def parse_size(value: Union[int, str], option: str) -> int:
    """``1048576``, ``"64MiB"``, ``"1.5GB"`` -> bytes. Errors name ``option`` (the engine's
    ParseSize, cpp/src/options/)."""
    return _stoker.parse_size(value, option)


def _plain_sources(source: Any) -> Any:
    """``source`` with os.PathLike items as str (the engine checks and normalises the paths)."""
    if isinstance(source, (str, os.PathLike)):
        return os.fspath(source)
    if isinstance(source, (bytes, Mapping)) or not isinstance(source, Iterable):
        return source
    return [os.fspath(item) if isinstance(item, os.PathLike) else item for item in source]


def _chain(chain: Any, where: str) -> list:
    ops = [chain] if isinstance(chain, Mapping) else list(chain)
    return [_dtype_param(dict(op), f"{where}[{position}]") for position, op in enumerate(ops)]


def _dtype_param(op: dict, where: str) -> dict:
    if "dtype" in op:
        op["dtype"] = dtype_name(op["dtype"], f"{where} ({op['op']}) dtype")
    return op


def transform_chains(transforms: Mapping[str, Any]) -> dict:
    """``transforms`` as the engine checked its shape (BuildLoaderOptions: ``{column: [op, ...]}``
    or ``{column: {output: [op, ...], ...}}``), each chain a list of op dicts, with numpy/torch
    dtype objects in op parameters as names (only Python knows them)."""
    out: dict = {}
    for column, chain in transforms.items():
        where = f"transforms[{column!r}]"
        if isinstance(chain, Mapping) and "op" not in chain:
            out[column] = {output: _chain(ops, f"{where}[{output!r}]")
                           for output, ops in chain.items()}
        else:
            out[column] = _chain(chain, where)
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


# time_unit: a calendar day, hour, minute, second, millisecond, microsecond, nanosecond. The
# engine's names (cpp/src/options/), for the CLI's flags.
TIME_UNITS = tuple(_stoker.time_units())
DECIMAL_MODES = tuple(_stoker.decimal_modes())

# The keyword options the engine's BuildLoaderOptions checks and sets (cpp/src/options/build.cc),
# besides features, features_dtype and categories (given with Python objects made plain).
_ENGINE_OPTIONS = ("features_name", "null_mask", "batch_size", "shuffle", "shuffle_window",
                   "drop_last", "padding_mask", "num_threads", "num_io_threads", "prefetch_bytes",
                   "task_bytes",
                   "storage_options", "max_retries", "retry_base_delay", "cache_bytes",
                   "cache_min_free_bytes", "allow_lossy_cast", "lists", "pad_value", "fill_null",
                   "on_error", "time_unit", "decimals")


def _dtype_names(features: Any, features_dtype: Any) -> Any:
    """``features_dtype`` with numpy and torch dtype objects as the engine's names (only Python
    knows them); the engine checks the names and how they fit ``features``."""
    if isinstance(features_dtype, Mapping):
        if features is None:
            return dict(features_dtype)  # the engine refuses a dict without features
        return {name: dtype_name(value, f"features_dtype[{name!r}]")
                for name, value in features_dtype.items()}
    where = "features_dtype" if features is None else \
        "features_dtype (a dtype, or a dict {group: dtype})"
    return dtype_name(features_dtype, where)


def _paths(categories: Any) -> Any:
    """``categories`` with os.PathLike vocabulary files as str (the engine reads them)."""
    if not isinstance(categories, Mapping):
        return categories
    return {column: os.fspath(given) if isinstance(given, os.PathLike) else given
            for column, given in categories.items()}


def feature_columns(opts: Any) -> list:
    """Every column the stacked features read, group after group."""
    if opts.feature_groups:
        return [column for group in opts.feature_groups for column in group.columns]
    return list(opts.features)


def feature_group_names(opts: Any) -> list:
    if opts.feature_groups:
        return [group.name for group in opts.feature_groups]
    return [opts.features_name] if opts.features else []


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
    built = Built(options=_stoker.LoaderOptions(), transforms={})
    if not describe:
        _check_loader_only(built, kw)
    opts = built.options
    opts.columns = list(columns) if columns is not None else []
    # Every check of the plain options, and their defaults, are the engine's.
    values = {name: kw[name] for name in _ENGINE_OPTIONS if name in kw}
    values.update(source=_plain_sources(source), features=features,
                  features_dtype=_dtype_names(features, kw["features_dtype"]),
                  categories=_paths(kw["categories"]), transforms=kw["transforms"])
    if built.transform_fn is not None:  # (without transform=, _check_loader_only refused it)
        values["transform_columns"] = kw.get("transform_columns")
    built.options = opts = _stoker.build_loader_options(values, opts, describe)
    if not describe:
        _set_loader_only(built, kw)
        cache_dir = kw["cache_dir"]
        opts.cache_dir = os.path.abspath(os.fspath(cache_dir)) if cache_dir is not None else ""
    transforms = kw["transforms"]
    built.transforms = transform_chains(transforms) if transforms is not None else {}
    _plan_petastorm(built, columns, kw, describe)
    if built.transforms:
        set_transforms(opts, built.transforms)
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
    """Sharding, the seed, the default thread count and pinning: what only Python knows
    (torch.distributed, the environment, the device)."""
    from ._distributed import agree_on_seed, default_num_threads, resolve_rank

    opts = built.options
    opts.rank, opts.world_size = resolve_rank(kw["rank"], kw["world_size"])
    built.seed_given = kw["seed"] is not None
    opts.seed = agree_on_seed(kw["seed"], opts.world_size, opts.shuffle)
    if not opts.num_threads:
        opts.num_threads = default_num_threads()
    pin_memory = kw["pin_memory"]
    opts.pin_memory = built.device is not None if pin_memory is None else pin_memory


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
