"""The one conversion route: engine batches, and the dicts user code returns, into the numpy
arrays or torch tensors the caller receives.

Every path a batch takes (plain iteration, ``augment=`` on threads or ``python_workers``
processes, ``stoker.IterableDataset``, the device hand-off) goes through one :class:`Route`:

    engine batch --host()--> numpy dict ------------------------------------------+
                             (bfloat16 as int16 bits)                              |
                                 |  augment=: user_view() -> fn -> from_user()     |
                                 v                                                 v
                             numpy dict (bfloat16 as int16 bits) ---output()---> numpy / torch

so a dtype becomes the same numpy dtype or torch dtype whichever path it took. numpy has no
bfloat16: ``output="numpy"`` refuses a bfloat16 column when the loader is created; with
``output="torch"`` the column travels as its int16 bits, viewed as ``torch.bfloat16`` by
:meth:`Route.output`, and ``augment=`` (numpy code) sees it widened to float32 (exact) and returns
it as float32, rounded back to bfloat16 exactly as the engine rounds (nearest even; an unchanged
value keeps its bits).
"""

from __future__ import annotations

import functools
import re
import sys
from typing import Any, Callable, Dict, FrozenSet, List, Mapping

import numpy as np

from . import _stoker
from ._ragged import Ragged
from .errors import InternalError, InvalidOptionError, TransformError

__all__ = ["Route", "from_torch", "map_arrays", "lengths_key", "mask_key", "valid_key",
           "added_keys", "check_output_names"]


# ------------------------------------------------------------------ the keys a column adds
#
# A column's batch entry is its name; these name the keys it adds beside it. Route.host makes
# the keys of a batch with them, and check_output_names the keys a loader will make, at open.


def lengths_key(name: str, level: int = 0) -> str:
    """A padded list's lengths: level 0 the rows' (``<name>_lengths``), level l >= 1 those of
    the l-th level below (``<name>_lengths_l``, lists of lists)."""
    return f"{name}_lengths_{level}" if level else name + "_lengths"


def mask_key(name: str, level: int = 0) -> str:
    """Validity under null_mask: level 0 the rows' (``<name>_mask``), level l >= 1 the items of
    the l-th level below (``<name>_mask_l``: inner lists, strings, elements)."""
    return f"{name}_mask_{level}" if level else name + "_mask"


def valid_key(name: str) -> str:
    """on_error='zero' transforms: False where a zero tensor was substituted."""
    return name + "_valid"


def added_keys(name: str, lengths_levels: int, masked: bool, mask_levels: int,
               valid: bool) -> List[str]:
    """The keys column ``name`` adds, in batch order: ``lengths_levels`` lengths arrays (a padded
    list: 1 + its levels below the rows; 0 otherwise), the row mask and ``mask_levels`` element
    masks when ``masked``, and the valid array when ``valid``."""
    keys = [lengths_key(name, level) for level in range(lengths_levels)]
    if masked:
        keys += [mask_key(name, level) for level in range(mask_levels + 1)]
    if valid:
        keys.append(valid_key(name))
    return keys


