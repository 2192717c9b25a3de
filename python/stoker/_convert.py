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
import sys
from typing import Any, Callable, Dict, FrozenSet, Mapping, Optional, Sequence, Tuple

import numpy as np

from . import _stoker
from ._ragged import Ragged
from .errors import InternalError, InvalidOptionError, TransformError

__all__ = ["Route", "from_torch", "map_arrays"]


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

    def __init__(self, output: str, bfloat16: FrozenSet[str] = frozenset(),
                 added_keys: Optional[Mapping[str, Sequence[str]]] = None,
                 plain: FrozenSet[str] = frozenset()) -> None:
        if output not in ("numpy", "torch"):
            raise InternalError(f"Route: output {output!r}")
        if bfloat16 and output != "torch":
            raise InternalError("Route: bfloat16 columns need output='torch'")
        self.output_kind = output
        self.bfloat16 = frozenset(bfloat16)
        # {column: the keys of the arrays it adds, in batch order}: the engine's names
        # (ColumnInfo.added_keys), never spelled here.
        self.added_keys: Dict[str, Tuple[str, ...]] = {
            name: tuple(keys) for name, keys in (added_keys or {}).items()}
        # Columns delivered as one dense array and nothing beside it (not bfloat16): host()
        # reads only their name and values. Per column and batch, the other attributes cost
        # 0.4 us each through the bindings: 48 columns paid 0.1 ms a batch in the training loop.
        self.plain = frozenset(plain) - self.bfloat16
        # Every column plain (and none added by the engine's keys): host() is Batch.values().
        self.all_plain = bool(self.plain) and self.plain == set(self.added_keys)

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
        plain = frozenset(name for name, info in columns.items()
                          if info.kind == _stoker.ColumnKind.dense and not info.added_keys)
        return cls(output, bfloat16, {name: info.added_keys for name, info in columns.items()},
                   plain)

    # ------------------------------------------------------------------- engine -> numpy

    def host(self, batch: Any) -> Dict[str, Any]:
        """One engine batch as ``{name: numpy array}`` viewing its memory; the arrays a column
        carries beside its values (a padded list's lengths, per level for lists of lists; masks,
        per level below the rows for lists; on_error='zero' transforms' valid flags) under the
        keys the engine named at open (``ColumnInfo.added_keys``: ``<name>_lengths``,
        ``<name>_lengths_1``..., ``<name>_mask``, ``<name>_mask_1``..., ``<name>_valid``);
        ragged lists and strings become :class:`Ragged`. bfloat16 values are their int16 bits
        (:meth:`output` views them as ``torch.bfloat16``)."""
        if self.all_plain:  # the whole batch in one call (48 columns: 0.08 -> 0.02 ms)
            return batch.values()
        out: Dict[str, Any] = {}
        plain = self.plain
        for column in batch.columns:
            name = column.name
            if name in plain:
                out[name] = column.values
                continue
            added = []  # the arrays beside the values, in the order of ColumnInfo.added_keys
            if column.bfloat16 and name not in self.bfloat16:
                raise InternalError(f"column {name!r} is bfloat16, which loader.columns "
                                    "did not say")
            kind = column.kind
            if kind == _stoker.ColumnKind.dense:
                out[name] = column.values
            elif kind == _stoker.ColumnKind.padded:
                out[name] = column.values
                # Lists of lists: then each inner level's lengths, [B, L0, ..., Ll] (level l + 1).
                added += [column.lengths, *column.inner_lengths]
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
                    out[name] = Ragged(value, column.offsets, "list")
                else:
                    out[name] = Ragged(column.values, column.offsets, label)
            if column.has_mask:
                # Lists: then the validity of each level below the rows (inner lists, strings,
                # elements).
                added += [column.mask, *column.element_masks]
            if column.has_valid:
                added.append(column.valid)
            if added:
                keys = self.added_keys.get(name, ())
                if len(keys) != len(added):
                    raise InternalError(f"column {name!r} carries {len(added)} arrays "
                                        f"beside its values; loader.columns names {keys}")
                out.update(zip(keys, added))
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
                # An array of numpy's "long long" types (np.ulonglong, or made through the
                # buffer protocol), which from_numpy refuses where they alias "long" (uint64 on
                # Linux): viewed as the plain one.
                return torch.from_numpy(array.view(_plain_dtype(array.dtype)))
            except ValueError:  # negative strides
                return torch.from_numpy(np.ascontiguousarray(array))
            except TypeError:
                raise TransformError(
                    f"{where}: augment= output {key!r} has dtype "
                    f"{getattr(array, 'dtype', type(array).__name__)}, which torch cannot hold "
                    "(output='torch')") from None

        out: Dict[str, Any] = {}
        from_numpy, ndarray, bfloat16 = torch.from_numpy, np.ndarray, self.bfloat16
        for key, value in arrays.items():
            if type(value) is ndarray and key not in bfloat16:  # the common case, in one step
                try:  # the engine's arrays have numpy's plain dtypes: no view needed
                    out[key] = from_numpy(value)
                    continue
                except (ValueError, TypeError):
                    pass  # negative strides, a "long long" dtype or one torch lacks: tensor()
            converted = map_arrays(value, lambda array, key=key: tensor(key, array))
            if key in self.bfloat16:
                converted = _map_innermost(converted, lambda t: t.view(torch.bfloat16))
            out[key] = converted
        return out
