"""``transform=``: the user's Python function on each decoded row group, in the engine's workers.

The engine (``cpp/src/decode/decoder.cc``, with ``cpp/src/resolve/user_transform.cc`` and the
trampoline in ``python/bindings/register_user_transform.cc``) reads a row group's raw columns,
hands them to :class:`TransformGlue` through the Arrow C data interface on a worker thread, and
caches what it returns. Everything Python-side lives here: Arrow -> numpy for the input,
numpy -> Arrow for the output, the function's fingerprint (part of the cache key), and
Petastorm's ``TransformSpec``.

Input conversion (one numpy array per column, first dimension = rows):

- numeric, bool, date/time columns -> 1-D arrays (zero-copy where Arrow allows); with nulls, a
  ``numpy.ma.MaskedArray`` (masked where null) so no value changes type or meaning;
- fixed-size lists and ``arrow.fixed_shape_tensor`` columns -> N-D arrays ``[rows, ...]`` (masked
  arrays when rows are null);
- strings / binary -> object arrays of ``str`` / ``bytes`` (``None`` where null);
- variable-length lists -> object arrays of 1-D arrays (``None`` where null).

Output conversion (each value an array whose first dimension is the input's row count):

- 1-D numeric/bool/datetime -> a scalar column (a masked array's masked rows become nulls);
- N-D numeric/bool -> a fixed-shape tensor column (``[rows, d1, d2, ...]``);
- object arrays of ``str`` / ``bytes`` (or numpy ``U``/``S`` arrays) -> string / binary columns;
- object arrays of 1-D numeric arrays -> list columns (use ``lists=`` as for a file's lists).
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import types
from collections.abc import Mapping as MappingABC
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

import numpy as np
import pyarrow as pa

from . import errors
from .errors import InvalidOptionError, StokerError, TransformError

__all__ = ["TransformSpec", "TransformGlue", "user_transform", "fingerprint",
           "arrow_to_numpy", "numpy_to_arrow"]

Arrays = Dict[str, np.ndarray]


# ------------------------------------------------------------------------------ Arrow -> numpy

def _values_without_validity(array: pa.Array) -> pa.Array:
    """The same values with the validity bitmap dropped (what sits under a null stays)."""
    return pa.Array.from_buffers(array.type, len(array), [None] + array.buffers()[1:],
                                 offset=array.offset)


def _fixed_shape(type_: pa.DataType) -> Tuple[List[int], pa.DataType]:
    shape = []
    while pa.types.is_fixed_size_list(type_):
        shape.append(type_.list_size)
        type_ = type_.value_type
    return shape, type_


def _slots(array: pa.Array) -> pa.Array:
    """The flat values of a (nested) fixed-size list array, null rows' slots included
    (``flatten()`` would skip them)."""
    flat = array
    while pa.types.is_fixed_size_list(flat.type):
        size = flat.type.list_size
        flat = flat.values.slice(flat.offset * size, len(flat) * size)
    return flat


def _column_to_numpy(array: pa.Array) -> np.ndarray:
    rows = len(array)
    valid = None
    if array.null_count:
        valid = array.is_valid().to_numpy(zero_copy_only=False)
    if isinstance(array.type, pa.ExtensionType):
        if isinstance(array, pa.FixedShapeTensorArray):
            shape = list(array.type.shape)
            values = _slots(array.storage).to_numpy(zero_copy_only=False).reshape([rows] + shape)
            return values if valid is None else _masked_rows(values, valid)
        array = array.storage
    type_ = array.type
    if pa.types.is_fixed_size_list(type_):
        shape, _ = _fixed_shape(type_)
        values = _slots(array).to_numpy(zero_copy_only=False).reshape([rows] + shape)
        return values if valid is None else _masked_rows(values, valid)
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        offsets = array.offsets.to_numpy()
        flat = array.values.to_numpy(zero_copy_only=False)
        out = np.empty(rows, dtype=object)
        for row in range(rows):
            out[row] = flat[offsets[row]:offsets[row + 1]] if valid is None or valid[row] else None
        return out
    if (pa.types.is_string(type_) or pa.types.is_large_string(type_) or pa.types.is_binary(type_)
            or pa.types.is_large_binary(type_)):
        return array.to_numpy(zero_copy_only=False)  # object array, None where null
    if valid is None:
        return array.to_numpy(zero_copy_only=False)
    values = _values_without_validity(array).to_numpy(zero_copy_only=False)
    return np.ma.MaskedArray(values, mask=~valid)


def _masked_rows(values: np.ndarray, valid: np.ndarray) -> np.ma.MaskedArray:
    mask = np.broadcast_to((~valid).reshape((-1,) + (1,) * (values.ndim - 1)), values.shape)
    return np.ma.MaskedArray(values, mask=mask.copy())


def arrow_to_numpy(batch: pa.RecordBatch) -> Arrays:
    """One row group's columns as the dict ``transform=`` receives (see the module notes)."""
    return {name: _column_to_numpy(batch.column(i)) for i, name in enumerate(batch.schema.names)}