def map_arrays(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to an array, or to every array of a (nested) :class:`Ragged`."""
    if isinstance(value, Ragged):
        return Ragged(map_arrays(value.values, fn), fn(value.offsets), value.kind)
    return fn(value)


def _map_innermost(value: Any, fn: Callable[[Any], Any]) -> Any:
    """``fn`` applied to the innermost values only (offsets are left as they are)."""
    if isinstance(value, Ragged):
        return Ragged(_map_innermost(value.values, fn), value.offsets, value.kind)
    return fn(value)


def _innermost(value: Any) -> Any:
    while isinstance(value, Ragged):
        value = value.values
    return value


@functools.lru_cache(maxsize=None)
def _plain_dtype(dtype: np.dtype) -> np.dtype:
    """The same dtype as numpy spells it from its code (``<u8``: numpy's ``uint64``)."""
    return np.dtype(dtype.str) if dtype.kind in "biufc" else dtype


def _widen_bfloat16(bits: np.ndarray) -> np.ndarray:
    """int16 bfloat16 bits -> float32, exact (a bfloat16 is the top half of a float32)."""
    return (bits.view(np.uint16).astype(np.uint32) << 16).view(np.float32)


def _narrow_to_bfloat16(values: np.ndarray) -> np.ndarray:
    """float32 -> int16 bfloat16 bits, as the engine's FloatToBFloat16 (round to nearest even; a
    NaN stays a quiet NaN with its sign)."""
    x = np.ascontiguousarray(values).view(np.uint32)
    nan = (x & 0x7FFFFFFF) > 0x7F800000
    rounded = (x + (0x7FFF + ((x >> 16) & 1))) >> 16
    return np.where(nan, (x >> 16) | 0x40, rounded).astype(np.uint16).view(np.int16)


def from_torch(out: Any) -> Any:
    """``augment=`` output with CPU torch tensors (torchvision.transforms.v2 code returns them) as
    numpy arrays sharing their memory; a bfloat16 tensor becomes float32, as augment= receives
    bfloat16 columns. The schema checks then see numpy, whichever the user returned."""
    torch = sys.modules.get("torch")
    if torch is None or not isinstance(out, Mapping):
        return out
    result = dict(out)
    for key, value in out.items():
        if not isinstance(value, torch.Tensor):
            continue
        if value.device.type != "cpu":
            raise TransformError(
                f"augment= returned a tensor on {value.device} for key {key!r}; return CPU "
                "tensors or numpy arrays (the loader moves batches to device= itself)")
        value = value.detach()
        if value.dtype == torch.bfloat16:
            value = value.float()
        result[key] = value.numpy()
    return result


class Route:
    """How one loader's batches become what its caller receives (``output``, bfloat16 keys)."""

    def __init__(self, output: str, bfloat16: FrozenSet[str] = frozenset()) -> None:
        if output not in ("numpy", "torch"):
            raise InternalError(f"Route: output {output!r}")
        if bfloat16 and output != "torch":
            raise InternalError("Route: bfloat16 columns need output='torch'")
        self.output_kind = output
        self.bfloat16 = frozenset(bfloat16)

    @classmethod
    def for_columns(cls, output: str, columns: Mapping[str, Any]) -> "Route":
        """The route of a loader delivering ``columns`` (``loader.columns``) as ``output``;
        raises InvalidOptionError for a bfloat16 column with ``output="numpy"``."""
        bfloat16 = frozenset(name for name, info in columns.items()
                             if str(info.dtype) == "bfloat16")
        if bfloat16 and output != "torch":
            name = next(name for name in columns if name in bfloat16)
            raise InvalidOptionError(
                f"column {name!r} is bfloat16 (its transforms end in "
                "normalize(dtype='bfloat16') or cast(dtype='bfloat16')), which numpy "
                "cannot hold: pass output='torch' for torch.bfloat16, or choose "
                "float16/float32")
        return cls(output, bfloat16)

    # ------------------------------------------------------------------- engine -> numpy

    def host(self, batch: Any) -> Dict[str, Any]:
        """One engine batch as ``{name: numpy array}`` viewing its memory; padded lists add
        ``<name>_lengths`` (and ``<name>_lengths_1``... for lists of lists), masks ``<name>_mask``
        (and, for list columns, ``<name>_mask_1``... per level below the rows), on_error='zero'
        transforms ``<name>_valid``; ragged lists and strings become :class:`Ragged`. bfloat16
        values are their int16 bits (:meth:`output` views them as ``torch.bfloat16``)."""
        out: Dict[str, Any] = {}
        for column in batch.columns:
            if column.bfloat16 and column.name not in self.bfloat16:
                raise InternalError(f"column {column.name!r} is bfloat16, which loader.columns "
                                    "did not say")
            kind = column.kind
            if kind == _stoker.ColumnKind.dense:
                out[column.name] = column.values
            elif kind == _stoker.ColumnKind.padded:
                out[column.name] = column.values
                out[lengths_key(column.name)] = column.lengths
                # Lists of lists: each inner level's lengths, [B, L0, ..., Ll] (level l + 1).
                for level, lengths in enumerate(column.inner_lengths, 1):
                    out[lengths_key(column.name, level)] = lengths
            else:
                label = column.annotation if kind == _stoker.ColumnKind.strings else "list"
                inner = column.inner_offsets
                if inner:
                    # Lists of lists (or of strings): one Ragged per level, the innermost
                    # holding the values (bytes with kind "utf8"/"binary" for strings).
                    label = column.annotation if column.annotation in ("utf8", "binary") \
                        else "list"
                    value = Ragged(column.values, inner[-1], label)
                    for offsets in reversed(inner[:-1]):
                        value = Ragged(value, offsets, "list")
                    out[column.name] = Ragged(value, column.offsets, "list")
                else:
                    out[column.name] = Ragged(column.values, column.offsets, label)
            if column.has_mask:
                out[mask_key(column.name)] = column.mask
                # Lists: validity of each level below the rows (inner lists, strings, elements).
                for level, mask in enumerate(column.element_masks, 1):
                    out[mask_key(column.name, level)] = mask
            if column.has_valid:
                out[valid_key(column.name)] = column.valid
        return out

    # ---------------------------------------------------------------- user code (numpy)

    def user_view(self, arrays: Dict[str, Any]) -> Dict[str, Any]:
        """What ``augment=`` receives: the host dict with bfloat16 values widened to float32."""
        if not self.bfloat16:
            return arrays
        return {key: _map_innermost(value, _widen_bfloat16) if key in self.bfloat16 else value
                for key, value in arrays.items()}

    def from_user(self, out: Dict[str, Any], where: str) -> Dict[str, Any]:
        """What ``augment=`` returned, back in host form: a bfloat16 key (given as float32) must
        come back as float32 and becomes bfloat16 bits again."""
        if not self.bfloat16:
            return out
        result = dict(out)
        for key in self.bfloat16 & result.keys():
            found = getattr(_innermost(result[key]), "dtype", None)
            if found != np.float32:
                raise TransformError(
                    f"{where}: augment= output {key!r} has dtype {found}; the column is "
                    "bfloat16, which augment= receives as float32 (numpy has no bfloat16) and "
                    "must return as float32 to be delivered as torch.bfloat16")
            result[key] = _map_innermost(result[key], _narrow_to_bfloat16)
        return result

    # ------------------------------------------------------------- host -> numpy / torch

    def output(self, arrays: Dict[str, Any], where: str = "") -> Dict[str, Any]:
        """The host dict as the caller receives it: numpy as is, or torch tensors sharing the
        arrays' memory (bfloat16 bits viewed as ``torch.bfloat16``; a negatively strided array,
        e.g. from ``np.flip`` in ``augment=``, is copied)."""
        if self.output_kind == "numpy":
            return arrays
        import torch

        def tensor(key: str, array: Any) -> Any:
            try:
                # nanobind's arrays may carry numpy's "long long" types, which from_numpy
                # refuses where they alias "long" (uint64 on Linux): view them as the plain one.
                return torch.from_numpy(array.view(_plain_dtype(array.dtype)))
            except ValueError:  # negative strides
                return torch.from_numpy(np.ascontiguousarray(array))
            except TypeError:
                raise TransformError(
                    f"{where}: augment= output {key!r} has dtype "
                    f"{getattr(array, 'dtype', type(array).__name__)}, which torch cannot hold "
                    "(output='torch')") from None

        out: Dict[str, Any] = {}
        for key, value in arrays.items():
            converted = map_arrays(value, lambda array, key=key: tensor(key, array))
            if key in self.bfloat16:
                converted = _map_innermost(converted, lambda t: t.view(torch.bfloat16))
            out[key] = converted
        return out


# ------------------------------------------------------------------ output names, at open

_LIST_LEVEL = re.compile(r"(?:large_)?list<[^:<>]*: ")


def _list_depth(arrow_type: str) -> int:
    """Variable-length list levels an Arrow type string starts with ("list<item: list<item:
    int64>>": 2); fixed-size lists are not counted (they are fixed dimensions)."""
    depth, position = 0, 0
    while True:
        match = _LIST_LEVEL.match(arrow_type, position)
        if match is None:
            return depth
        depth, position = depth + 1, match.end()


def _column_options_of(options: Any, name: str) -> Any:
    """A column's options: its own, else its nearest struct parent's, else the defaults."""
    key = name
    while True:
        if key in options.column_options:
            return options.column_options[key]
        if "." not in key:
            return options.default_column_options
        key = key.rsplit(".", 1)[0]


def output_keys(info: Any, options: Any, transformed: Any) -> List[str]:
    """The keys column ``info`` (a ``loader.columns`` entry) adds beside its own in every batch
    (see :func:`added_keys`), from the loader's ``options`` and the names ``transformed`` by
    transforms=."""
    lengths_levels = 0
    if info.kind == _stoker.ColumnKind.padded:
        # The rows' lengths, and one per list level below them (a Petastorm field made padded
        # here is one level whatever its stored type).
        lengths_levels = max(1, _list_depth(info.arrow_type))
    opts = _column_options_of(options, info.name)
    if info.arrow_type == "stacked features":
        masked = any(g.null_mask for g in options.feature_groups if g.name == info.name) or (
            not options.feature_groups and options.default_column_options.null_mask)
        mask_levels = 0
    else:
        masked, mask_levels = opts.null_mask, info.mask_levels
    return added_keys(info.name, lengths_levels, masked, mask_levels,
                      opts.on_error_zero and info.name in transformed)


def check_output_names(columns: Mapping[str, Any], options: Any,
                       transforms: Mapping[str, Any]) -> None:
    """Raises InvalidOptionError when a per-column option names a column the loader does not
    read, or a key the loader adds (``<name>_lengths``, ``_lengths_N``, ``_mask``, ``_mask_N``,
    ``_valid``, ``__padding__``) is also a column's name."""
    from ._options import feature_columns, output_columns

    names = set(columns)
    known = names | set(feature_columns(options)) | set(transforms)
    for name in options.column_options:
        # A struct's name stands for its leaves ("s" for "s.a", "s.b").
        if name not in known and not any(k.startswith(name + ".") for k in known):
            raise InvalidOptionError(
                f"a per-column option names column {name!r}, which the loader does not read")
    if options.padding_mask and options.padding_name in names:
        raise InvalidOptionError(
            f"padding_mask=True adds {options.padding_name!r}, which is also a column")
    transformed = output_columns(transforms)
    for info in columns.values():
        for key in output_keys(info, options, transformed):
            if key in names:
                # How to do without the added key, for the clash's message.
                if key.startswith(lengths_key(info.name)):
                    instead = f"lists={{{info.name!r}: 'ragged'}}"
                elif key == valid_key(info.name):
                    instead = f"leave {info.name!r} out of on_error"
                else:
                    instead = f"leave {info.name!r} out of null_mask"
                raise InvalidOptionError(
                    f"output key {key!r} for column {info.name!r} clashes with a column of "
                    f"that name; leave {key!r} out of columns, or {instead}")
            names.add(key)