# ------------------------------------------------------------------------------ numpy -> Arrow

def _output_error(where: str, key: Any, message: str) -> TransformError:
    return TransformError(f"{where}: transform= output {key!r} {message}")


def _missing(item: Any) -> bool:
    return item is None or (isinstance(item, float) and item != item)


def _column_to_arrow(key: str, value: Any, rows: int, where: str) -> pa.Array:
    if isinstance(value, pa.ChunkedArray):
        value = value.combine_chunks()
    if isinstance(value, pa.Array):
        if len(value) != rows:
            raise _output_error(where, key, f"has {len(value)} rows, the input {rows}; every "
                                "output must keep the row count (first dimension) of its input")
        return value
    if not isinstance(value, np.ndarray):
        try:
            value = np.asarray(value)
        except Exception as error:  # anything numpy cannot take is the caller's type error
            raise _output_error(where, key, f"is a {type(value).__name__}, not an array: "
                                f"{error}") from error
    if value.ndim == 0:
        raise _output_error(where, key, f"is a scalar ({value.dtype}); return an array with one "
                            f"entry per row ({rows})")
    if value.shape[0] != rows:
        raise _output_error(where, key, f"has {value.shape[0]} rows (shape {value.shape}) from "
                            f"{rows} input rows; every output must keep the row count (first "
                            "dimension) of its input")
    mask = np.ma.getmaskarray(value) if isinstance(value, np.ma.MaskedArray) else None
    data = np.ma.getdata(value) if mask is not None else value
    kind = data.dtype.kind
    if kind == "O":
        if data.ndim != 1:
            raise _output_error(where, key, f"is an object array of shape {data.shape}; object "
                                "outputs must be 1-D (str, bytes or 1-D arrays per row)")
        # None, and the NaN pandas puts in missing string cells, are nulls.
        sample = next((item for item in data if not _missing(item)), None)
        try:
            if sample is None or isinstance(sample, str):
                return pa.array(data, type=pa.string(), mask=mask, from_pandas=True)
            if isinstance(sample, (bytes, bytearray, memoryview)):
                return pa.array(data, type=pa.binary(), mask=mask, from_pandas=True)
            if isinstance(sample, np.ndarray):
                element = pa.from_numpy_dtype(sample.dtype)
                cells = [None if _missing(item) else np.asarray(item).reshape(-1)
                         for item in data]
                return pa.array(cells, type=pa.list_(element), mask=mask)
            return pa.array(list(data), mask=mask)
        except (pa.ArrowException, TypeError, ValueError) as error:
            raise _output_error(where, key, f"cannot become a column: {error}") from error
    if kind in "US":
        if data.ndim != 1:
            raise _output_error(where, key, f"is a string array of shape {data.shape}; string "
                                "outputs must be 1-D")
        return pa.array(data.astype(object), type=pa.string() if kind == "U" else pa.binary(),
                        mask=mask)
    if kind not in "biufmM":
        raise _output_error(where, key, f"has dtype {data.dtype}, which cannot become a column")
    data = np.ascontiguousarray(data)
    if data.ndim == 1:
        return pa.array(data, mask=mask)
    flat: pa.Array = pa.array(data.reshape(-1))
    for dim in reversed(data.shape[1:]):
        flat = pa.FixedSizeListArray.from_arrays(flat, int(dim))
    if mask is not None and mask.any():
        row_null = pa.array(mask.reshape(rows, -1).any(axis=1))
        flat = pa.FixedSizeListArray.from_arrays(flat.values, flat.type.list_size,
                                                 mask=row_null)
    return flat


def numpy_to_arrow(arrays: Any, rows: int, where: str) -> pa.RecordBatch:
    """What ``transform=`` returned -> one record batch; errors name ``where`` and the key."""
    if not isinstance(arrays, MappingABC):
        raise TransformError(f"{where}: transform= must return a dict of arrays, got "
                             f"{type(arrays).__name__}")
    names, columns = [], []
    for key, value in arrays.items():
        if not isinstance(key, str):
            raise TransformError(f"{where}: transform= returned key {key!r}; keys must be str")
        names.append(key)
        columns.append(_column_to_arrow(key, value, rows, where))
    if not names:
        raise TransformError(f"{where}: transform= returned an empty dict")
    return pa.RecordBatch.from_arrays(columns, names=names)


# ------------------------------------------------------------------------------------ the glue

def _kind(error: StokerError) -> str:
    for kind, cls in errors._BY_KIND.items():
        if type(error) is cls:
            return kind
    for kind, cls in errors._BY_KIND.items():
        if isinstance(error, cls):
            return kind
    return "transform"


class TransformGlue:
    """What the engine calls on a worker thread (GIL held): capsules in, capsules out.

    Never raises: an error comes back as ``(kind, message)`` for the engine to raise as the
    matching :mod:`stoker.errors` class.
    """

    def __init__(self, runner: Any, name: str = "transform") -> None:
        self._runner = runner
        self._name = name

    def __call__(self, schema_capsule: Any, array_capsule: Any, where: str) -> tuple:
        try:
            batch = pa.RecordBatch._import_from_c_capsule(schema_capsule, array_capsule)
            out = self._runner.call(self._name, arrow_to_numpy(batch), where)
            return numpy_to_arrow(out, batch.num_rows, where).__arrow_c_array__()
        except StokerError as error:
            return (_kind(error), str(error))
        except Exception as error:  # a bug of ours or the user's: never cross into C++ raw
            return ("transform", f"{where}: transform= failed: {type(error).__name__}: {error}")


# ----------------------------------------------------------------------------- fingerprinting

_PLAIN = (type(None), bool, int, float, complex, str, bytes)


def _feed(h: "hashlib._Hash", obj: Any, depth: int, seen: set) -> None:
    """Adds what defines `obj` to `h`: code, constants, defaults and plain-data closure values.
    Objects that are not plain data contribute their type's name only."""
    if depth > 12:
        h.update(b"<deep>")
        return
    if isinstance(obj, _PLAIN):
        h.update(f"{type(obj).__name__}:{obj!r};".encode())
        return
    if isinstance(obj, np.ndarray):
        h.update(f"ndarray:{obj.dtype}:{obj.shape};".encode())
        h.update(np.ascontiguousarray(obj).tobytes())
        return
    if isinstance(obj, np.generic):
        h.update(f"{obj.dtype}:{obj!r};".encode())
        return
    if id(obj) in seen:
        h.update(b"<cycle>")
        return
    seen = seen | {id(obj)}
    if isinstance(obj, (list, tuple, set, frozenset)):
        h.update(f"{type(obj).__name__}[{len(obj)}]".encode())
        items = sorted(obj, key=repr) if isinstance(obj, (set, frozenset)) else obj
        for item in items:
            _feed(h, item, depth + 1, seen)
        return
    if isinstance(obj, dict):
        h.update(f"dict[{len(obj)}]".encode())
        for key in sorted(obj, key=repr):
            _feed(h, key, depth + 1, seen)
            _feed(h, obj[key], depth + 1, seen)
        return
    if isinstance(obj, types.CodeType):
        h.update(b"code:")
        h.update(obj.co_code)
        h.update(repr((obj.co_names, obj.co_varnames, obj.co_argcount)).encode())
        for const in obj.co_consts:
            _feed(h, const, depth + 1, seen)
        return
    if isinstance(obj, functools.partial):
        h.update(b"partial:")
        _feed(h, obj.func, depth + 1, seen)
        _feed(h, obj.args, depth + 1, seen)
        _feed(h, obj.keywords, depth + 1, seen)
        return
    if isinstance(obj, types.MethodType):
        h.update(b"method:")
        _feed(h, obj.__func__, depth + 1, seen)
        _feed(h, obj.__self__, depth + 1, seen)
        return
    if isinstance(obj, types.FunctionType):
        h.update(f"function:{obj.__module__}.{obj.__qualname__};".encode())
        _feed(h, obj.__code__, depth + 1, seen)
        _feed(h, obj.__defaults__, depth + 1, seen)
        _feed(h, obj.__kwdefaults__, depth + 1, seen)
        for cell in obj.__closure__ or ():
            try:
                value = cell.cell_contents
            except ValueError:  # an empty cell
                h.update(b"<empty>")
                continue
            _feed(h, value, depth + 1, seen)
        return
    if isinstance(obj, (types.BuiltinFunctionType, type, types.ModuleType)):
        h.update(f"{type(obj).__name__}:{getattr(obj, '__module__', '')}."
                 f"{getattr(obj, '__qualname__', getattr(obj, '__name__', ''))};".encode())
        return
    cls = type(obj)
    h.update(f"object:{cls.__module__}.{cls.__qualname__};".encode())
    call = getattr(cls, "__call__", None)
    if isinstance(call, types.FunctionType):
        _feed(h, call, depth + 1, seen)
    state = getattr(obj, "__dict__", None)
    if isinstance(state, dict):
        _feed(h, {k: v for k, v in state.items() if _is_plain_data(v)}, depth + 1, seen)


def _is_plain_data(value: Any) -> bool:
    if isinstance(value, _PLAIN + (np.ndarray, np.generic)):
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return all(_is_plain_data(item) for item in value)
    if isinstance(value, dict):
        return all(_is_plain_data(k) and _is_plain_data(v) for k, v in value.items())
    return False


def fingerprint(fn: Any, version: Optional[str] = None) -> str:
    """A stable hex digest of ``fn``: module, qualified name, code objects and their constants
    (recursively), defaults, and closure values that are plain data; plus ``version``.

    Changes in other code ``fn`` calls are not seen: pass a new ``transform_version`` then."""
    h = hashlib.sha256()
    h.update(b"stoker-transform-v1;")
    _feed(h, fn, 0, set())
    h.update(f"version:{version!r}".encode())
    return h.hexdigest()[:32]


# ------------------------------------------------------------------------------ TransformSpec

class TransformSpec:
    """Petastorm's ``TransformSpec``, accepted as ``transform=`` (a ``petastorm.transform.
    TransformSpec`` is accepted too).

    Args:
        func: Takes and returns a pandas ``DataFrame`` of one row group. Columns with more than
            one value per row (tensors) hold one numpy array per cell, as Petastorm gives them.
            ``None``: the columns are passed through (to remove or select some).
        edit_fields: New or changed output fields, as ``(name, numpy_dtype, shape, nullable)``
            tuples or ``petastorm.unischema.UnischemaField``\\ s. A field with a fixed ``shape``
            becomes a tensor column ``[rows, *shape]``; a ``None`` dimension, a list column. Its
            values are cast to ``numpy_dtype``.
        removed_fields: Columns removed from the output (also when ``func`` left them).
        selected_fields: The output columns, in this order (instead of ``removed_fields``).
    """

    def __init__(self, func: Optional[Callable[[Any], Any]] = None,
                 edit_fields: Optional[Sequence[Any]] = None,
                 removed_fields: Optional[Sequence[str]] = None,
                 selected_fields: Optional[Sequence[str]] = None) -> None:
        if removed_fields is not None and selected_fields is not None:
            raise InvalidOptionError("TransformSpec takes removed_fields or selected_fields, "
                                     "not both")
        self.func = func
        self.edit_fields = list(edit_fields or [])
        self.removed_fields = list(removed_fields or [])
        self.selected_fields = list(selected_fields) if selected_fields is not None else None

    def __repr__(self) -> str:
        return (f"TransformSpec(func={self.func!r}, edit_fields={self.edit_fields!r}, "
                f"removed_fields={self.removed_fields!r}, "
                f"selected_fields={self.selected_fields!r})")


def _is_transform_spec(obj: Any) -> bool:
    return (not callable(obj) or isinstance(obj, TransformSpec)) and all(
        hasattr(obj, name) for name in ("func", "edit_fields", "removed_fields",
                                        "selected_fields"))


def _edit_field(field: Any) -> Tuple[str, np.dtype, Optional[tuple], bool]:
    """A 4-tuple or a UnischemaField -> (name, dtype, shape, nullable)."""
    if hasattr(field, "numpy_dtype") and hasattr(field, "name"):
        name, dtype, shape, nullable = (field.name, field.numpy_dtype, field.shape,
                                        getattr(field, "nullable", False))
    else:
        try:
            name, dtype, shape, nullable = field
        except (TypeError, ValueError):
            raise InvalidOptionError(
                f"TransformSpec edit_fields entries are (name, numpy_dtype, shape, nullable) "
                f"tuples or UnischemaFields, got {field!r}") from None
    if not isinstance(name, str):
        raise InvalidOptionError(f"TransformSpec edit_fields: field name {name!r} is not a str")
    try:
        np_dtype = np.dtype(dtype)
    except TypeError:
        raise InvalidOptionError(f"TransformSpec edit_fields[{name!r}]: {dtype!r} is not a numpy "
                                 "dtype") from None
    return name, np_dtype, None if shape is None else tuple(shape), bool(nullable)


def _to_pandas_column(values: np.ndarray) -> Any:
    import pandas as pd

    if isinstance(values, np.ma.MaskedArray) and values.ndim == 1:
        data = np.ma.getdata(values)
        if data.dtype.kind in "iuf":  # what Arrow's to_pandas does with nulls
            return pd.Series(np.where(values.mask, np.nan, data.astype(np.float64)))
        out = data.astype(object)
        out[values.mask] = None
        return pd.Series(out)
    if values.ndim > 1:  # one array per cell, as Petastorm gives tensor fields
        cells = np.empty(len(values), dtype=object)
        for row in range(len(values)):
            cells[row] = np.ma.getdata(values[row])
        return pd.Series(cells)
    return pd.Series(values)


def _from_pandas_column(name: str, column: Any, field: Optional[tuple]) -> np.ndarray:
    values = column.to_numpy()
    if field is not None:
        _, dtype, shape, _ = field
        if shape is not None and len(shape) > 0:
            if any(dim is None for dim in shape):  # variable: a list column
                out = np.empty(len(values), dtype=object)
                for row, cell in enumerate(values):
                    out[row] = (None if _missing(cell) else
                                np.asarray(cell, dtype=dtype).reshape(-1))
                return out
            cells = [np.asarray(cell) for cell in values]
            for row, cell in enumerate(cells):
                if cell.shape != tuple(shape):
                    raise ValueError(
                        f"TransformSpec field {name!r} must have shape {tuple(shape)} per row "
                        f"(edit_fields), row {row} has {cell.shape}")
            if not cells:
                return np.empty((0,) + tuple(shape), dtype=dtype)
            return np.stack(cells).astype(dtype, copy=False)
        if dtype.kind in "biufmM":
            return np.asarray(values).astype(dtype, copy=False)
        return np.asarray(values, dtype=object)
    if values.dtype == object and len(values) and isinstance(values[0], np.ndarray):
        shapes = {np.shape(cell) for cell in values if cell is not None}
        if len(shapes) == 1 and all(cell is not None for cell in values):
            return np.stack(list(values))
    return values


def _spec_function(spec: Any) -> Callable[[Arrays], Arrays]:
    """``transform=`` for a TransformSpec: Petastorm's semantics (petastorm/transform.py,
    arrow_reader_worker.py) on a DataFrame of one row group."""
    edits = [_edit_field(field) for field in spec.edit_fields]
    edit_names = {field[0] for field in edits}
    removed = list(spec.removed_fields or [])
    selected = list(spec.selected_fields) if spec.selected_fields is not None else None
    func = spec.func

    def schema(input_names: List[str]) -> List[str]:
        names = [name for name in input_names if name not in edit_names and name not in removed]
        names += [field[0] for field in edits]
        if selected is not None:
            names = sorted((name for name in names if name in selected), key=selected.index)
        return names

    def apply(arrays: Arrays) -> Arrays:
        import pandas as pd

        frame = pd.DataFrame({name: _to_pandas_column(values) for name, values in arrays.items()})
        result = func(frame) if func is not None else frame
        if not isinstance(result, pd.DataFrame):
            raise TypeError(f"TransformSpec func must return a pandas DataFrame, got "
                            f"{type(result).__name__}")
        names = schema(list(arrays))
        result = result.drop(columns=[c for c in result.columns if c in removed])
        if selected is not None:  # Petastorm's reader selects the schema's columns
            result = result[[c for c in result.columns if c in names]]
        if set(result.columns) != set(names):
            raise ValueError(
                f"TransformSpec func returned columns {sorted(map(str, result.columns))} but its "
                f"edit_fields/removed_fields/selected_fields make {sorted(names)}")
        by_name = {field[0]: field for field in edits}
        return {name: _from_pandas_column(name, result[name], by_name.get(name))
                for name in names}

    return apply


def user_transform(transform: Any, version: Optional[str]) -> Tuple[Callable[[Arrays], Arrays],
                                                                    str]:
    """``transform=`` (a callable or a TransformSpec) -> (the callable, its fingerprint)."""
    if version is not None and not isinstance(version, str):
        raise InvalidOptionError(f"transform_version must be a str, got {version!r}")
    if _is_transform_spec(transform):
        edits = [_edit_field(field) for field in transform.edit_fields or []]
        digest = fingerprint((transform.func, [(n, str(d), s, b) for n, d, s, b in edits],
                              list(transform.removed_fields or []),
                              transform.selected_fields), version)
        return _spec_function(transform), digest
    if not callable(transform):
        raise InvalidOptionError(
            f"transform must be a callable taking and returning a dict of numpy arrays, or a "
            f"TransformSpec; got {type(transform).__name__}")
    return transform, fingerprint(transform, version)
